"""Vector envs for rollouts, and env failures as one sentence.

:func:`make_vec_env` builds a Gymnasium vector env in ``AutoresetMode.SAME_STEP`` wrapped in
``RecordEpisodeStatistics`` (the contract :class:`pgrad.rl.collection.rollout.Collector` needs: see
:mod:`pgrad.rl.collection.rollout`); ``mode="envpool"`` presents envpool's pools through the same
contract (:mod:`pgrad.rl.envs.envpool`). :func:`make_env` builds one env the same way.

Env ids work without importing their packages first: :func:`ensure_registered` imports ale-py for
Atari ids (``ALE/Breakout-v5``, ``BreakoutNoFrameskip-v4``) and MinAtar for ``MinAtar/...`` ids.
Atari ids get the standard preprocessing of :func:`pgrad.rl.envs.atari.make_atari` (84x84 grayscale,
4 frames stacked channel-last, episodic life, clipped learning rewards; ``env_kwargs`` change it,
``{"preprocess": False}`` gives the bare emulator) and report whole games (:data:`GAME_INFO`).
MinAtar ids are MinAtar's own envs: ``(10, 10, C)`` bool observations, sticky actions 0.1.

An env that fails -- its constructor, ``reset`` or ``step`` raises, or it returns observations
that do not fit its observation space (wrong shape, strings), or a non-scalar ``terminated`` --
raises :class:`EnvError`, one sentence naming the env, the env step and what went wrong;
:func:`describe_failure` turns the library's exception into that sentence's end.

Any env a user has: an id, a factory or an :class:`~pgrad.rl.envs.recipe.EnvRecipe` (an id or
factory with options and wrappers, built again in evaluation, in another process or from a saved
record: :mod:`pgrad.rl.envs.recipe`, whose names are importable from here too).
:func:`make_vec_env` also takes a ``gymnasium.Env`` instance (one env) or a
``gymnasium.vector.VectorEnv`` (in ``SAME_STEP`` autoreset mode, or Gymnasium's default
``NEXT_STEP``, converted: :mod:`pgrad.rl.envs.same_step`).
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import gymnasium as gym

from pgrad.rl.envs.async_worker import WORKER_LOG, ChildEnvError, _async_worker, guarded_worker
from pgrad.rl.envs.ids import GAME_INFO, ensure_registered, is_atari_id  # noqa: F401 (re-exported)
from pgrad.rl.envs.native import native_vector_env
from pgrad.rl.envs.recipe import (  # noqa: F401 (re-exported: their home before the split)
    EnvRecipe,
    apply_wrapper,
    env_name,
    env_source,
    import_name,
    make_env,
    recipe_of,
    wrapper_list,
)
from pgrad.rl.observations import spaces

#: "envpool": the optional C++ backend (:mod:`pgrad.rl.envs.envpool`; ``pgrad[envpool]`` extra).
VECTOR_MODES = ("sync", "async", "envpool", "overlap")


class EnvError(ValueError):
    """The env failed or returned something pgrad cannot use; the message names env and step."""


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
    subprocess too: a :class:`~pgrad.rl.envs.async_worker.ChildEnvError` is described as the
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
      mode: ``"sync"`` (one process; CartPole as one numpy env with Gymnasium's numbers:
        :mod:`pgrad.rl.envs.native`), ``"async"`` (one subprocess per env) or ``"envpool"``
        (envpool's C++ thread pool; an envpool classic-control, MuJoCo or Atari id only) or
        ``"overlap"`` (this process, two halves of sync envs that a worker thread steps while
        the policy acts on the other half: :mod:`pgrad.rl.envs.overlap`; ``num_envs >= 2``).
      max_obs_dim: refuse (ValueError) an env whose flat observation is wider than this, after
        building one env and before building the vector env: Gymnasium's batched spaces
        allocate ``num_envs`` x the observation size up front, which for an enormous space
        exhausts the machine's memory instead of raising.
      env_kwargs: options of each env (an id's ``gym.make`` keywords; for Atari ids also
        :func:`pgrad.rl.envs.atari.make_atari`'s, e.g. ``{"episodic_life": False}``).

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
        from pgrad.rl.envs.overlap import OverlapVectorEnv

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
        from pgrad.rl.envs.envpool_atari import make_envpool

        return gym.wrappers.vector.RecordEpisodeStatistics(make_envpool(env_id, num_envs,
                                                                        **kwargs))
    if not isinstance(env_id, str) and not callable(env_id):
        raise TypeError(f"env_id must be a registered id, a callable returning a gymnasium.Env, "
                        f"a gymnasium.Env or a gymnasium.vector.VectorEnv; got {env_id!r}.")
    if kwargs and not isinstance(env_id, str):
        raise TypeError(f"env_kwargs {sorted(kwargs)} need an env id; the factory "
                        f"{env_name(env_id)} takes its own arguments.")
    if mode == "sync":  # Gymnasium's CartPole as one numpy env: the same numbers, faster
        native = native_vector_env(env_id, num_envs, kwargs)
        if native is not None:
            return gym.wrappers.vector.RecordEpisodeStatistics(native)
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
        if env.metadata.get("autoreset_mode") != same_step:
            # Gymnasium's default NEXT_STEP: reset in the same step (no reset step reaches the
            # rollout), or built again from its id; else a ValueError (pgrad.rl.envs.same_step)
            from pgrad.rl.envs.same_step import same_step as in_same_step

            env = in_same_step(env)
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
                         f"{dim:,} values; every policy (MLP, CNN or other encoder) takes at "
                         f"most {max_obs_dim:,}: make it smaller with an env wrapper (images: "
                         "gymnasium.wrappers.ResizeObservation, GrayscaleObservation).")


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
