"""The finite-value checks of a rollout: a NaN or Inf observation or reward is an EnvError that
names the env and the env step it came from.

:func:`check_step` checks one vector step as it is recorded; :func:`check_rollout` checks a whole
rollout collected without them (one pass over the stacked arrays, the same error naming the same
env step), which :meth:`pgrad.rl.collection.rollout.Collector.collect` does where no normaliser
reads the
values before the update. Only the float32 vector part of observations is checked: images are
integers or bools.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pgrad.rl.collection.trajectory import Trajectory, next_vector
from pgrad.rl.envs.vector import EnvError
from pgrad.rl.observations import spaces

__all__ = ["check_rollout", "check_step"]

_all = np.logical_and.reduce  # ``x.all()`` without its Python wrapper


def check_step(layout: spaces.ObsLayout, name: str, env_steps: int, flat: Any,
               rewards: np.ndarray | None, step: int | None) -> Any:
    """Returns ``flat``; raises EnvError naming the env and step if an observation or reward is
    NaN/Inf.

    Args:
      layout: the observation layout (its vector part is checked).
      name: the env's name, for the error.
      env_steps: sub-env steps taken before this vector step, for the error.
      flat: ``[B, ...]`` preprocessed observations (or their parts).
      rewards: ``[B]`` rewards, or None (a reset, or final observations).
      step: the env step number, or None at a reset.
    """

    vec = layout.vector(flat)
    obs_ok = vec is None or np.isfinite(vec).all()
    if not obs_ok or (rewards is not None and not np.isfinite(rewards).all()):
        what = "observation" if not obs_ok else "reward"
        where = "reset" if step is None else f"env step {step}"
        raise EnvError(
            f"env {name!r} returned a non-finite {what} at {where} "
            f"(after {env_steps} env steps); pgrad needs finite observations and rewards."
        )
    return flat


def check_rollout(traj: Trajectory, layout: spaces.ObsLayout, name: str, num_envs: int,
                  start: int, last_obs: Any) -> None:
    """:func:`check_step` of every vector step of ``traj``, a rollout collected without it.

    Step ``t``'s observations are ``observations[t + 1]`` (``last_obs`` after the last step;
    ``None``: the step that followed raised), its final observations are in
    ``next_observations[t]``. Raises the EnvError of the first step with a NaN/Inf.

    Args:
      traj: the rollout, ``[T, B, ...]``.
      layout: the observation layout.
      name: the env's name, for the error.
      num_envs: ``B``.
      start: sub-env steps taken before the rollout's first step.
      last_obs: ``[B, ...]`` observations after the last step, or None.
    """

    # The usual case first: everything finite (observations[0] was checked as the previous
    # rollout's last observation, or at reset), in four whole-array checks. Only the float
    # vector part of observations is checked (images are integers or bools).
    vec, zero = layout.vector, np.zeros((traj.rewards.shape[0], 1), np.float32)
    observations = vec(traj.observations) if vec(traj.observations) is not None else zero
    next_vec = next_vector(traj, layout)  # (never the frames: see Trajectory)
    next_observations = next_vec if next_vec is not None else zero
    if last_obs is not None:
        last_obs = vec(last_obs) if vec(last_obs) is not None else zero[0]
    if (_all(np.isfinite(observations), axis=None)
            and _all(np.isfinite(traj.rewards), axis=None)
            and _all(np.isfinite(next_observations), axis=None)
            and (last_obs is None or _all(np.isfinite(last_obs), axis=None))):
        return
    num = traj.rewards.shape[0]

    def ok(x):  # [n, B, ...] -> [n] bool
        return np.isfinite(x).reshape(x.shape[0], -1).all(1)

    later = observations[1:]
    if last_obs is not None:
        later = np.concatenate([later, last_obs[None]])
    obs_ok = np.ones(num, bool)
    obs_ok[: later.shape[0]] = ok(later)
    reward_ok, final_ok = ok(traj.rewards), ok(next_observations)
    bad = np.flatnonzero(~(obs_ok & reward_ok & final_ok))
    if bad.size:
        t = int(bad[0])
        what = "reward" if obs_ok[t] and not reward_ok[t] else "observation"
        after = start + t * num_envs
        raise EnvError(
            f"env {name!r} returned a non-finite {what} at env step "
            f"{after + num_envs} (after {after} env steps); pgrad needs finite "
            "observations and rewards.")
