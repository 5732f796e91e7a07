"""The time-major batch of transitions a rollout returns: :class:`Trajectory` ``[T, B, ...]``.

Its arrays are read-only; for observations with images the next observations are kept in the
compact form of :mod:`pgrad.rl.observations.frames` (each frame once) and materialised on first
access. :func:`build_trajectory` stacks a rollout's per-step pieces into one
(:class:`pgrad.rl.collection.rollout.Collector` collects them).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from pgrad.rl.observations import spaces
from pgrad.rl.observations.frames import FrameBuffer, NextFrames

__all__ = ["Trajectory", "build_trajectory", "next_vector"]


class _Fields(NamedTuple):
    observations: Any
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    log_probs: np.ndarray
    values: np.ndarray | None
    next_observations: Any  # an array (or parts), or NextFrames: see Trajectory
    mask: np.ndarray | None = None
    action_mask: np.ndarray | None = None


class Trajectory(_Fields):
    """A batch of transitions, time-major. Arrays are read-only.

    Attributes:
      observations: ``[T, B, obs_dim]`` float32, preprocessed (and normalised) o_t. For
        observations with images, the parts of :class:`pgrad.rl.observations.spaces.ObsLayout`
        instead: each
        image ``[T, B, *shape]`` in its own dtype (uint8, bool), the vector part (normalised)
        ``[T, B, d]`` float32; one array, or a tuple of them in part order.
      actions: ``[T, B, *action_shape]`` int32 / float32 as sampled (before clipping to bounds).
      rewards: ``[T, B]`` float32 r_t (normalised if reward normalisation is on).
      terminated: ``[T, B]`` float32, 1 where step t ended the episode for real.
      truncated: ``[T, B]`` float32, 1 where step t was cut (time limit).
      log_probs: ``[T, B]`` float32 log pi(a_t | o_t) of the acting policy.
      values: ``[T, B]`` float32 V(o_t) if the policy function returns values, else None.
        The agents' own rollouts carry them where the critic shares a compiled actor's
        encoder (one call gives both; the update then skips its value pass over o_t,
        :attr:`agents.base.ActorCriticAgent.values_from_acting`); elsewhere None: the update
        computes V on the same weights, cheaper than a critic call per env step.
      next_observations: ``[T, B, obs_dim]`` (or parts, as ``observations``) the observation that
        followed step t: o_{t+1} within an episode, the episode's final observation where it
        ended. For observations with images the Collector stores each frame once
        (:class:`pgrad.rl.observations.frames.NextFrames`, see :attr:`next_frames`): this array is
        then materialised on first access (a copy of the frames, kept with the trajectory; the
        tuple itself holds the compact form at this position, so read the attribute rather
        than unpacking the tuple).
      mask: ``[T, B]`` float32, 1 for steps in the batch; None when every step counts. Whole-episode
        collection masks each env's steps after its last finished episode.
      action_mask: ``[T, B, n]`` bool, the legal actions at o_t (``n = sum(nvec)`` for
        MultiDiscrete: the per-dimension masks concatenated), for an env that masks actions
        (:mod:`pgrad.rl.collection.masks`); else None.
    """

    __slots__ = ()

    @property  # the field, materialised when stored as NextFrames
    def next_observations(self) -> Any:
        x = tuple.__getitem__(self, _NEXT)
        return x.full() if isinstance(x, NextFrames) else x

    @property
    def next_frames(self) -> NextFrames | None:
        """The next observations in their compact form (image frames shared with
        ``observations``), or None where they are stored whole (observations without images,
        whole-episode batches, trajectories built by hand)."""
        x = tuple.__getitem__(self, _NEXT)
        return x if isinstance(x, NextFrames) else None

    def __reduce__(self):
        """Pickles (Ray messages) the compact form: each frame once."""
        fields, nf = tuple(self), self.next_frames
        if nf is None:
            return Trajectory, fields
        obs = fields[0] if isinstance(fields[0], tuple) else (fields[0],)
        vectors = tuple(None if p is None else x for x, p in zip(obs, nf.parts))  # no images
        return _compact, (vectors, fields[1:])


_NEXT = Trajectory._fields.index("next_observations")


def _compact(vectors: tuple, rest: tuple) -> Trajectory:
    """Unpickles :meth:`Trajectory.__reduce__`'s compact form."""
    nf = rest[_NEXT - 1]
    return Trajectory(nf.observations(vectors), *rest)


def next_vector(traj: Trajectory, layout: spaces.ObsLayout) -> Any:
    """The vector part of ``traj.next_observations`` (``layout.vector``) without materialising
    its image frames."""
    nf = traj.next_frames
    return layout.vector(traj.next_observations if nf is None else layout.join(nf.parts))


def _frozen(x):
    if isinstance(x, tuple):  # observation parts
        return tuple(_frozen(p) for p in x)
    if x is not None:
        x.flags.writeable = False
    return x


def build_trajectory(layout: spaces.ObsLayout, steps: list[tuple], mask: np.ndarray | None,
                     frames: FrameBuffer | None = None, last_obs: Any = None) -> Trajectory:
    """The read-only ``[T, B, ...]`` Trajectory of ``T`` vector steps.

    Args:
      layout: the observation layout (stacks observation parts).
      steps: per vector step the 9 pieces ``(obs, actions, rewards, terminated, truncated,
        log_probs, values, next_obs, action_mask)``, each ``[B, ...]`` (the Collector's steps;
        their image parts already written into ``frames``, if given).
      mask: ``[T, B]`` float32 steps in the batch, or None (every step counts).
      frames: the rollout's image buffer; the next observations are then kept in their compact
        form (:class:`pgrad.rl.observations.frames.NextFrames`).
      last_obs: with ``frames``, the observation after the last step (None if not known).
    """
    obs, act, rew, term, trunc, logp, vals, nxt, legal = zip(*steps)
    next_observations: Any
    if frames is None:
        observations, next_observations = layout.stack(obs), layout.stack(nxt)
    else:
        compact = frames.next_frames(nxt, last_obs)  # read-only already
        observations, next_observations = frames.observations(obs, compact), compact
    # np.array of equal-shape arrays stacks them like np.stack, and casts in the same copy
    # (2-3x faster than stack + astype for vector observations, 5 to 2048 steps; the same
    # for image-sized ones)
    f32 = lambda c: np.array(c, np.float32)  # noqa: E731
    return Trajectory(
        observations=_frozen(observations),
        actions=_frozen(np.array(act)),
        rewards=_frozen(f32(rew)),
        terminated=_frozen(f32(term)),
        truncated=_frozen(f32(trunc)),
        log_probs=_frozen(f32(logp)),
        values=None if vals[0] is None else _frozen(f32(vals)),
        next_observations=(next_observations if frames is not None
                           else _frozen(next_observations)),
        mask=_frozen(mask),
        action_mask=None if legal[0] is None else _frozen(np.array(legal, bool)),
    )
