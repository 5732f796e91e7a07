"""IMPALA (Espeholt et al. 2018) and APPO: an actor-learner agent with V-trace off-policy targets.

The learner is the actor-critic agent's compiled update; what changes is where trajectories come
from and how they are corrected. Actors act on fixed-length trajectories (``n_steps`` vector
steps of their ``num_envs`` envs) with the weights last *broadcast* to them and send each one
with its behaviour log-probabilities ``log mu(a_t | x_t)`` and the weight version (the learner's
update count) it was acted with. The learner takes them one at a time, as they arrive, and
updates on each:

* the critic regresses on the V-trace targets ``v_s`` (:func:`pgrad.vtrace`: truncated
  importance weights ``rho_t = min(rho_bar, pi / mu)`` and traces ``c_t = min(c_bar, pi / mu)``,
  ``pi`` the learner's current policy, computed in the update's graph);
* the policy gradient is the chain ``chain(importance_weight(pg_rho_bar), weight_by("advantages"),
  mean_steps())`` with ``advantages = q_s - V(x_s)``, ``q_s = r_s + gamma v_{s+1}``: the
  importance weight is a per-step scale in the transform layer (:mod:`pgrad.transforms`), so a
  user's chain can put it beside per-step clipping or a natural gradient.

Every ``broadcast_interval`` updates the learner broadcasts its weights. The *policy lag* of an
update -- learner updates between the weights that acted and those that learn -- is reported in
its metrics as ``policy_lag`` (with ``rho_mean`` / ``truncated_fraction`` of the chain).

Where the trajectories come from is the agent's ``source`` (executor-agnostic: anything with
``next(updates) -> Batch``, ``broadcast(version, acting_state)``, ``reset(version, acting_state)``
and ``close()``). The default, :class:`InProcessActor`, is a deterministic single-actor schedule
in this process: the trajectory of update ``u`` is acted with the newest broadcast weights of a
version ``<= u - lag``, so tests of the correction are exact and fast (``lag = 0`` with
``rho_bar = c_bar = 1`` is A2C with ``gae_lambda = 1``). Ray actors streaming trajectories
without a barrier are :mod:`pgrad_app.distributed.async_learner` (``--workers N``).

:class:`APPO` is the same learner with PPO's clipped surrogate on the V-trace advantages. Which
ratio the clip bounds is ``clip_against``:

* ``"behaviour"`` (the default): ``chain(clip_ratio("clip_range"), mean_steps())``, the ratio
  ``pi / mu`` (which is also the importance weight), as RLlib's APPO without its target network.
  When the actor is a whole update behind (PPO's 16 x 1024 trajectories at lag 1), ``pi / mu``
  starts near or outside the clip range and much of the batch gives no gradient.
* ``"learner"``: the decoupled objective of Hilton et al. 2021 ("Batch size-invariance for
  policy optimization"), ``mean_t w_t min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t)`` with
  ``r_t = pi / pi_prox`` and ``w_t = min(pg_rho_bar, pi_prox / mu)``, ``pi_prox`` the learner's
  policy at the start of the update (V-trace's target policy, in the chain's context as
  ``proximal_log_probs``; fixed over the update's epochs). As a chain:
  ``chain(importance_weight(pg_rho_bar, target_key="proximal_log_probs"), clip_ratio("clip_range",
  behaviour_key="proximal_log_probs"), mean_steps())``. The trust region is re-centred on the
  learner each update and the staleness is a separate, truncated factor, as RLlib's APPO with its
  target network refreshed every update. At lag 0, ``pi_prox = mu`` and the two are the same.
"""

from __future__ import annotations

from collections import deque
from typing import Any, NamedTuple

import numpy as np

import pgrad
from agents.base import ActorCriticAgent
from agents.catalog.configs import APPOConfig, IMPALAConfig
from agents.update.targets import PROXIMAL_KEY, VTraceTargets
from pgrad.rl.policy import NumpyPolicy
from pgrad.rl.rollout import Trajectory


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


__all__ = ["APPO", "APPOConfig", "Batch", "IMPALA", "IMPALAConfig", "InProcessActor"]
