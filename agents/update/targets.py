"""The update's targets part: a ``[T, B]`` rollout's values -> advantages and critic targets.

Every target rule has one signature, so the compiled update calls whichever it is given::

    advantages, returns, extra = targets(rewards, terminated, truncated, values, next_values,
                                         behaviour_log_probs, learner_log_probs)

``values``/``next_values`` are ``V(o_t)``/``V(o_{t+1})`` ``[T, B]``; ``behaviour_log_probs``
``[T, B]`` ``log mu(a_t | o_t)`` of the policy that acted; ``learner_log_probs`` a function
``() -> [T, B]`` ``log pi(a_t | o_t)`` under the learner's current weights, called only by a rule
that needs it (traced once, so on-policy updates never compute it). ``extra`` is what the rule
adds to the update's batch (the chain's context), fixed over its epochs.

* :class:`GAETargets`: GAE(lambda) (the on-policy agents), bootstrapped at truncations, never at
  terminations; ``returns = advantages + values``.
* :class:`VTraceTargets`: V-trace (IMPALA/APPO, :func:`pgrad.vtrace`), whose target policy is the
  learner's; ``extra`` carries those log-probs as ``proximal_log_probs`` (APPO's decoupled clip).
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

import pgrad

#: The chain's context key of the learner's log-probs at the start of an update (V-trace's target
#: policy ``pi_prox``; APPO's decoupled clip reads it).
PROXIMAL_KEY = "proximal_log_probs"


class GAETargets:
    """GAE(lambda) advantages and ``advantages + values`` critic targets.

    Args:
      gamma: the discount; gae_lambda: GAE's lambda (1: Monte Carlo returns minus the baseline).
    """

    #: The weights that acted are the weights that learn (values from acting are exact).
    on_policy = True

    def __init__(self, gamma: float, gae_lambda: float):
        self.gamma, self.gae_lambda = gamma, gae_lambda

    def __call__(self, rewards: tf.Tensor, terminated: tf.Tensor, truncated: tf.Tensor,
                 values: tf.Tensor, next_values: tf.Tensor,
                 behaviour_log_probs: tf.Tensor | None = None,
                 learner_log_probs: Callable[[], tf.Tensor] | None = None
                 ) -> tuple[tf.Tensor, tf.Tensor, dict]:
        advantages = pgrad.gae(rewards, values, next_values, terminated, truncated,
                               self.gamma, self.gae_lambda)
        return advantages, advantages + tf.cast(values, advantages.dtype), {}


class VTraceTargets:
    """V-trace targets ``v_s`` for the critic and ``q_s - V(x_s)`` advantages
    (``q_s = r_s + gamma v_{s+1}``), with truncated importance weights of the learner's policy
    over the behaviour policy (Espeholt et al. 2018).

    Args:
      gamma, gae_lambda: the discount and V-trace's lambda.
      rho_bar, c_bar, pg_rho_bar: the truncation levels of the value targets, the traces and the
        policy-gradient weights.
    """

    #: Actors act on lagged weights: the learner recomputes values and log-probs.
    on_policy = False

    def __init__(self, gamma: float, gae_lambda: float, rho_bar: float, c_bar: float,
                 pg_rho_bar: float):
        self.gamma, self.gae_lambda = gamma, gae_lambda
        self.rho_bar, self.c_bar, self.pg_rho_bar = rho_bar, c_bar, pg_rho_bar

    def __call__(self, rewards: tf.Tensor, terminated: tf.Tensor, truncated: tf.Tensor,
                 values: tf.Tensor, next_values: tf.Tensor,
                 behaviour_log_probs: tf.Tensor | None = None,
                 learner_log_probs: Callable[[], tf.Tensor] | tf.Tensor | None = None
                 ) -> tuple[tf.Tensor, tf.Tensor, dict]:
        if behaviour_log_probs is None or learner_log_probs is None:
            raise ValueError("V-trace targets need the behaviour and the learner's log-probs.")
        target = learner_log_probs() if callable(learner_log_probs) else learner_log_probs
        out = pgrad.vtrace(rewards, values, next_values, terminated, truncated,
                           behaviour_log_probs, target, self.gamma, rho_bar=self.rho_bar,
                           c_bar=self.c_bar, pg_rho_bar=self.pg_rho_bar, lambda_=self.gae_lambda)
        return out.q_estimates - tf.cast(values, tf.float32), out.vs, {PROXIMAL_KEY: target}
