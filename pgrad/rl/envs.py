"""Vector envs for rollouts, and env failures as one sentence.

:func:`make_vec_env` builds a Gymnasium vector env in ``AutoresetMode.SAME_STEP`` wrapped in
``RecordEpisodeStatistics`` (the contract :class:`pgrad.rl.rollout.Collector` needs: see
:mod:`pgrad.rl.rollout`); ``mode="envpool"`` presents envpool's pools through the same contract
(:class:`pgrad.rl.envpool_env.EnvpoolVectorEnv`).

An env that fails -- its constructor, ``reset`` or ``step`` raises, or it returns observations
that do not fit its observation space (wrong shape, strings), or a non-scalar ``terminated`` --
raises :class:`EnvError`, one sentence naming the env, the env step and what went wrong;
:func:`describe_failure` turns the library's exception into that sentence's end.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from pgrad.rl import spaces

#: "envpool": the optional C++ backend (:mod:`pgrad.rl.envpool_env`; ``pgrad[envpool]`` extra).
VECTOR_MODES = ("sync", "async", "envpool")


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
    """``"Type: message (hint)"`` in one line, for an exception an env raised."""
    text = " ".join(str(err).split()) or "(no message)"
    if len(text) > 300:
        text = text[:297] + "..."
    hint = next((h for key, h in _HINTS if key in str(err)), None)
    out = f"{type(err).__name__}: {text}"
    if hint:
        out += f" ({hint.format(space=space)})"
    return out


def env_name(env_id) -> str:
    """A readable name for an env id or env factory (for error messages)."""
    if isinstance(env_id, str):
        return env_id
    return getattr(env_id, "__name__", None) or repr(env_id)


def make_vec_env(env_id, num_envs: int, mode: str = "sync",
                 max_obs_dim: int | None = None) -> gym.vector.VectorEnv:
    """A ``RecordEpisodeStatistics``-wrapped vector env in ``SAME_STEP`` autoreset mode.

    Args:
      env_id: a registered id (``"CartPole-v1"``) or a callable returning a ``gymnasium.Env``.
      num_envs: number of sub-envs.
      mode: ``"sync"`` (one process), ``"async"`` (one subprocess per env) or ``"envpool"``
        (envpool's C++ thread pool; an envpool classic-control, MuJoCo or Atari id only).
      max_obs_dim: refuse (ValueError) an env whose flat observation is wider than this, after
        building one env and before building the vector env: Gymnasium's batched spaces
        allocate ``num_envs`` x the observation size up front, which for an enormous space
        exhausts the machine's memory instead of raising.

    Raises:
      EnvError: the env's constructor raised.
      ValueError: an unsupported or too large observation space.
    """
    if mode not in VECTOR_MODES:
        raise ValueError(f"vector mode must be one of {VECTOR_MODES}; got {mode!r}.")
    if mode == "envpool":
        from pgrad.rl.envpool_env import EnvpoolVectorEnv

        return gym.wrappers.vector.RecordEpisodeStatistics(EnvpoolVectorEnv(env_id, num_envs))
    if not isinstance(env_id, str) and not callable(env_id):
        raise TypeError(f"env_id must be a registered id or a callable; got {env_id!r}.")
    if max_obs_dim is not None:
        _check_obs_size(env_id, max_obs_dim)
    same_step = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
    try:
        if isinstance(env_id, str):
            envs = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode,
                                vector_kwargs=same_step)
        else:
            cls = gym.vector.SyncVectorEnv if mode == "sync" else gym.vector.AsyncVectorEnv
            envs = cls([env_id] * num_envs, **same_step)
    except MemoryError:
        raise EnvError(f"env {env_name(env_id)!r} could not be created: out of memory "
                       f"building {num_envs} of it{_space_of(env_id)}.") from None
    except Exception as err:
        raise EnvError(f"env {env_name(env_id)!r} could not be created: "
                       f"{describe_failure(err)}") from err
    return gym.wrappers.vector.RecordEpisodeStatistics(envs)


def _make_one(env_id) -> gym.Env:
    try:
        return gym.make(env_id) if isinstance(env_id, str) else env_id()
    except MemoryError:
        raise EnvError(f"env {env_name(env_id)!r} could not be created: out of memory.") from None
    except Exception as err:
        raise EnvError(f"env {env_name(env_id)!r} could not be created: "
                       f"{describe_failure(err)}") from err


def _check_obs_size(env_id, max_obs_dim: int) -> None:
    env = _make_one(env_id)
    try:
        space = env.observation_space
        dim = spaces.flat_dim(space)  # ValueError: unsupported space
    finally:
        env.close()
    if dim > max_obs_dim:
        raise ValueError(f"env {env_name(env_id)!r}: observation space {space} flattens to "
                         f"{dim:,} values; the MLP policies take at most {max_obs_dim:,}.")


def _space_of(env_id) -> str:
    """``"; its observation space is ..."`` from one env, or ``""`` if even that fails."""
    try:
        env = _make_one(env_id)
    except BaseException:  # noqa: BLE001  (only for a better message)
        return ""
    try:
        return f"; its observation space is {env.observation_space}"
    finally:
        env.close()
