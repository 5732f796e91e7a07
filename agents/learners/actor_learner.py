"""IMPALA and APPO's actor-learner agents: their step, trajectories from a source, and the
in-process actor. What they are (configs, V-trace, the chains): :mod:`agents.algorithms.impala`.
"""

from __future__ import annotations

from collections import deque
from typing import Any, NamedTuple

import numpy as np

import pgrad
from agents.algorithms.impala import APPOConfig, IMPALAConfig
from agents.base import ActorCriticAgent
from agents.update.targets import PROXIMAL_KEY, VTraceTargets
from pgrad.rl.acting.policy import NumpyPolicy
from pgrad.rl.collection.rollout import Trajectory


class Batch(NamedTuple):
    """One trajectory as a source hands it to the learner."""

    traj: Trajectory  # [T, B, ...] with the behaviour log-probs in traj.log_probs
    episodes: list  # [(env steps into this trajectory, return, length)] finished in it
    steps: int  # env steps it holds
    version: int  # the learner's update count when the weights that acted were broadcast
    source: int = 0  # which actor collected it


class InProcessActor:
    """The deterministic single-actor schedule: acts in this process with the agent's collector.

    The trajectory for update ``u`` is acted with the newest broadcast weights whose version is
    ``<= u - cfg.lag`` (the oldest kept, right after a start or a restore), sampled from the
    generator ``default_rng([seed, u])`` as the synchronous agents do.
    """

    def __init__(self, agent: IMPALA):
        self.agent = agent
        self.lag = int(agent.cfg.lag)
        # Dense-only policies act on a numpy copy of their own. An encoder's compiled actor reads
        # the live Keras variables, so a lagged version is swapped into them for the collection
        # and the learner's weights are put back before the update (nothing runs in between).
        self.actor = NumpyPolicy(agent.net) if agent.net.encoder is None else agent.mirror
        self.kept: deque = deque()  # (version, flat weights), oldest first

    def reset(self, version: int, state: dict) -> None:
        self.kept.clear()
        self.broadcast(version, state)

    def broadcast(self, version: int, state: dict) -> None:
        self.kept.append((int(version), np.array(state["weights"], np.float32)))

    def next(self, updates: int) -> Batch:
        agent = self.agent
        while len(self.kept) > 1 and self.kept[1][0] <= updates - self.lag:
            self.kept.popleft()  # never needed again: the wanted version only grows
        version, weights = self.kept[0]
        live = None  # the learner's weights, while a lagged version sits in the live variables
        if self.actor is not agent.mirror:
            self.actor.load_flat(weights)
        elif version != updates:  # the newest broadcast (version == updates) is the live one
            live = self.actor.flat_numpy()
            self.actor.load_flat(weights)
        try:
            rng = np.random.default_rng([agent.seed, updates])
            saved, agent.mirror = agent.mirror, self.actor  # acting_fn acts with agent.mirror
            try:
                policy_fn = agent.acting_fn(rng)
            finally:
                agent.mirror = saved
            base = agent.collector.env_steps = agent.env_steps
            traj, episodes = agent.collector.collect(policy_fn, agent.cfg.n_steps)
        finally:
            if live is not None:
                self.actor.load_flat(live)
        return Batch(traj, [(s - base, r, n) for s, r, n in episodes],
                     agent.collector.env_steps - base, version)

    def close(self) -> None:
        pass


class IMPALA(ActorCriticAgent):
    """IMPALA: V-trace targets, importance-weighted policy gradient, trajectories from a source.

    See the module docstring; the interface is the actor-critic agent's (``agents/__init__.py``).
    """

    Config = IMPALAConfig
    cfg: IMPALAConfig
    name = "impala"

    def __init__(self, *args: Any, **kwargs: Any):
        self._source: Any = None
        self._stale_source = True
        self._snapshot: tuple | None = None  # (updates, flat weights) at trackables()
        super().__init__(*args, **kwargs)

    def default_transform(self) -> pgrad.GradientTransform:
        return pgrad.chain(pgrad.importance_weight(self.cfg.pg_rho_bar),
                           pgrad.weight_by("advantages"), pgrad.mean_steps(), name=self.name)

    def make_targets(self) -> VTraceTargets:
        """V-trace (:class:`agents.update.targets.VTraceTargets`): the update computes the
        learner's log-probs for it; ``advantages = q_s - V(x_s)``, critic targets ``v_s``."""
        cfg = self.cfg
        return VTraceTargets(cfg.gamma, cfg.gae_lambda, rho_bar=cfg.rho_bar, c_bar=cfg.c_bar,
                             pg_rho_bar=cfg.pg_rho_bar)

    # -- the source of trajectories --------------------------------------------------------------

    @property
    def source(self) -> Any:  # InProcessActor, or a distributed source (pgrad_app)
        """Where trajectories come from (default: :class:`InProcessActor`)."""
        if self._source is None:
            self._source = InProcessActor(self)
        return self._source

    def use_source(self, source: Any) -> None:
        """Takes trajectories from ``source`` from the next step on (closes the previous one)."""
        if self._source is not None:
            self._source.close()
        self._source, self._stale_source = source, True

    def trackables(self) -> dict[str, Any]:
        # A restore may follow (or a save: every checkpoint asks): the next step compares the
        # state with this snapshot and resets the source only if a restore changed it.
        updates = self._sync()
        self._snapshot = (updates, self.mirror.flat_numpy().copy())
        return super().trackables()

    def _restored(self, updates: int) -> bool:
        """Whether a restore changed the state since :meth:`trackables` was last called."""
        if self._snapshot is None:
            return False
        before, self._snapshot = self._snapshot, None
        return updates != before[0] or not np.array_equal(self.mirror.flat_numpy(), before[1])

    def step(self) -> dict[str, Any]:
        """Takes the next trajectory from the source and updates on it; broadcasts the weights
        every ``broadcast_interval`` updates. See ``agents/__init__.py``."""
        updates = self._sync()
        source = self.source
        if self._restored(updates):  # the actors get the restored weights; in flight: dropped
            self._stale_source = True
        if self._stale_source:
            source.reset(updates, self.acting_state())
            self._stale_source = False
        batch = source.next(updates)
        base = self._env_steps
        taken = int(batch.steps)
        metrics = self._update_on(batch.traj, updates, base, taken)  # the agents' shared tail
        metrics["policy_lag"] = float(updates - batch.version)
        if (updates + 1) % int(self.cfg.broadcast_interval) == 0:
            source.broadcast(updates + 1, self.acting_state())
        episodes = [(base + s, r, n) for s, r, n in batch.episodes]
        return {"env_steps": base + taken, "episodes": episodes, "metrics": metrics}

    def close(self) -> None:
        if self._source is not None:
            self._source.close()
        super().close()


class APPO(IMPALA):
    """APPO: PPO's clipped surrogate on V-trace advantages, of the ratio ``pi / mu``
    (``clip_against="behaviour"``) or decoupled, ``pi / pi_prox`` weighted by
    ``min(pg_rho_bar, pi_prox / mu)`` (``clip_against="learner"``; the module docstring)."""

    Config = APPOConfig
    cfg: APPOConfig
    name = "appo"

    def default_transform(self) -> pgrad.GradientTransform:
        if self.cfg.clip_against == "learner":
            return pgrad.chain(
                pgrad.importance_weight(self.cfg.pg_rho_bar, target_key=PROXIMAL_KEY),
                pgrad.clip_ratio("clip_range", behaviour_key=PROXIMAL_KEY), pgrad.mean_steps(),
                name=self.name)
        return pgrad.chain(pgrad.clip_ratio("clip_range"), pgrad.mean_steps(), name=self.name)


__all__ = ["APPO", "Batch", "IMPALA", "InProcessActor"]
