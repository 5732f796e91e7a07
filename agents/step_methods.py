"""The agent's step: one rollout on the current weights, then one compiled update on it.

:class:`StepMethods` is the stepping half of :class:`agents.base.ActorCriticAgent`'s interface, as
:mod:`agents.learn_methods` is its training loop and :mod:`agents.acting.methods` its acting.
:meth:`StepMethods.step` is two halves, which a population (:mod:`agents.population`) runs
itself for many agents, their updates in one call: :meth:`StepMethods._rollout` (the sampling
generator and counters it starts from, the rollout) and :meth:`StepMethods._update_on` (the
update's inputs, the compiled update, the acting copy refreshed from its output).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from agents.acting import adversarial
from agents.config import ActorCriticConfig
from agents.schedules import Schedules
from agents.update import diagnostics
from agents.update.compiled import CompiledUpdate
from pgrad.rl.collection import rollout
from pgrad.rl.models.networks import ActorCritic


class StepMethods:
    """``agent.step`` and its two halves (see :mod:`agents.step_methods`); no state of its own.
    """

    # What the methods read of the agent (its constructor sets them: agents.base).
    cfg: ActorCriticConfig
    seed: int
    net: ActorCritic
    mirror: Any  # the numpy mirror or the compiled actor (pgrad.rl.acting.policy.make_actor)
    collector: rollout.Collector
    rollout_state: np.ndarray
    updater: CompiledUpdate
    schedules: Schedules
    budget: int | None
    update_targets: Any
    _synced_updates: int
    _env_steps: int
    if TYPE_CHECKING:
        @property
        def values_from_acting(self) -> bool: ...  # agents.base.ActorCriticAgent

        def _adversarial(self) -> adversarial.AdversarialActing: ...  # agents.base

        def _sync(self, trust: bool = False) -> int: ...  # agents.acting.methods

        def acting_fn(self, rng: np.random.Generator, values: bool = False
                      ) -> rollout.PolicyFn: ...  # agents.acting.methods

    def _collect(self, policy_fn, updates: int = 0) -> tuple[rollout.Trajectory, list]:
        if self.cfg.rollout == "groups":  # each group's seed from (seed, update): resumable
            groups = self.cfg.num_envs // self.cfg.group_size
            seeds = np.random.default_rng([self.seed, updates, 1]).integers(2**31 - 1, size=groups)
            return self.collector.collect_groups(policy_fn, seeds.tolist())
        if self.cfg.rollout == "episodes":
            return self.collector.collect_episodes(policy_fn, self.cfg.batch_steps)
        return self.collector.collect(policy_fn, self.cfg.n_steps)

    def step(self) -> dict[str, Any]:
        """Collects one rollout and updates on it. See ``agents/__init__.py``."""
        traj, episodes, updates, base, taken, recurrent = self._rollout()
        metrics = self._update_on(traj, updates, base, taken, recurrent,
                                  fixed_shape=traj.mask is None)
        return {"env_steps": base + taken, "episodes": episodes, "metrics": metrics}

    def _rollout(self) -> tuple:
        """The first half of :meth:`step`: one rollout on the current weights. Returns
        ``(traj, episodes, updates, base, taken, recurrent)`` for :meth:`_update_on`."""
        updates, rng, base = self._rollout_start()
        before = base
        policy_fn = self.acting_fn(rng, self.values_from_acting)
        # a recurrent policy's rollout starts from these (stored for the update)
        start = ((self.rollout_state, self.collector.episode_start.copy())
                 if self.net.recurrent else None)
        if self.cfg.adversarial_epsilon > 0:  # act on (and store) attacked observations
            policy_fn, perturbed = self._adversarial().wrap(policy_fn)
        traj, episodes = self._collect(policy_fn, updates)
        if self.cfg.adversarial_epsilon > 0:
            traj = adversarial.replace_observations(traj, perturbed)
        taken = self.collector.env_steps - before
        recurrent = ((*start, self.rollout_state) if start is not None and self.net.recurrent
                     else None)
        return traj, episodes, updates, base, taken, recurrent

    def _rollout_start(self, trust: bool = False) -> tuple[int, np.random.Generator, int]:
        """What a rollout starts from: ``(updates, rng, base)``, the updates so far (the acting
        copy synced to them; ``trust``: as :meth:`_sync` takes it), the rollout's sampling
        generator (seeded by the run's seed and ``updates``: a resumed run draws the same) and
        the env steps so far (the collector's count set to them, so env errors name the run's
        env step)."""
        updates = self._sync(trust)
        rng = np.random.default_rng([self.seed, updates])
        base = self._env_steps  # == env_steps_var, without a TensorFlow call
        self.collector.env_steps = base
        return updates, rng, base

    def _update_on(self, traj: rollout.Trajectory, updates: int, base: int, taken: int,
                   recurrent: tuple | None = None, fixed_shape: bool = True) -> dict[str, Any]:
        """The tail every agent's step shares: one compiled update on ``traj`` (``taken`` env
        steps after ``base``, update ``updates + 1``), the acting copy refreshed from its
        output, the counters advanced; returns the update's metrics."""
        args = self._update_args(traj, updates, base, taken, recurrent)
        return self._finish_update(self.updater(args, fixed_shape=fixed_shape), updates, base,
                                   taken)

    def _update_args(self, traj: rollout.Trajectory, updates: int, base: int, taken: int,
                     recurrent: tuple | None = None, host: bool = False) -> tuple:
        """The compiled update's inputs for ``traj`` (its scheduled values at ``base + taken``);
        a population (:mod:`agents.population`) calls many agents' updates in one graph."""
        scheduled = self.schedules.values(base + taken, self.budget, updates)
        return self.updater.inputs(traj, taken, scheduled, recurrent, host)

    def _finish_update(self, result: Any, updates: int, base: int, taken: int
                       ) -> dict[str, Any]:
        """After the compiled update returned ``result``: the acting copy refreshed from it,
        the counters advanced; returns the update's metrics."""
        out, *step_norms = result
        # [K + P]: the metrics, then the actor's update output (one fetch; a population's
        # vectorized update hands over numpy arrays fetched already)
        out = np.asarray(out)
        keys = self.updater.metric_keys
        k = len(keys)
        flat = out[k:]
        if not np.isfinite(flat).all():  # finite gradients, but the step overflowed the weights
            raise FloatingPointError(
                f"update {updates + 1} (env step {base + taken}) made the policy's weights "
                "non-finite (NaN/Inf); lower learning_rate or keep max_grad_norm > 0.")
        self.mirror.load_update_output(flat)
        self._synced_updates = updates + 1
        self._env_steps = base + taken
        if hasattr(self.update_targets, "after_update"):  # the reference's soft update
            self.update_targets.after_update(updates + 1)
        metrics = dict(zip(keys, out[:k].tolist()))
        if step_norms:  # cfg.diagnostics: [N] per-step norms, a histogram in TensorBoard
            metrics[diagnostics.STEP_NORMS_KEY] = np.asarray(step_norms[0])
        return metrics
