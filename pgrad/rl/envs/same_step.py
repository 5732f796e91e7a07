"""A user's vector env in Gymnasium's default ``NEXT_STEP`` autoreset, presented in ``SAME_STEP``.

In ``NEXT_STEP`` mode the step after an episode's end only resets that env (its action is
ignored, reward 0): not a transition. pgrad's collector needs ``SAME_STEP`` (the reset
observation returned at once, the final one in ``info["final_obs"]``). :func:`same_step` turns
a ``NEXT_STEP`` vector env into one:

* a ``SyncVectorEnv`` / ``AsyncVectorEnv`` (wrapped or not) gets :class:`SameStepAutoreset`,
  which resets the finished envs in the same step through Gymnasium's partial reset
  (``reset(options={"reset_mask": done})``), so no reset step reaches the rollout and every
  other env steps exactly as before: the transitions equal a ``SAME_STEP`` env's on the same
  seeds;
* a vector env of its own (e.g. ``gym.make_vec("CartPole-v1", 4)``'s ``CartPoleVectorEnv``,
  which cannot reset part of its envs) that ``gym.make_vec`` built from an id, unwrapped, is
  built again from its recorded spec as sync envs in ``SAME_STEP`` mode (the original closed);
* anything else is one ValueError saying how to build it in ``SAME_STEP`` mode.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import iterate

SAME_STEP = gym.vector.AutoresetMode.SAME_STEP
NEXT_STEP = gym.vector.AutoresetMode.NEXT_STEP
#: The key ``RecordEpisodeStatistics`` reports a finished episode under (kept at the top level).
EPISODE_KEY = "episode"


def same_step(env: gym.vector.VectorEnv) -> gym.vector.VectorEnv:
    """``env`` in ``SAME_STEP`` autoreset (see the module docstring).

    Raises:
      ValueError: a mode other than ``NEXT_STEP``, or a ``NEXT_STEP`` env that can neither
        reset part of its envs nor be rebuilt from an id.
    """
    found = env.metadata.get("autoreset_mode")
    if found == SAME_STEP:
        return env
    base = env.unwrapped
    if found == NEXT_STEP and isinstance(base, (gym.vector.SyncVectorEnv,
                                                gym.vector.AsyncVectorEnv)):
        return SameStepAutoreset(env)
    spec = getattr(base, "spec", None)
    if found == NEXT_STEP and env is base and spec is not None and spec.kwargs is not None \
            and "vectorization_mode" in spec.kwargs:
        return rebuilt(env, spec)
    raise ValueError(
        f"the VectorEnv resets in autoreset mode {getattr(found, 'name', found)}; pgrad "
        "collects with SAME_STEP (a final observation beside the reset one): build it "
        "with gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode."
        "SAME_STEP), or pass the env id and num_envs instead.")


def rebuilt(env: gym.vector.VectorEnv, spec: Any) -> gym.vector.VectorEnv:
    """``gym.make_vec`` of ``env``'s recorded spec again, sync (or async, if it was) envs in
    ``SAME_STEP`` mode; ``env`` is closed."""
    kwargs = dict(spec.kwargs)
    kwargs.pop("num_envs", None)
    mode = kwargs.pop("vectorization_mode", None)
    vector_kwargs = dict(kwargs.pop("vector_kwargs", None) or {})
    vector_kwargs["autoreset_mode"] = SAME_STEP
    mode = "async" if mode == "async" else "sync"
    envs = gym.make_vec(spec.id, num_envs=env.num_envs, vectorization_mode=mode,
                        vector_kwargs=vector_kwargs, **kwargs)
    env.close()
    return envs


def _restricted(info: dict, keep: np.ndarray) -> dict:
    """``info`` with every ``_key`` mask and-ed with ``keep`` ``[N]`` (nested dicts too)."""
    out = {}
    for key, value in info.items():
        if isinstance(value, dict):
            out[key] = _restricted(value, keep)
        elif key.startswith("_") and isinstance(value, np.ndarray) and value.dtype == bool:
            out[key] = value & keep
        else:
            out[key] = value
    return out


def _merged(info: dict, other: dict, where: np.ndarray) -> dict:
    """``info`` with ``other``'s entries of the envs in ``where`` ``[N]`` (nested dicts too)."""
    out = dict(info)
    for key, value in other.items():
        if key.startswith("_"):
            continue
        mask = other.get(f"_{key}", where) & where
        if isinstance(value, dict):
            out[key] = _merged(info.get(key, {}), value, where)
        elif key not in out:
            out[key] = value
        else:
            merged = np.array(out[key], copy=True)
            merged[mask] = np.asarray(value)[mask]
            out[key] = merged
        out[f"_{key}"] = out.get(f"_{key}", np.zeros_like(where)) | mask
    return out


class SameStepAutoreset(gym.vector.VectorWrapper):
    """A ``NEXT_STEP`` Sync/AsyncVectorEnv in ``SAME_STEP`` mode (see the module docstring).

    A step where envs ``done`` ``[N]`` finished returns their reset observations, the final
    ones in ``info["final_obs"]`` (an object array, ``info["_final_obs"]`` marks them) and their
    step info in ``info["final_info"]``; the top level holds the other envs' step info and the
    finished envs' reset info (``SAME_STEP``'s layout), and ``RecordEpisodeStatistics``'
    ``"episode"`` where a wrapper inside reported it.
    """

    def __init__(self, env: gym.vector.VectorEnv):
        super().__init__(env)
        self.metadata = {**env.metadata, "autoreset_mode": SAME_STEP}

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        done = np.logical_or(terminated, truncated)  # [N]
        if not done.any():
            return obs, rewards, terminated, truncated, info
        finals = np.full(self.num_envs, None, dtype=object)
        for i, one in enumerate(iterate(self.env.observation_space, obs)):
            if done[i]:
                finals[i] = one
        kept = _episode_counters(self.env)
        reset_obs, reset_info = self.env.reset(options={"reset_mask": done})
        _restore_counters(kept, done)
        out = _merged(_restricted(info, ~done), reset_info, done)
        if EPISODE_KEY in info:  # a RecordEpisodeStatistics inside: its report stays on top
            out[EPISODE_KEY], out[f"_{EPISODE_KEY}"] = info[EPISODE_KEY], info[f"_{EPISODE_KEY}"]
        out.update(final_obs=finals, _final_obs=done.copy(),
                   final_info=_restricted(info, done), _final_info=done.copy())
        return reset_obs, rewards, terminated, truncated, out


#: ``RecordEpisodeStatistics``' per-env counters (``[N]`` arrays).
_COUNTERS = ("episode_returns", "episode_lengths", "episode_start_times", "prev_dones")


def _episode_counters(env: Any) -> list[tuple[Any, dict[str, np.ndarray]]]:
    """Each ``RecordEpisodeStatistics`` inside ``env`` and a copy of its counters."""
    found = []
    while isinstance(env, gym.vector.VectorWrapper):
        if isinstance(env, gym.wrappers.vector.RecordEpisodeStatistics):
            found.append((env, {k: np.array(getattr(env, k), copy=True) for k in _COUNTERS}))
        env = env.env
    return found


def _restore_counters(kept: list, done: np.ndarray) -> None:
    """The counters of the envs that did not reset, as they were before a partial reset.

    Gymnasium 1.4's ``RecordEpisodeStatistics.reset`` reads ``options["reset_mask"]`` after the
    env inside has popped it, so it starts every env's episode over; here only the ``done``
    ``[N]`` ones start (returns and lengths 0), as its own partial reset means to."""
    for wrapper, counters in kept:
        for name, before in counters.items():
            now = np.asarray(getattr(wrapper, name))
            setattr(wrapper, name, np.where(done, now if name == "episode_start_times"
                                            else np.zeros_like(before), before))
