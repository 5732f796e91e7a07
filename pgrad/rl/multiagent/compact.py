"""Agent rows into the batch the update takes: live steps first, dead ones masked out.

A row is *live* at step ``t`` when its agent acts there (``info["live"]`` of the observation
``o_t``); otherwise it is dead (its agent left the episode) or waiting (another agent's turn).
Only live steps belong in a loss. The update already drops the steps a ``Trajectory.mask``
excludes -- after it has computed GAE over the whole ``[T, B]`` rollout, so the dead steps must
not sit inside a row's recursion. :func:`compact_rows` rewrites each row (column ``b``) so that
they do not:

* its live steps come first, in time order, each carrying what its agent received until it
  acts again: the rewards of the steps it waited through are added to its own (a turn-based
  game's loser learns of its loss at the opponent's winning move), and where its episode ended
  while it waited, that step's terminated/truncated flags and final observation;
  its next observation is the one it acts on next (or the final one);
* the dead steps follow, masked out (``mask`` 0), terminated (no recursion reaches across them);
* the last live step of a row that has dead steps after it and whose episode did not end is
  marked truncated: its advantage bootstraps from ``V`` of its next observation and stops there,
  as at the end of a rollout.

So GAE over the rewritten ``[T, B]`` equals GAE over each agent's own sequence of decisions
(the recursion in :func:`pgrad.rl.advantages.returns.gae`, one step per decision), and the update's
mask keeps exactly the live steps. Where every row is live at every step (no agent left, nobody
waits), the trajectory is unchanged except for its all-ones ``mask``.

One approximation remains, the same as at any rollout's end: an agent still waiting for its
turn when the rollout ends bootstraps from the value of the observation it waits on.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pgrad.rl.collection.trajectory import Trajectory

__all__ = ["compact_plan", "compact_rows"]


def compact_plan(live: np.ndarray, done: np.ndarray) -> tuple[np.ndarray, ...]:
    """Where each step of the rewritten rollout comes from.

    Args:
      live: ``[T, B]`` bool, the row acts at step ``t``.
      done: ``[T, B]`` bool, terminated or truncated at step ``t``.

    Returns:
      ``(order, until, keep, cut)``, each ``[T, B]``: ``order[k, b]`` the step whose
      observation, action and log-prob go to position ``k``; ``until[k, b]`` the last step whose
      reward, flags and next observation it carries (rewards summed over ``order..until``);
      ``keep`` 1.0 on live positions; ``cut`` True where a live position that did not end must
      stop the recursion (truncated).
    """
    T, B = live.shape
    order = np.zeros((T, B), np.int64)
    until = np.zeros((T, B), np.int64)
    keep = np.zeros((T, B), np.float32)
    cut = np.zeros((T, B), bool)
    for b in range(B):
        steps = np.flatnonzero(live[:, b])
        dead = np.flatnonzero(~live[:, b])
        L = len(steps)
        order[:L, b], order[L:, b] = steps, dead
        until[L:, b] = dead
        keep[:L, b] = 1.0
        ends = np.append(steps[1:], T) - 1  # the last step before the next decision
        for k, (t, end) in enumerate(zip(steps, ends)):
            hit = np.flatnonzero(done[t: end + 1, b])
            until[k, b] = t + hit[0] if hit.size else end
        if L and L < T and not done[until[L - 1, b], b]:
            cut[L - 1, b] = True  # dead steps follow: bootstrap and stop here
    return order, until, keep, cut


def _gather(x: Any, rows: np.ndarray, cols: np.ndarray) -> Any:
    if x is None:
        return None
    if isinstance(x, tuple):  # observation parts
        return tuple(_gather(p, rows, cols) for p in x)
    out = np.ascontiguousarray(np.asarray(x)[rows, cols])
    out.flags.writeable = False
    return out


def compact_rows(traj: Trajectory, live: np.ndarray) -> Trajectory:
    """``traj`` with each row's live steps first and its dead steps masked out (see the module
    docstring).

    Args:
      traj: a ``[T, B]`` rollout of agent rows (``traj.mask`` None).
      live: ``[T, B]`` bool, whether each row acted at each step.

    Returns:
      The rewritten ``[T, B]`` Trajectory; its ``mask`` is 1.0 on live steps.
    """
    if traj.mask is not None:
        raise ValueError("compact_rows takes a rollout of fixed length (mask None).")
    live = np.asarray(live, bool)
    T, B = traj.rewards.shape
    if live.shape != (T, B):
        raise ValueError(f"live must be [T, B] = {(T, B)}; got {live.shape}.")
    done = np.logical_or(traj.terminated > 0, traj.truncated > 0)
    order, until, keep, cut = compact_plan(live, done)
    cols = np.broadcast_to(np.arange(B), (T, B))
    # rewards summed over order..until: differences of the running sums along time
    csum = np.concatenate([np.zeros((1, B)), np.cumsum(traj.rewards, 0, np.float64)])
    rewards = (csum[until + 1, cols] - csum[order, cols]).astype(np.float32) * keep
    terminated = np.where(keep > 0, traj.terminated[until, cols], 1.0).astype(np.float32)
    truncated = np.where(keep > 0, np.maximum(traj.truncated[until, cols], cut), 0.0)

    def frozen(x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x)
        x.flags.writeable = False
        return x

    return Trajectory(
        observations=_gather(traj.observations, order, cols),
        actions=_gather(traj.actions, order, cols),
        rewards=frozen(rewards),
        terminated=frozen(terminated),
        truncated=frozen(truncated.astype(np.float32)),
        log_probs=_gather(traj.log_probs, order, cols),
        values=_gather(traj.values, order, cols),
        next_observations=_gather(traj.next_observations, until, cols),
        mask=frozen(keep),
        action_mask=_gather(traj.action_mask, order, cols),
    )
