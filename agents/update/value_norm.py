"""Value normalisation as a targets part: GAE on denormalised values, normalised critic targets.

MAPPO's value normalisation (Yu et al. 2022;
:class:`pgrad.rl.observations.normalize.ValueNormalizer`): the
critic's output lives in normalised units. For one ``[T, B]`` rollout,

1. ``V = denormalize(v)`` and ``V' = denormalize(v')`` of the critic's outputs ``v``, ``v'`` at
   ``o_t`` and ``o_{t+1}`` (statistics as they were before this rollout);
2. GAE(lambda) advantages on ``V``, ``V'`` and the returns ``R = A + V`` (reward units);
3. the statistics take in ``R`` (only the steps the live mask keeps);
4. the critic's regression target is ``normalize(R)`` with the updated statistics.

The batch's ``values`` stay the critic's own outputs ``v``, so PPO's clipped value loss
(``clip_range_vf``) clips in normalised units, as MAPPO's does. MAPPO calls its update once per
minibatch and epoch; here it is called once per rollout with the whole rollout (with
``beta = 0.99999`` both weigh every rollout alike; only the first rollout's own minibatches
see a different mean and spread there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

import pgrad
from pgrad.rl.observations.normalize import ValueNormalizer

__all__ = ["ValueNormTargets"]


class ValueNormTargets:
    """GAE(lambda) targets through a :class:`~pgrad.rl.observations.normalize.ValueNormalizer`
    (module docstring); same call as :class:`agents.update.targets.GAETargets`.

    Args:
      gamma: the discount; gae_lambda: GAE's lambda.
      normalizer: the statistics (updated in the update's graph; checkpointed by the agent
        through :meth:`trackables`).
      live: ``[T, B]`` float32 variable, 1 on the steps whose returns enter the statistics (the
        agent sets it before each update: its rollout's mask); None: every step.
    """

    #: The weights that acted are the weights that learn (values from acting are exact).
    on_policy = True

    def __init__(self, gamma: float, gae_lambda: float, normalizer: ValueNormalizer,
                 live: tf.Variable | None = None):
        self.gamma, self.gae_lambda = gamma, gae_lambda
        self.normalizer, self.live = normalizer, live

    def __call__(self, rewards: tf.Tensor, terminated: tf.Tensor, truncated: tf.Tensor,
                 values: tf.Tensor, next_values: tf.Tensor,
                 behaviour_log_probs: tf.Tensor | None = None,
                 learner_log_probs: Callable[[], tf.Tensor] | None = None
                 ) -> tuple[tf.Tensor, tf.Tensor, dict]:
        """``[T, B]`` rollout and the critic's normalised ``values``/``next_values`` ->
        ``(advantages [T, B], normalised returns [T, B], {})``."""
        norm = self.normalizer
        v_t = norm.denormalize(tf.cast(values, tf.float32))  # [T, B] reward units
        v_next = norm.denormalize(tf.cast(next_values, tf.float32))  # [T, B]
        advantages = pgrad.gae(rewards, v_t, v_next, terminated, truncated, self.gamma,
                               self.gae_lambda)
        returns = advantages + tf.cast(v_t, advantages.dtype)  # [T, B] reward units
        norm.update(returns, None if self.live is None else self.live.read_value())
        return advantages, norm.normalize(returns), {}

    def trackables(self) -> dict[str, Any]:
        """What a checkpoint saves of it: the statistics."""
        return {"value_normalizer": self.normalizer}
