"""The one rule for code that a directory pgrad reads names (run directories, saved agents,
exports, result folders): such code is imported only when the user named it, and never from
inside that directory.

A directory is data. Its records may name code -- an env module (``module:EnvId``), a transform
(``module:attr`` or ``path/file.py:attr``) -- and reading the directory must not run it:

1. the module is imported only if the user named the same spec (``env_id=``, ``--env``,
   ``--transform``) or allowed it (``--trust-run-code``; in the Python API a module the user's
   process imported already, where nothing new runs);
2. even then, a module whose file lies inside the directory is refused.

:func:`check` is that rule; ``agents.load``, :func:`pgrad.evaluate` and the application's
plug-ins (``--resume``, ``pgrad-evaluate``) all call it before anything is imported.

:func:`resolve` is the one way a name becomes an object (wrappers, envs' factories,
transforms): the part after the module names an object *of that module*, so the walk never
steps into another module (``gymnasium.utils.seeding:np.f2py.subprocess.Popen`` is refused)
nor through private attributes. The one kind of code a directory may name without the user
naming it again is a wrapper class Gymnasium itself defines (:func:`gymnasium_wrapper`),
checked by the class's own module and type, not by the spelling of its name.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class DirectoryCode(ValueError):
    """Code named by a directory was not imported (one line saying how to allow it)."""


def looks_like_path(module: str) -> bool:
    """Whether a spec's module part is a file path (``x.py``, ``dir/x``) rather than a name."""
    return module.endswith(".py") or "/" in module or os.sep in module


def split(spec: str | None, split_last: bool = False) -> tuple[str, str]:
    """``(module, rest)`` of ``module:name`` (``("", spec)`` without a module).

    ``split_last``: at the last colon (transforms ``module:attr``, whose module may be a path
    with colons) instead of the first (envs ``module:EnvId``, whose id may hold colons).
    """
    spec = str(spec or "")
    module, sep, rest = spec.rpartition(":") if split_last else spec.partition(":")
    return (module, rest) if sep else ("", spec)


def same_spec(a: str | None, b: str | None, split_last: bool = False) -> bool:
    """Whether two ``module:name`` specs name the same code.

    A ``.py`` path is compared by file name: a run records the path as it was typed, relative to
    where it was trained, and a resume from elsewhere names the same file by another path.
    """
    if a is None or b is None:
        return a is b

    def normal(spec):
        module, rest = split(spec, split_last)
        if module and looks_like_path(module):
            module = "file:" + os.path.basename(module)
        return module, rest

    return a == b or normal(a) == normal(b)


@contextlib.contextmanager
def cwd_on_path() -> Iterator[None]:
    """The working directory on ``sys.path`` for one import (or look-up) only."""
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.append(cwd)
    try:
        yield
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def imported(module: str) -> bool:
    """Whether ``module`` (a dotted name) is imported already: importing it runs nothing new."""
    return not looks_like_path(module) and module in sys.modules


def origin(module: str) -> Path | None:
    """The file an import of ``module`` would run (``None``: not importable / built in).

    Only the top-level name is looked up: ``find_spec("a.b")`` would import (run) package ``a``.
    """
    import importlib.util

    if looks_like_path(module):
        return Path(module)
    top = module.split(".")[0]
    loaded = sys.modules.get(top)
    if loaded is not None:
        where = getattr(loaded, "__file__", None)
        return Path(where) if where else None
    try:
        with cwd_on_path():
            spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.origin and spec.origin not in ("built-in", "frozen"):
        return Path(spec.origin)
    locations = list(spec.submodule_search_locations or [])  # a namespace package
    return Path(locations[0]) if locations else None


def inside(module: str, directory: str | os.PathLike) -> bool:
    """Whether the code of ``module`` would come from inside ``directory``."""
    where = origin(module)
    if where is None:
        return False
    try:
        return where.resolve().is_relative_to(Path(directory).resolve())
    except OSError:
        return True  # cannot tell (a symlink loop): refuse


def check(what: str, spec: str | None, directory: str | os.PathLike, given: str | None = None,
          trust: bool = False, how: str | None = None, kind: str = "directory") -> None:
    """The rule (see the module docstring) for ``spec``, named by ``directory``.

    Args:
      what: ``"env"`` or ``"transform"``.
      spec: what the directory names (an env without a module needs nothing).
      directory: the directory that names it.
      given: what the user named for the same setting, if anything.
      trust: the user allowed the directory's code (``--trust-run-code``).
      how: how to name it again, for the message (default: ``env_id=...`` / ``transform=...``).
      kind: what the directory is, for the message (``"run directory"``).

    Raises:
      DirectoryCode: the module lies inside ``directory``, or was not named nor allowed.
    """
    module, _ = split(spec, split_last=what == "transform")
    if not module:
        return
    if not (trust or same_spec(given, spec, split_last=what == "transform")):
        how = how or f"pass {what}{'_id' if what == 'env' else ''}={spec!r} (after checking it)"
        raise DirectoryCode(f"{directory} names code to import: {what} {spec}. pgrad imports "
                            f"code named by a directory only when you name it again: {how}.")
    if inside(module, directory):
        raise DirectoryCode(f"{what} {spec}: refusing to import {module!r} from the {kind} "
                            f"{directory} (a directory pgrad reads is data; install or move "
                            "the module).")


def check_env(spec: Any, directory: str | os.PathLike, given: Any = None) -> None:
    """:func:`check` for the Python API's env: ``given`` is the user's ``env_id=`` (a module the
    process imported already counts as named; a module inside ``directory`` is refused even
    then). An env recipe (:class:`pgrad.rl.envs.vector.EnvRecipe`) is checked by the id it holds."""
    spec, given = getattr(spec, "env", spec), getattr(given, "env", given)
    if isinstance(given, str) and split(given)[0] and inside(split(given)[0], directory):
        raise DirectoryCode(f"env {given}: refusing to import {split(given)[0]!r} from the "
                            f"directory {directory} (a directory pgrad reads is data; install "
                            "or move the module).")
    if not isinstance(spec, str):
        return
    module, _ = split(spec)
    check("env", spec, directory, given if isinstance(given, str) else None,
          trust=bool(module) and imported(module))


def _module_and_attr(name: str, what: str) -> tuple[str, str]:
    """``("pkg.mod", "Attr")`` of ``pkg.mod:Attr`` or ``pkg.mod.Attr``."""
    if ":" in name:
        module, _, attr = name.partition(":")
    else:
        module, _, attr = name.rpartition(".")
    if not module or not attr or looks_like_path(module):
        raise DirectoryCode(f"{what} {name!r}: expected a dotted name such as "
                            "gymnasium.wrappers.TimeAwareObservation (or module:Attr).")
    return module, attr


def resolve(name: str, what: str = "wrapper", directory: str | os.PathLike | None = None) -> Any:
    """The object ``pkg.mod.Attr`` (or ``pkg.mod:Attr``, ``pkg.mod:Outer.Inner``) names, imported.

    The attribute path walks only through objects of the module named: a step that lands on
    another module, or on a private/dunder attribute, is refused, so a name cannot reach
    whatever the module happens to import. With ``directory`` (the name was read from there),
    a module whose file lies inside it is refused before it is imported.

    Raises:
      DirectoryCode: (a ``ValueError``) the name is malformed, walks out of its module, the
        module lies inside ``directory``, cannot be imported, or lacks the attribute (one line).
    """
    module, attr = _module_and_attr(str(name), what)
    if directory is not None and inside(module, directory):
        raise DirectoryCode(f"{what} {name}: refusing to import {module!r} from the directory "
                            f"{directory} (a directory pgrad reads is data; install or move "
                            "the module).")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as err:
        raise DirectoryCode(f"{what} {name!r}: cannot import {module!r} "
                            f"({' '.join(str(err).split())}).") from None
    for part in attr.split("."):
        if not part.isidentifier() or part.startswith("_"):
            raise DirectoryCode(f"{what} {name!r}: {part!r} is not a public attribute name.")
        if not hasattr(obj, part):
            raise DirectoryCode(f"{what} {name!r}: {module!r} has no attribute {attr!r}.")
        obj = getattr(obj, part)
        if isinstance(obj, types.ModuleType):
            raise DirectoryCode(f"{what} {name!r}: {attr!r} walks into the module "
                                f"{obj.__name__!r}; name the object by its own module.")
    return obj


def gymnasium_wrapper(name: Any) -> type | None:
    """The class ``name`` names if it is a wrapper Gymnasium itself defines, else ``None``.

    Checked by what the object is -- a ``gymnasium.Wrapper`` (or vector wrapper) subclass whose
    own ``__module__`` is Gymnasium's, named as ``gymnasium.<module>[.:]Class`` -- never by the
    spelling of the name alone. Only Gymnasium's modules are imported to find out.
    """
    if not isinstance(name, str):
        return None
    try:
        module, attr = _module_and_attr(name, "wrapper")
    except DirectoryCode:
        return None
    if not module.startswith("gymnasium.") or "." in attr:
        return None
    try:
        obj = resolve(name)
    except DirectoryCode:
        return None
    import gymnasium as gym

    bases = (gym.Wrapper, gym.vector.VectorWrapper)
    own = str(getattr(obj, "__module__", "") or "")
    if isinstance(obj, type) and issubclass(obj, bases) and own.split(".")[0] == "gymnasium":
        return obj
    return None
