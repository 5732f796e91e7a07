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

from dataclasses import dataclass, field

from agents import schedules
from agents.catalog.declare import Algorithm
from agents.config import ActorCriticConfig, doc, preset, scheduled

#: Largest IMPALA ``lag`` (updates between the acting and the learning weights).
MAX_LAG = 1000

#: APPO's ``clip_against`` values: the policy whose ratio to the current one PPO's clip bounds.
CLIP_AGAINST = ("behaviour", "learner")


@dataclass
class IMPALAConfig(ActorCriticConfig):
    """IMPALA hyperparameters (every field of the actor-critic agent, plus V-trace's and the
    actor-learner schedule's). Defaults: A2C's CartPole settings with IMPALA's truncations."""

    num_envs: int = preset("num_envs", 16)
    learning_rate: float = preset("learning_rate", 1.4e-3)
    # A floor under RMSprop's root (1e-6 inside Keras's, ~1e-3 outside it). With A2C's 1e-10,
    # once the policy solves and its gradients fade, RMSprop's mean square fades with them; the
    # next failure's gradient is divided by almost nothing (~10x the learning rate per weight)
    # and a learner that sees its step only `lag` updates later overshoots into a deterministic
    # policy: CartPole, lag 4, 150k steps: 4 of 8 seeds below 475 (seed 0: 9.4); with 1e-6, 8 of
    # 8 at 500. Reference IMPALAs use a larger floor (RMSProp epsilon 0.01 in TorchBeast, 0.1 in
    # RLlib); 1e-4 (TorchBeast's, 0.01 outside) stopped the collapse too but slowed CartPole at
    # this learning rate so much that no seed's training mean reached 475 in 150k steps
    # (docs/benchmarks/async/README.md).
    optimizer_eps: float = preset("optimizer_eps", 1e-6)
    rho_bar: float = field(default=1.0, metadata=doc(
        "V-trace: truncation of the importance weights in the value targets (rho-bar)"))
    c_bar: float = field(default=1.0, metadata=doc(
        "V-trace: truncation of the trace coefficients c_t (c-bar)"))
    pg_rho_bar: float = field(default=1.0, metadata=doc(
        "V-trace: truncation of the importance weight of the policy gradient"))
    lag: int = field(default=0, metadata=doc(
        "in-process actor (no --workers): updates between the weights that act and those that "
        "learn (a deterministic schedule, for tests and studies)"))
    broadcast_interval: int = field(default=1, metadata=doc(
        "broadcast the learner's weights to the actors every this many updates"))
    queue_size: int = field(default=4, metadata=doc(
        "with --workers: trajectories requested from the actors and not yet learned from, at "
        "most (a slow learner throttles the actors)"))

    def validate(self) -> None:
        super().validate()
        if self.rollout != "steps":
            raise ValueError("impala learns from fixed-length trajectories: rollout must be "
                             f"'steps'; got {self.rollout!r}")
        for name in ("rho_bar", "c_bar", "pg_rho_bar"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0; got {getattr(self, name)}")
        if not 0 <= int(self.lag) <= MAX_LAG:
            raise ValueError(f"lag must be in [0, {MAX_LAG}]; got {self.lag}")
        if int(self.broadcast_interval) < 1:
            raise ValueError(f"broadcast_interval must be >= 1; got {self.broadcast_interval}")
        if int(self.queue_size) < 1:
            raise ValueError(f"queue_size must be >= 1; got {self.queue_size}")


@dataclass
class APPOConfig(IMPALAConfig):
    """APPO hyperparameters: IMPALA's plus PPO's clip range (RLlib's APPO defaults where they
    fit the actor-critic agent)."""

    clip_range: float | str = field(default=0.4, metadata=scheduled(
        "APPO's clip range epsilon of the probability ratio (see clip_against)", floor=1e-3))
    clip_against: str = field(default="behaviour", metadata=doc(
        "the policy the clipped ratio is taken against: 'behaviour' = pi / mu, mu the weights "
        "that acted; 'learner' = pi / pi_prox, pi_prox the learner's policy at the start of the "
        "update, each step weighted by min(pg_rho_bar, pi_prox / mu) (decoupled PPO, Hilton et "
        "al. 2021; RLlib's target network refreshed every update); equal at lag 0"))
    # A2C's (its clipping bounds each step; its CartPole results were measured with this).
    optimizer_eps: float = preset("optimizer_eps", 1e-10)

    def validate(self) -> None:
        super().validate()
        self.validate_schedules({"clip_range": (0, 1)}, positive_start=True)
        if schedules.bounds(self.clip_range, "clip_range")[0] >= 1:
            raise ValueError(f"clip_range must be in (0, 1); got {self.clip_range}")
        if self.clip_against not in CLIP_AGAINST:
            raise ValueError(f"clip_against must be one of {CLIP_AGAINST}; "
                             f"got {self.clip_against!r}")


# The classes (their step: trajectories from a source): agents/learners/actor_learner.py.
_LEARNER = "agents.learners.actor_learner"

ALGORITHMS = (
    Algorithm("impala", "IMPALA", IMPALAConfig, agent=f"{_LEARNER}:IMPALA",
              summary="actor-learner with V-trace targets and the importance-weighted gradient"),
    Algorithm("appo", "APPO", APPOConfig, agent=f"{_LEARNER}:APPO",
              summary="PPO's clipped surrogate on V-trace advantages (actor-learner)"),
)

