"""Plug-ins the user names on the command line: ``--env module:EnvId`` and ``--transform``.

Only code the user names explicitly is imported. A run directory's ``config.yaml`` may name code
too (an env module, a transform); that code is imported only when the user gives the same spec
again on the command line, or passes ``--trust-run-code`` (:func:`check_run_code`), and never
from a file inside the run directory itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pgrad_app.errors import UserError, suggest


def _named_code():
    """:mod:`pgrad.rl.storage.named_code`, imported when first needed: importing ``pgrad`` loads
    TensorFlow, and the commands parse their arguments (and answer errors) before that."""
    from pgrad.rl.storage import named_code
    return named_code


def _cwd_on_path():  # ``--transform my_module:fn`` from a project directory
    return _named_code().cwd_on_path()


def _import_module(name: str, what: str):
    """Imports a module by dotted name or ``.py`` file path; errors become one line."""
    import importlib
    import importlib.util
    import os
    import sys

    looks_like_path = name.endswith(".py") or os.sep in name or "/" in name
    try:
        if looks_like_path:
            path = Path(name)
            if not path.is_file():
                raise UserError(f"{what}: file {name!r} does not exist.")
            mod_name = "pgrad_user_" + path.stem.replace("-", "_")
            spec = importlib.util.spec_from_file_location(mod_name, path)
            if spec is None or spec.loader is None:
                raise UserError(f"{what}: cannot import {name!r} as a Python file.")
            module = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = module
            spec.loader.exec_module(module)
            return module
        with _cwd_on_path():
            return importlib.import_module(name)
    except UserError:
        raise
    except ModuleNotFoundError as err:
        raise UserError(f"{what}: cannot import module {name!r}: {err}.") from None
    except Exception as err:  # the user's module raised while importing
        where = ""
        if isinstance(err, SyntaxError) and err.lineno:
            where = f" (line {err.lineno})"
        raise UserError(
            f"{what}: importing {name!r} failed with {type(err).__name__}{where}: {err}"
        ) from None


def _refuse_inside(module: str, directory: Path, what: str) -> None:
    """Refuses to import ``module`` if its code would come from ``directory`` (the one rule:
    :mod:`pgrad.rl.storage.named_code`)."""
    if _named_code().inside(module, directory):
        raise UserError(f"{what}: refusing to import {module!r} from the run directory "
                        f"{directory} (a run is data; install or move the module).")


def same_spec(a: str | None, b: str | None, split_last: bool = False) -> bool:
    """:func:`pgrad.rl.storage.named_code.same_spec`: whether two specs name the same code."""
    return _named_code().same_spec(a, b, split_last)


def names_code(env_spec: str | None) -> bool:
    """Whether an env spec names a module to import (``module:EnvId``)."""
    return bool(env_spec) and ":" in str(env_spec)


def check_run_code(what: str, spec: str, given: str | None, trust: bool, run_dir: str | Path,
                   flag: str) -> None:
    """Refuses to import code named by a run directory unless the user named it too.

    Args:
      what: ``"env"`` or ``"transform"`` (for the message).
      spec: what the run directory's config names.
      given: the same setting from the command line, if given.
      trust: ``--trust-run-code`` was passed.
      run_dir: the run directory.
      flag: the command-line flag that names it (``--env``, ``--transform``).

    Raises:
      UserError: saying how to allow it.
    """
    named_code = _named_code()
    try:
        named_code.check(what, spec, run_dir, given, trust,
                         how=f"pass {flag} {spec} (after checking it), or --trust-run-code",
                         kind="run directory")
    except named_code.DirectoryCode as err:
        raise UserError(str(err)) from None


def resolve_env(spec: str, forbid_dir: str | Path | None = None) -> str:
    """Checks a Gymnasium env id (``EnvId`` or ``module:EnvId``) and returns the bare id.

    ``module:EnvId`` imports the module first, as ``gymnasium.make`` does, so that it can
    register its envs. ``module:factory`` (no registered id, a callable of the module: a
    PettingZoo game's factory, which the ippo / mappo agents build) is returned as it is.
    With ``forbid_dir`` (a run directory whose config named the env), a module found inside
    that directory is refused instead of imported.

    Raises:
      UserError: the module cannot be imported or the id is not registered (with close matches).
    """
    import gymnasium as gym

    env_id = spec
    if ":" in spec:
        module, env_id = spec.split(":", 1)
        if forbid_dir is not None:
            _refuse_inside(module, Path(forbid_dir), f"env {spec}")
        imported = _import_module(module, f"--env {spec}")
        if env_id not in gym.registry and callable(getattr(imported, env_id, None)):
            return spec  # module:factory (a PettingZoo game's): the agent builds it
    from pgrad.rl.envs.vector import ensure_registered

    try:  # ALE/..., MinAtar/...: their packages register them on import
        ensure_registered(env_id)
    except ImportError as err:
        raise UserError(str(err)) from None
    if env_id not in gym.registry:
        hint = suggest(env_id, gym.registry.keys())
        raise UserError(
            f"unknown env {env_id!r}.{hint or ' See gymnasium.pprint_registry() for the ids.'}"
        )
    return env_id


TRANSFORM_KINDS = (
    "a GradientTransform, a function returning one (a factory; keyword arguments from "
    "--transform-arg), or a plain function fn(grads, **context) -> grads"
)


def _typed_kwargs(factory, kwargs: dict, what: str) -> dict:
    """``kwargs`` (parsed as YAML) typed like ``--set``: from each parameter's annotation, else
    from the type of its default; unknown names are refused with the nearest one."""
    import inspect
    import typing

    from pgrad_app.config.values import coerce

    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return dict(kwargs)
    try:
        hints = typing.get_type_hints(factory)
    except Exception:  # an annotation that does not resolve: use the defaults' types
        hints = {}
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    typed = {}
    for key, value in kwargs.items():
        param = params.get(key)
        if param is None or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            if takes_any:
                typed[key] = value
                continue
            hint = suggest(key, [n for n, p in params.items() if p.kind not in
                                 (p.VAR_POSITIONAL, p.VAR_KEYWORD)])
            raise UserError(f"--transform-arg {key}: {what} takes no argument {key!r}.{hint}")
        tp = hints.get(key)
        if tp is None and param.default is not param.empty and param.default is not None:
            tp = type(param.default)
        typed[key] = coerce(value, tp, f"--transform-arg {key}") if tp is not None else value
    return typed


def load_transform(spec: str, kwargs: dict | None = None,
                   forbid_dir: str | Path | None = None):
    """``module:attr`` -> a ``GradientTransform`` (the module may be a ``.py`` file path).

    ``attr`` may be a ``GradientTransform``; a factory of one, called with ``kwargs`` (typed from
    its parameters' annotations or defaults, as ``--set`` types hyperparameters); or a plain
    function ``fn(grads, **context) -> grads`` over per-step gradients ``[T, *shape]``, which
    becomes :func:`pgrad.from_function` (per-step results are then averaged over the steps;
    aggregated ``[*shape]`` results are the gradient as they are).

    Raises:
      UserError: the spec is malformed, the module cannot be imported, the attribute is missing
        or is none of the above, ``kwargs`` do not fit the factory; with ``forbid_dir`` (a run
        directory whose config named the transform), a module found inside that directory.
    """
    import inspect

    from pgrad.transforms import GradientTransform, from_function
    from pgrad.transforms.chain import chain

    what = f"--transform {spec}"
    kwargs = dict(kwargs or {})
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise UserError(f"{what}: expected module:attr or path/to/file.py:attr.")
    if forbid_dir is not None:
        _refuse_inside(module_name, Path(forbid_dir), what)
    module = _import_module(module_name, what)
    if not hasattr(module, attr):
        public = [n for n in dir(module) if not n.startswith("_")]
        hint = suggest(attr, public)
        raise UserError(f"{what}: {module_name!r} has no attribute {attr!r}.{hint}")
    obj = getattr(module, attr)
    if isinstance(obj, GradientTransform):
        if kwargs:
            raise UserError(f"{what}: {attr!r} is a GradientTransform; --transform-arg needs a "
                            "factory (a function returning one).")
        return obj
    if not callable(obj):
        raise UserError(f"{what}: {attr!r} is a {type(obj).__name__}; expected {TRANSFORM_KINDS}.")
    try:
        params = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):
        params = []
    required = [p for p in params if p.default is p.empty and p.name not in kwargs
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not required:  # a factory
        typed = _typed_kwargs(obj, kwargs, f"{attr}()")
        try:
            made = obj(**typed)
        except Exception as err:
            raise UserError(
                f"{what}: calling {attr}() raised {type(err).__name__}: {err}"
            ) from None
        if isinstance(made, GradientTransform):
            return made
        raise UserError(
            f"{what}: {attr}() returned a {type(made).__name__}; expected {TRANSFORM_KINDS}."
        )
    if kwargs:
        raise UserError(f"{what}: --transform-arg given, but {attr}() still needs "
                        f"{', '.join(p.name for p in required)}.")
    if len(required) == 1:  # sees per-step [T, *shape] gradients; per-step results get the mean
        return chain(from_function(obj, name=attr), name=attr)
    raise UserError(
        f"{what}: {attr!r} takes {len(required)} required arguments; expected {TRANSFORM_KINDS}."
    )


def import_gym_packages(names: list[str] | None, what: str = "--gym-packages",
                        forbid_dir: str | Path | None = None) -> None:
    """Imports each module (dotted name or ``.py`` path) so that it registers its env ids, as
    rl-zoo's ``--gym-packages``; a failure is one line. With ``forbid_dir`` (the run directory
    that named them), a module inside that directory is refused instead of imported."""
    for name in names or ():
        if forbid_dir is not None:
            _refuse_inside(str(name), Path(forbid_dir), f"{what} {name}")
        _import_module(str(name), f"{what} {name}")


def wrapper_names(env_wrapper) -> list[str]:
    """The dotted names of rl-zoo style ``env_wrapper`` entries (names or ``{name: kwargs}``)."""
    from pgrad.rl.envs.recipe import wrapper_list

    return [str(next(iter(w))) if isinstance(w, dict) else str(w)
            for w in wrapper_list(env_wrapper)]


def run_code_of(values: dict) -> list[str]:
    """What a run's settings name to import besides ``env`` and ``transform``: its
    ``gym_packages`` and every wrapper that is not a class Gymnasium defines
    (:func:`pgrad.rl.storage.named_code.gymnasium_wrapper`: checked by the object, not the name)."""
    gymnasium_wrapper = _named_code().gymnasium_wrapper
    packages = [str(p) for p in values.get("gym_packages") or ()]
    return packages + [w for w in wrapper_names(values.get("env_wrapper"))
                       if gymnasium_wrapper(w) is None]


def env_source(env_id: str, env_kwargs: dict | None, env_wrapper,
               forbid_dir: str | Path | None = None) -> Any:
    """``env_id`` with its options and wrappers (a :class:`pgrad.rl.envs.vector.EnvRecipe`), or the
    bare id; each wrapper name is resolved now (:func:`pgrad.rl.storage.named_code.resolve`), so a
    typo
    is one line before anything runs. With ``forbid_dir`` (the run directory that named them),
    a wrapper module inside that directory is refused instead of imported."""
    from pgrad.rl.envs.recipe import env_source as make_source
    from pgrad.rl.envs.recipe import wrapper_list

    for name in wrapper_names(env_wrapper):
        try:
            _named_code().resolve(name, "--env-wrapper", directory=forbid_dir)
        except ValueError as err:
            raise UserError(str(err)) from None
    return make_source(env_id, env_kwargs or None, wrapper_list(env_wrapper) or None)
