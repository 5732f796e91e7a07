"""One env, built again and again: ids, factories, options and wrappers as a recipe.

:class:`EnvRecipe` is an id (or factory) with keyword arguments and wrappers (rl-zoo's
``env_wrapper``: dotted names, ``{name: kwargs}`` or callables) -- a factory that can be built
again, in evaluation, in another process, or from a saved record. :func:`make_env` builds one env
from an id (Atari ids preprocessed: :func:`pgrad.rl.envs.atari.make_atari`) or a factory;
:func:`recipe_of` says how an env instance can be built again (from the ``spec`` ``gymnasium.make``
gave it), or why it cannot. :mod:`pgrad.rl.envs.vector` builds vector envs from any of these.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from pgrad.rl.envs.ids import ensure_registered, is_atari_id
from pgrad.rl.storage import named_code


def import_name(name: str, what: str = "wrapper") -> Any:
    """The object a dotted name (``pkg.mod.Attr``) or ``pkg.mod:Attr`` names, imported: the
    one resolver, :func:`pgrad.rl.storage.named_code.resolve` (the walk never leaves the module).

    Raises:
      ValueError: the module or attribute does not exist, or the name walks out of its module.
    """
    return named_code.resolve(name, what)


def wrapper_list(wrappers: Any) -> tuple:
    """rl-zoo's ``env_wrapper`` forms as a tuple: one name / callable / ``{name: kwargs}``, or a
    list of them (``None``: none)."""
    if wrappers is None:
        return ()
    if isinstance(wrappers, (list, tuple)):
        return tuple(wrappers)
    return (wrappers,)


def apply_wrapper(env: gym.Env, wrapper: Any) -> gym.Env:
    """``env`` wrapped by ``wrapper``: a callable ``env -> env`` (a Wrapper class), a dotted
    name of one, or ``{name: kwargs}`` (its keyword arguments, as rl-zoo's hyperparameter files
    write them)."""
    kwargs: dict = {}
    if isinstance(wrapper, Mapping):
        if len(wrapper) != 1:
            raise ValueError(f"a wrapper given as a mapping has one name: its kwargs; got "
                             f"{dict(wrapper)!r}.")
        wrapper, kwargs = next(iter(wrapper.items()))
        kwargs = dict(kwargs or {})
    fn = import_name(wrapper) if isinstance(wrapper, str) else wrapper
    if not callable(fn):
        raise TypeError(f"a wrapper must be a callable env -> env or its dotted name; got "
                        f"{wrapper!r}.")
    wrapped = fn(env, **kwargs)
    if not isinstance(wrapped, gym.Env):
        label = wrapper if isinstance(wrapper, str) else env_name(wrapper)
        raise TypeError(f"wrapper {label} returned a {type(wrapped).__name__}, not a "
                        "gymnasium.Env (a wrapper takes the env and returns the wrapped env).")
    return wrapped


def _wrapper_label(wrapper: Any) -> Any:
    """A wrapper as a JSON-able record (a name or ``{name: kwargs}``), or ``None`` for a
    callable that has no importable name."""
    if isinstance(wrapper, str):
        return wrapper
    if isinstance(wrapper, Mapping):
        return {str(k): dict(v or {}) for k, v in wrapper.items()}
    module, name = getattr(wrapper, "__module__", None), getattr(wrapper, "__qualname__", "")
    if module and name and "<" not in name and module != "__main__":
        return f"{module}:{name}"
    return None


@dataclasses.dataclass(frozen=True, eq=True)
class EnvRecipe:
    """How to build one env, again and again: an id (or factory), its options, its wrappers.

    Callable (``recipe() -> gym.Env``), so it goes wherever an env factory goes: training,
    :func:`pgrad.evaluate`, ``EvalCallback``, Ray workers (it pickles when its parts do).
    ``agent.save`` records it when it is data (an id, JSON options, wrappers by name).

    Args:
      env: a registered id (``"Pendulum-v1"``) or a callable returning a ``gymnasium.Env``.
      kwargs: the id's ``gymnasium.make`` keywords (``{"g": 9.81}``); only with an id.
      wrappers: applied in order: Wrapper classes / callables ``env -> env``, their dotted
        names (``"gymnasium.wrappers.TimeAwareObservation"``), or ``{name: kwargs}``.
    """

    env: Any
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    wrappers: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "kwargs", dict(self.kwargs or {}))
        object.__setattr__(self, "wrappers", wrapper_list(self.wrappers))
        if not isinstance(self.env, str) and not callable(self.env):
            raise TypeError(f"an env recipe needs a registered id or a callable returning a "
                            f"gymnasium.Env; got {self.env!r}.")
        if self.kwargs and not isinstance(self.env, str):
            raise TypeError(f"env_kwargs {sorted(self.kwargs)} need an env id; the factory "
                            f"{env_name(self.env)} takes its own arguments.")

    @property
    def __name__(self) -> str:  # env_name() and error messages
        return env_name(self.env)

    def __call__(self, **extra) -> gym.Env:
        """One env; ``extra`` keywords (e.g. ``render_mode``) go to ``make_env`` too."""
        env = make_env(self.env, **{**self.kwargs, **extra})
        for wrapper in self.wrappers:
            env = apply_wrapper(env, wrapper)
        return env

    def record(self) -> dict[str, Any] | None:
        """``{"id", "kwargs", "wrappers"}`` as plain data, or ``None`` if a part is code."""
        labels = [_wrapper_label(w) for w in self.wrappers]
        if not isinstance(self.env, str) or any(label is None for label in labels):
            return None
        return {"id": self.env, "kwargs": dict(self.kwargs), "wrappers": labels}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> EnvRecipe:
        return cls(str(record["id"]), record.get("kwargs") or {},
                   tuple(record.get("wrappers") or ()))


def env_source(env: Any, env_kwargs: Mapping | None = None, env_wrapper: Any = None) -> Any:
    """What an agent builds its envs from: ``env`` itself, or an :class:`EnvRecipe` when options
    or wrappers come with it (``env_kwargs`` need an id)."""
    if not env_kwargs and not env_wrapper:
        return env
    if isinstance(env, EnvRecipe):
        return EnvRecipe(env.env, {**env.kwargs, **dict(env_kwargs or {})},
                         env.wrappers + wrapper_list(env_wrapper))
    if isinstance(env, (gym.Env, gym.vector.VectorEnv)):
        raise TypeError("env_kwargs / env_wrapper need an env id or factory; an env instance "
                        "is built already (wrap it yourself, or pass its id).")
    return EnvRecipe(env, env_kwargs or {}, env_wrapper)


#: Keywords of a vector env's spec that describe the vector, not the env.
_VECTOR_KEYS = ("num_envs", "vectorization_mode", "vector_kwargs", "wrappers")


def recipe_of(env: Any) -> tuple[Any, str | None]:
    """``(something that builds the env again, None)`` or ``(None, why it cannot be)``.

    An id, a factory or a recipe builds itself again. An instance ``gymnasium.make`` built (so
    with a ``spec``, and wrappers that record their arguments) becomes an :class:`EnvRecipe` of
    its id, keywords and wrappers; any other instance cannot be built again.
    """
    if isinstance(env, str) or (callable(env) and not isinstance(env, (gym.Env,
                                                                        gym.vector.VectorEnv))):
        return env, None
    spec = getattr(env, "spec", None)
    kind = "gymnasium.vector.VectorEnv" if isinstance(env, gym.vector.VectorEnv) else "gym.Env"
    why = (f"the {kind} instance it was given cannot be built again: pass the env id (with "
           "env_kwargs / env_wrapper) or a factory (a function returning the env) instead")
    if spec is None or not getattr(spec, "id", None) or spec.id not in gym.registry:
        return None, why
    wrappers = []
    for w in getattr(spec, "additional_wrappers", ()) or ():
        if w.kwargs is None:  # a wrapper that does not record its arguments
            return None, why + f" (its wrapper {w.name} does not record its arguments)"
        wrappers.append({w.entry_point: dict(w.kwargs)})
    kwargs = {k: v for k, v in (spec.kwargs or {}).items() if k not in _VECTOR_KEYS}
    registered = gym.registry[spec.id]
    if kwargs.get("max_episode_steps") == registered.max_episode_steps:
        kwargs.pop("max_episode_steps")
    if spec.max_episode_steps is not None and spec.max_episode_steps != \
            registered.max_episode_steps:
        kwargs["max_episode_steps"] = spec.max_episode_steps
    if not kwargs and not wrappers:
        return spec.id, None
    return EnvRecipe(spec.id, kwargs, tuple(wrappers)), None


def named_factory(env_id: str) -> Any:
    """The callable a ``"module:factory"`` name points at, or ``None`` when it is an env id.

    ``module:EnvId`` where importing ``module`` registers ``EnvId`` is an id (``gym.make``
    takes it); a callable attribute of the module that is no registered id is a factory (a
    PettingZoo game's ``parallel_env``, a function returning a ``gymnasium.Env``). A module that
    does not import is left to ``gym.make``, which names it.
    """
    module, sep, name = env_id.partition(":")
    if not sep or not module or name in gym.registry:
        return None
    try:
        imported = importlib.import_module(module)
    except ImportError:
        return None
    factory = getattr(imported, name, None)
    return factory if name not in gym.registry and callable(factory) else None


def make_env(env_id: Any, **kwargs: Any) -> Any:
    """One env: a registered id (see :func:`ensure_registered`) with ``kwargs``, or a factory.

    Atari ids get :func:`pgrad.rl.envs.atari.make_atari` (``kwargs`` are its options and
    ``gym.make``'s;
    ``preprocess=False``: the bare ale-py env); other ids ``gym.make(env_id, **kwargs)``.
    A ``"module:factory"`` name (:func:`named_factory`) is called with ``kwargs``: it returns
    what the factory does (a ``gymnasium.Env`` or a PettingZoo game).
    """
    if not isinstance(env_id, str):
        if kwargs:
            raise TypeError(f"env options {sorted(kwargs)} need an env id; the factory "
                            f"{env_name(env_id)} takes its own arguments.")
        return env_id()
    factory = named_factory(env_id)
    if factory is not None:
        return factory(**kwargs)
    ensure_registered(env_id)
    preprocess = kwargs.pop("preprocess", True)
    if preprocess and is_atari_id(env_id):
        from pgrad.rl.envs.atari import make_atari

        return make_atari(env_id, **kwargs)
    return gym.make(env_id, **kwargs)


def env_name(env_id: Any) -> str:
    """A readable name for an env id, factory, recipe or instance (for error messages)."""
    if isinstance(env_id, str):
        return env_id
    if isinstance(env_id, (gym.Env, gym.vector.VectorEnv)):
        spec = getattr(env_id, "spec", None)
        return getattr(spec, "id", None) or type(env_id.unwrapped if isinstance(
            env_id, gym.Env) else env_id).__name__
    return getattr(env_id, "__name__", None) or repr(env_id)
