"""A policy-step part: TRPO's backtracking line search after the optimizer's step.

After the natural-gradient step ``x`` is applied (``theta' = theta + x``), try ``theta +
beta^j x`` for ``j = 0, 1, ..., max_steps - 1`` and keep the first whose mean KL to the policy
before the step is below ``max_kl`` and whose surrogate ``mean_t(A_t pi(a_t|o_t) / mu(a_t|o_t))``
is above the one before the step; if none is, the policy stays where it was. This is
Stable-Baselines3-contrib's TRPO rule (``line_search_shrinking_factor``,
``line_search_max_iter``, the KL ``KL(pi_new || pi_old)`` of the whole distributions), and
Schulman et al. 2015's.

The part is built from the config (``agents.algorithms.trpo``) and handed to the update in its
:class:`agents.update.parts.UpdateParts` (``policy_step``); :class:`agents.update.minibatch.
MinibatchStep` calls it after each applied step with a function that evaluates the batch under
the current weights. It reports ``line_search_steps`` (the ``j`` taken, ``max_steps`` when it
failed) and ``line_search_accepted``.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf
import tensorflow_probability as tfp

from pgrad.core import variables_as_values

#: The metrics the part adds to each minibatch step's.
KEYS = ("line_search_steps", "line_search_accepted")


def mean_kl(new, old, new_log_probs: tf.Tensor, old_log_probs: tf.Tensor) -> tf.Tensor:
    """``mean KL(new || old)`` of two batches of distributions ``[M]``; where the pair has no
    closed form (TFP raises NotImplementedError), the sample estimate ``mean(log new - log old)``
    at the batch's actions (unbiased for on-policy samples)."""
    try:
        return tf.reduce_mean(tfp.distributions.kl_divergence(new, old))
    except NotImplementedError:
        return tf.reduce_mean(new_log_probs - old_log_probs)


class BacktrackingLineSearch:
    """TRPO's line search as an update part.

    Args:
      max_kl: the KL bound ``delta`` a step must stay under.
      shrink: ``beta`` in (0, 1), the factor of each backtrack.
      max_steps: the trials at most (``j < max_steps``).
    """

    keys = KEYS

    def __init__(self, max_kl: float, shrink: float = 0.8, max_steps: int = 10):
        if not max_kl > 0:
            raise ValueError(f"the line search needs max_kl > 0; got {max_kl}.")
        if not 0 < shrink < 1:
            raise ValueError(f"line_search_shrink must be in (0, 1); got {shrink}.")
        if not 1 <= int(max_steps) <= 100:
            raise ValueError(f"line_search_steps must be in [1, 100]; got {max_steps}.")
        self.max_kl, self.shrink, self.max_steps = float(max_kl), float(shrink), int(max_steps)

    def __call__(self, variables: list[tf.Variable], before: list[tf.Tensor],
                 evaluate: Callable[[], tuple], advantages: tf.Tensor,
                 behaviour_log_probs: tf.Tensor, old: tuple) -> dict[str, tf.Tensor]:
        """Backtracks the step just applied to ``variables`` (their values ``before`` it).

        Args:
          variables: the policy's variables, holding ``theta + x``.
          before: their values ``theta`` before the step.
          evaluate: ``() -> (distribution, log_probs [M])`` of the batch under the variables'
            current values.
          advantages: ``[M]`` the weights of the surrogate (as the step used them).
          behaviour_log_probs: ``[M]`` ``log mu(a_t | o_t)`` of the policy that acted.
          old: ``(distribution, log_probs [M])`` under ``theta``.

        Returns:
          The metrics :data:`KEYS`.
        """
        old_dist, old_log_probs = old
        adv = tf.cast(advantages, tf.float32)

        def surrogate(log_probs):  # mean_t A_t pi / mu   []
            return tf.reduce_mean(adv * tf.exp(log_probs - behaviour_log_probs))

        base = surrogate(old_log_probs)
        steps = [v - b for v, b in zip([tf.convert_to_tensor(v) for v in variables], before)]

        def trial(j, coeff, accepted):
            for v, b, s in zip(variables, before, steps):
                v.assign(b + tf.cast(coeff, v.dtype) * s)
            dist, log_probs = evaluate()
            ok = tf.logical_and(mean_kl(dist, old_dist, log_probs, old_log_probs) < self.max_kl,
                                surrogate(log_probs) > base)
            return (tf.where(ok, j, j + 1), tf.where(ok, coeff, coeff * self.shrink), ok)

        # the loop carries the variables' values where they are values (a population's
        # vectorized update: pgrad.core.variables_as_values); else tf.while_loop itself
        j, _, accepted = variables_as_values.while_loop(
            lambda j, coeff, accepted: tf.logical_and(tf.logical_not(accepted),
                                                      j < self.max_steps),
            trial, (tf.constant(0), tf.constant(1.0), tf.constant(False)),
            maximum_iterations=self.max_steps)
        for v, b in zip(variables, before):  # none kept: the policy as it was
            v.assign(tf.where(accepted, tf.convert_to_tensor(v), b))
        return {"line_search_steps": tf.cast(j, tf.float32),
                "line_search_accepted": tf.cast(accepted, tf.float32)}
