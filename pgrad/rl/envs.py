"""Vector envs for rollouts, and env failures as one sentence.

:func:`make_vec_env` builds a Gymnasium vector env in ``AutoresetMode.SAME_STEP`` wrapped in
``RecordEpisodeStatistics`` (the contract :class:`pgrad.rl.rollout.Collector` needs: see
:mod:`pgrad.rl.rollout`); ``mode="envpool"`` presents envpool's pools through the same contract
(:mod:`pgrad.rl.envpool_env`). :func:`make_env` builds one env the same way.

Env ids work without importing their packages first: :func:`ensure_registered` imports ale-py for
Atari ids (``ALE/Breakout-v5``, ``BreakoutNoFrameskip-v4``) and MinAtar for ``MinAtar/...`` ids.
Atari ids get the standard preprocessing of :func:`pgrad.rl.atari.make_atari` (84x84 grayscale,
4 frames stacked channel-last, episodic life, clipped learning rewards; ``env_kwargs`` change it,
``{"preprocess": False}`` gives the bare emulator) and report whole games (:data:`GAME_INFO`).
MinAtar ids are MinAtar's own envs: ``(10, 10, C)`` bool observations, sticky actions 0.1.

An env that fails -- its constructor, ``reset`` or ``step`` raises, or it returns observations
that do not fit its observation space (wrong shape, strings), or a non-scalar ``terminated`` --
raises :class:`EnvError`, one sentence naming the env, the env step and what went wrong;
:func:`describe_failure` turns the library's exception into that sentence's end.

Any env a user has: :class:`EnvRecipe` is an id (or factory) with keyword arguments and wrappers
(rl-zoo's ``env_wrapper``: dotted names, ``{name: kwargs}`` or callables) -- a factory that can be
built again, in evaluation, in another process, or from a saved record. :func:`make_vec_env`
also takes a ``gymnasium.Env`` instance (one env) or a ``gymnasium.vector.VectorEnv`` (in
``SAME_STEP`` autoreset mode); :func:`recipe_of` says how such an instance can be built again
(from the ``spec`` ``gymnasium.make`` gave it), or why it cannot.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import warnings
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from pgrad.rl import spaces
from pgrad.rl.async_worker import WORKER_LOG, ChildEnvError, _async_worker, guarded_worker
from pgrad.rl.env_ids import GAME_INFO, ensure_registered, is_atari_id  # noqa: F401 (re-exported)

#: "envpool": the optional C++ backend (:mod:`pgrad.rl.envpool_env`; ``pgrad[envpool]`` extra).
VECTOR_MODES = ("sync", "async", "envpool", "overlap")


class EnvError(ValueError):
    """The env failed or returned something pgrad cannot use; the message names env and step."""


def import_name(name: str, what: str = "wrapper") -> Any:
    """The object a dotted name (``pkg.mod.Attr``) or ``pkg.mod:Attr`` names, imported.

    Raises:
      ValueError: the module or attribute does not exist (one line).
    """
    if ":" in name:
        module, _, attr = name.partition(":")
    else:
        module, _, attr = name.rpartition(".")
    if not module or not attr:
        raise ValueError(f"{what} {name!r}: expected a dotted name such as "
                         "gymnasium.wrappers.TimeAwareObservation (or module:Attr).")
    try:
        obj = importlib.import_module(module)
    except ImportError as err:
        raise ValueError(f"{what} {name!r}: cannot import {module!r} "
                         f"({' '.join(str(err).split())}).") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{what} {name!r}: {module!r} has no attribute {attr!r}.")
        obj = getattr(obj, part)
    return obj


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
    return fn(env, **kwargs)


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


def make_env(env_id: Any, **kwargs: Any) -> gym.Env:
    """One env: a registered id (see :func:`ensure_registered`) with ``kwargs``, or a factory.

    Atari ids get :func:`pgrad.rl.atari.make_atari` (``kwargs`` are its options and ``gym.make``'s;
    ``preprocess=False``: the bare ale-py env); other ids ``gym.make(env_id, **kwargs)``.
    """
    if not isinstance(env_id, str):
        if kwargs:
            raise TypeError(f"env options {sorted(kwargs)} need an env id; the factory "
                            f"{env_name(env_id)} takes its own arguments.")
        return env_id()
    ensure_registered(env_id)
    preprocess = kwargs.pop("preprocess", True)
    if preprocess and is_atari_id(env_id):
        from pgrad.rl.atari import make_atari

        return make_atari(env_id, **kwargs)
    return gym.make(env_id, **kwargs)


# Library messages that mean little on their own -> what they mean for an env.
_HINTS = (
    ("wrong shape", "an observation does not fit the observation space {space}"),
    ("could not broadcast", "an observation does not fit the observation space {space}"),
    ("array element with a sequence",
     "reward, terminated and truncated must be one number / bool per env"),
    ("Expects terminated signal to be a boolean",
     "reward, terminated and truncated must be one number / bool per env"),
    ("Expects truncated signal to be a boolean",
     "reward, terminated and truncated must be one number / bool per env"),
    ("could not convert string", "observations must be numeric, as {space} says"),
    ("dtype('<U", "observations must be numeric, as {space} says"),
    ("dtype('S", "observations must be numeric, as {space} says"),
)


def describe_failure(err: BaseException, space: Any = None) -> str:
    """``"Type: message (hint)"`` in one line, for an exception an env raised (in an async env's
    subprocess too: a :class:`~pgrad.rl.async_worker.ChildEnvError` is described as the
    exception it carries)."""
    if isinstance(err, ChildEnvError):
        return _describe(err.type_name, err.text, space)
    return _describe(type(err).__name__, str(err), space)


def _describe(type_name: str, message: str, space: Any) -> str:
    text = " ".join(message.split()) or "(no message)"
    if len(text) > 300:
        text = text[:297] + "..."
    hint = next((h for key, h in _HINTS if key in message), None)
    out = f"{type_name}: {text}"
    if hint:
        out += f" ({hint.format(space=space)})"
    return out


def env_name(env_id: Any) -> str:
    """A readable name for an env id, factory, recipe or instance (for error messages)."""
    if isinstance(env_id, str):
        return env_id
    if isinstance(env_id, (gym.Env, gym.vector.VectorEnv)):
        spec = getattr(env_id, "spec", None)
        return getattr(spec, "id", None) or type(env_id.unwrapped if isinstance(
            env_id, gym.Env) else env_id).__name__
    return getattr(env_id, "__name__", None) or repr(env_id)


def make_vec_env(env_id: Any, num_envs: int, mode: str = "sync",
                 max_obs_dim: int | None = None,
                 env_kwargs: dict[str, Any] | None = None) -> gym.vector.VectorEnv:
    """A ``RecordEpisodeStatistics``-wrapped vector env in ``SAME_STEP`` autoreset mode.

    Args:
      env_id: a registered id (``"CartPole-v1"``; Atari and MinAtar ids register themselves, and
        Atari ids are preprocessed: see the module docstring), a callable returning a
        ``gymnasium.Env`` (an :class:`EnvRecipe` too), a ``gymnasium.Env`` instance (stepped
        as it is: ``num_envs`` 1, this process) or a ``gymnasium.vector.VectorEnv`` (its
        ``num_envs``, ``SAME_STEP`` autoreset; wrapped in ``RecordEpisodeStatistics`` unless it
        is already).
      num_envs: number of sub-envs.
      mode: ``"sync"`` (one process), ``"async"`` (one subprocess per env) or ``"envpool"``
        (envpool's C++ thread pool; an envpool classic-control, MuJoCo or Atari id only) or
        ``"overlap"`` (this process, two halves of sync envs that a worker thread steps while
        the policy acts on the other half: :mod:`pgrad.rl.overlap`; ``num_envs >= 2``).
      max_obs_dim: refuse (ValueError) an env whose flat observation is wider than this, after
        building one env and before building the vector env: Gymnasium's batched spaces
        allocate ``num_envs`` x the observation size up front, which for an enormous space
        exhausts the machine's memory instead of raising.
      env_kwargs: options of each env (an id's ``gym.make`` keywords; for Atari ids also
        :func:`pgrad.rl.atari.make_atari`'s, e.g. ``{"episodic_life": False}``).

    Raises:
      EnvError: the env's constructor raised.
      ImportError: the id's package is not installed (the message names the pgrad extra).
      ValueError: an unsupported or too large observation space.
    """
    if mode not in VECTOR_MODES:
        raise ValueError(f"vector mode must be one of {VECTOR_MODES}; got {mode!r}.")
    kwargs = dict(env_kwargs or {})
    if isinstance(env_id, (gym.Env, gym.vector.VectorEnv)):
        if kwargs:
            raise TypeError(f"env_kwargs {sorted(kwargs)} need an env id; the env instance "
                            "is built already.")
        return _vector_of_instance(env_id, num_envs, mode)
    if mode == "overlap":
        from pgrad.rl.overlap import OverlapVectorEnv

        if num_envs < 2:
            raise ValueError(f"vector_mode 'overlap' steps two halves of the envs; it needs "
                             f"num_envs >= 2, got {num_envs}.")
        first = make_vec_env(env_id, num_envs // 2, "sync", max_obs_dim, env_kwargs)
        try:
            second = make_vec_env(env_id, num_envs - num_envs // 2, "sync", None, env_kwargs)
        except Exception:
            first.close()
            raise
        return OverlapVectorEnv((first, second))
    if mode == "envpool":
        from pgrad.rl.envpool_atari import make_envpool

        return gym.wrappers.vector.RecordEpisodeStatistics(make_envpool(env_id, num_envs,
                                                                        **kwargs))
    if not isinstance(env_id, str) and not callable(env_id):
        raise TypeError(f"env_id must be a registered id, a callable returning a gymnasium.Env, "
                        f"a gymnasium.Env or a gymnasium.vector.VectorEnv; got {env_id!r}.")
    if kwargs and not isinstance(env_id, str):
        raise TypeError(f"env_kwargs {sorted(kwargs)} need an env id; the factory "
                        f"{env_name(env_id)} takes its own arguments.")
    ensure_registered(env_id)
    factory = functools.partial(make_env, env_id, **kwargs) if is_atari_id(env_id) else env_id
    if max_obs_dim is not None:
        _check_obs_size(env_id, max_obs_dim, kwargs)
    vector_kwargs: dict[str, Any] = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
    if mode == "async" and _async_worker is not None:
        # a constructor failing in the subprocess: one error, no traceback
        vector_kwargs["worker"] = guarded_worker
    try:
        with warnings.catch_warnings():
            # gymnasium warns each worker's error (and traceback) before raising it; raised
            # below as one line instead
            warnings.filterwarnings("ignore", message=WORKER_LOG, category=UserWarning)
            if isinstance(factory, str):
                envs = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode,
                                    vector_kwargs=vector_kwargs, **kwargs)
            else:
                cls = gym.vector.SyncVectorEnv if mode == "sync" else gym.vector.AsyncVectorEnv
                envs = cls([factory] * num_envs, **vector_kwargs)
    except MemoryError:
        raise EnvError(f"env {env_name(env_id)!r} could not be created: out of memory "
                       f"building {num_envs} of it{_space_of(env_id, kwargs)}.") from None
    except Exception as err:
        raise EnvError(f"env {env_name(env_id)!r} could not be created: "
                       f"{describe_failure(err)}") from err
    return gym.wrappers.vector.RecordEpisodeStatistics(envs)


def _vector_of_instance(env: Any, num_envs: int, mode: str) -> gym.vector.VectorEnv:
    """The vector env training steps for a user's env instance (see :func:`make_vec_env`)."""
    same_step = gym.vector.AutoresetMode.SAME_STEP
    if isinstance(env, gym.vector.VectorEnv):
        if env.num_envs != num_envs:
            raise ValueError(f"the VectorEnv has {env.num_envs} envs but num_envs={num_envs}; "
                             f"set num_envs={env.num_envs} (agents.make sets it for you).")
        found = env.metadata.get("autoreset_mode")
        if found != same_step:
            raise ValueError(
                f"the VectorEnv resets in autoreset mode {getattr(found, 'name', found)}; pgrad "
                "collects with SAME_STEP (a final observation beside the reset one): build it "
                "with gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode."
                "SAME_STEP), or pass the env id and num_envs instead.")
        if _has_episode_statistics(env):
            return env
        return gym.wrappers.vector.RecordEpisodeStatistics(env)
    if num_envs != 1:
        raise ValueError(f"one gym.Env instance is one env, but num_envs={num_envs}: set "
                         "num_envs=1 (agents.make does when you leave it out), or pass the env "
                         "id or a factory to get several.")
    if mode == "envpool":
        raise ValueError("vector_mode 'envpool' builds envpool's own envs from an id; an env "
                         "instance runs in 'sync' mode.")
    # 'async' would pickle the instance into a subprocess: the user's object would not be the one
    # stepped. One env in this process is what an instance means.
    try:
        envs = gym.vector.SyncVectorEnv([lambda: env], autoreset_mode=same_step)
    except Exception as err:
        raise EnvError(f"env {env_name(env)!r} could not be used: "
                       f"{describe_failure(err)}") from err
    return gym.wrappers.vector.RecordEpisodeStatistics(envs)


def _has_episode_statistics(env: Any) -> bool:
    while isinstance(env, gym.vector.VectorWrapper):
        if isinstance(env, gym.wrappers.vector.RecordEpisodeStatistics):
            return True
        env = env.env
    return False


def _make_one(env_id, kwargs: dict | None = None) -> gym.Env:
    try:
        return make_env(env_id, **(kwargs or {}))
    except MemoryError:
        raise EnvError(f"env {env_name(env_id)!r} could not be created: out of memory.") from None
    except Exception as err:
        raise EnvError(f"env {env_name(env_id)!r} could not be created: "
                       f"{describe_failure(err)}") from err


def _check_obs_size(env_id, max_obs_dim: int, kwargs: dict) -> None:
    env = _make_one(env_id, kwargs)
    try:
        space = env.observation_space
        dim = spaces.flat_dim(space)  # ValueError: unsupported space
    finally:
        env.close()
    if dim > max_obs_dim:
        raise ValueError(f"env {env_name(env_id)!r}: observation space {space} flattens to "
                         f"{dim:,} values; the MLP policies take at most {max_obs_dim:,}.")


def _space_of(env_id, kwargs: dict) -> str:
    """``"; its observation space is ..."`` from one env, or ``""`` if even that fails."""
    try:
        env = _make_one(env_id, kwargs)
    except BaseException:  # noqa: BLE001  (only for a better message)
        return ""
    try:
        return f"; its observation space is {env.observation_space}"
    finally:
        env.close()
