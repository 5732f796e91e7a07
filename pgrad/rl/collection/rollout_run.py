"""One rollout of a :class:`~pgrad.rl.collection.rollout.Collector` as its steps arrive.

:meth:`Collector.collect <pgrad.rl.collection.rollout.Collector.collect>` steps its own envs
into one; a population stepping many collectors in turn
(:mod:`pgrad.rl.collection.lockstep`) keeps one per collector. Either way the steps become the
same :class:`~pgrad.rl.collection.trajectory.Trajectory`, with the same finite checks.
"""

from __future__ import annotations

from typing import Any, Protocol

from pgrad.rl.collection.finite import check_rollout
from pgrad.rl.collection.trajectory import Trajectory, build_trajectory
from pgrad.rl.observations.frames import FrameBuffer
from pgrad.rl.observations.spaces import ObsLayout


class Collecting(Protocol):
    """What a rollout reads of the :class:`~pgrad.rl.collection.rollout.Collector` stepping it
    (named here, not imported: the collector imports this module)."""

    name: str
    num_envs: int
    layout: ObsLayout
    obs_norm: Any
    reward_norm: Any
    env_steps: int

    @property
    def current_obs(self) -> Any: ...


class RolloutRun:
    """One :meth:`Collector.collect` of ``num_steps`` vector steps as its steps arrive, for
    whoever steps the collector (its own loop, or a population's stepping many collectors in
    turn: :mod:`pgrad.rl.collection.lockstep`).

    Without normalisers nothing is computed from an observation or reward before the update
    but the next action, so their finite checks run once over the whole rollout (the same
    error, naming the same env step, as a check per step): :attr:`check` says whether each
    step checks its own.
    """

    def __init__(self, collector: Collecting, num_steps: int):
        self.collector = collector
        self.steps: list[tuple] = []  # per vector step, the 9 pieces of a step (columns at the end)
        self.episodes: list = []
        c = collector
        # images go straight into [T, B, ...] buffers (see pgrad.rl.observations.frames), not
        # into the list
        self.frames = (None if c.layout.flat
                       else FrameBuffer(c.layout, num_steps, c.num_envs))
        self.deferred = c.obs_norm is None and c.reward_norm is None
        self.check = not self.deferred
        self.start = c.env_steps

    def add(self, t: int, parts: tuple, episodes: list) -> None:
        """Step ``t``'s pieces and finished episodes (:meth:`Collector.record_step`)."""
        if self.frames is not None:
            obs, nxt = self.frames.write(t, parts[0], parts[7])
            parts = (obs, *parts[1:7], nxt, parts[8])
        self.steps.append(parts)
        if episodes:
            self.episodes.extend(episodes)

    def failed(self) -> None:
        """After an EnvError: a non-finite value stepped before may be its cause, named first
        (raises that EnvError; returns if there is none)."""
        c = self.collector
        if self.deferred and self.steps:
            partial = build_trajectory(c.layout, self.steps, None, self.frames, None)
            check_rollout(partial, c.layout, c.name, c.num_envs, self.start, None)

    def finish(self) -> tuple[Trajectory, list]:
        """``(Trajectory [T, B], episodes)`` of the steps added (their deferred checks run)."""
        c = self.collector
        traj = build_trajectory(c.layout, self.steps, None, self.frames, c.current_obs)
        if self.deferred:
            check_rollout(traj, c.layout, c.name, c.num_envs, self.start, c.current_obs)
        return traj, self.episodes


__all__ = ["RolloutRun"]
