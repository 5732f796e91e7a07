"""Episodes in a rollout: the ones that ended in a vector step (their returns, lengths and
successes, as the env reports them) and whole-episode batches (:func:`whole_episodes`, which
:meth:`pgrad.rl.collection.rollout.Collector.collect_episodes` runs for REINFORCE's reward-to-go
returns).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pgrad.rl.collection.trajectory import Trajectory, build_trajectory
from pgrad.rl.envs.vector import GAME_INFO
from pgrad.rl.observations import spaces

__all__ = ["ended_episodes", "ended_successes", "whole_episodes"]


def ended_episodes(info: dict, key: str, env_step: int) -> list[tuple[int, float, int]]:
    """``(env_step, return, length)`` of each episode a vector step's ``info`` reports under
    ``key`` (``"episode"`` from ``RecordEpisodeStatistics``, or
    :data:`pgrad.rl.envs.vector.GAME_INFO`
    for an env that reports whole games), in env order."""
    episodes = []
    # whole games end in a step (final_info) or in the reset after it (see GAME_INFO)
    for src in (info, info.get("final_info", {})) if key == GAME_INFO else (info,):
        if key in src:
            ep, mask = src[key], src["_" + key]
            for i in np.flatnonzero(mask):
                episodes.append((env_step, float(ep["r"][i]), int(ep["l"][i])))
    return episodes


def ended_successes(info: dict, done: np.ndarray) -> list[float]:
    """``info["is_success"]`` (1.0 / 0.0) of each env whose episode ended in this vector step
    and reported it, in env order: a SAME_STEP vector env puts the ended episode's last info in
    ``info["final_info"]`` (``_is_success`` marks the envs that have the key)."""
    final = info.get("final_info", {})
    if "is_success" not in final:
        return []
    values, has = final["is_success"], final.get("_is_success", done)
    return [float(bool(values[i])) for i in np.flatnonzero(np.logical_and(has, done))]


def whole_episodes(step: Callable[[], tuple], layout: spaces.ObsLayout, num_envs: int, name: str,
                   min_steps: int, max_vector_steps: int = 100_000) -> tuple[Trajectory, list]:
    """Whole episodes: at least ``min_steps`` steps, every env's batch ending at an episode end.

    All envs step until ``min_steps`` steps are collected; then each env's part of the batch
    closes at its next episode end. Steps an env takes after its part closed (while others
    finish) are masked out (``Trajectory.mask``); its next batch starts mid-episode, which
    keeps reward-to-go returns exact. The first steps of a batch may continue an episode
    begun in the previous call.

    Args:
      step: one vector step -> ``(pieces, episodes)``, as
        :meth:`pgrad.rl.collection.rollout.Collector.record_step` returns them.
      layout: the observation layout.
      num_envs: ``B``.
      name: the env's name, for the error.
      min_steps: the fewest steps (over all envs) in the batch.
      max_vector_steps: raise ValueError if the episodes have not ended after this many.

    Returns:
      ``(Trajectory [T, B] with its mask, episodes)``: the episodes ``(env_step, return,
      length)`` that finished during the call.
    """
    steps: list[tuple] = []
    masks: list[np.ndarray]
    masks, episodes = [], []
    open_ = np.ones(num_envs, bool)
    count = 0
    while open_.any():
        if len(masks) >= max_vector_steps:
            raise ValueError(
                f"env {name!r}: episodes did not end within {max_vector_steps} vector "
                "steps; whole-episode collection needs episodes that end (add a TimeLimit)."
            )
        parts, eps = step()
        steps.append(parts)
        masks.append(open_.astype(np.float32))
        episodes.extend(eps)
        count += int(open_.sum())
        if count >= min_steps:
            open_ &= ~(parts[3] | parts[4])
    return build_trajectory(layout, steps, np.stack(masks)), episodes
