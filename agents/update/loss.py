"""The actor-critic loss terms as small pure functions (rlax's style), on flat ``[N]`` tensors.

The policy term itself is not here: the engine forms it from per-step gradients through the
transform chain. These are the terms added after it (value, entropy) and the scalars reported
about it (surrogate objective, approximate KL).
"""

from __future__ import annotations

import tensorflow as tf


def value_loss(values: tf.Tensor, returns: tf.Tensor, old_values: tf.Tensor | None = None,
               clip_range: float = 0.0) -> tf.Tensor:
    """``mean((R_t - V_t)^2)``; with ``clip_range > 0`` PPO2's clipped form.

    Clipped (Schulman et al.'s baselines ``ppo2``, CleanRL):
    ``mean(max((R_t - V_t)^2, (R_t - V_old,t - clip(V_t - V_old,t, -c, c))^2))``.

    Args:
      values: ``[N]`` V(o_t) under the current critic (carries the gradient).
      returns: ``[N]`` regression targets R_t (no gradient).
      old_values: ``[N]`` V(o_t) when the batch was collected; needed when clipping.
      clip_range: ``c`` (a number or a scalar tensor); the number 0 turns clipping off.
    """
    unclipped = tf.square(returns - values)
    if isinstance(clip_range, (int, float)) and clip_range <= 0:  # a tensor: its schedule's
        return tf.reduce_mean(unclipped)
    clipped_v = old_values + tf.clip_by_value(values - old_values, -clip_range, clip_range)
    return tf.reduce_mean(tf.maximum(unclipped, tf.square(returns - clipped_v)))


def aux_loss(value_term: tf.Tensor, entropy: tf.Tensor, vf_coef: float,
             ent_coef: float) -> tf.Tensor:
    """``vf_coef * value_term - ent_coef * mean(entropy)``: what is added to the policy term."""
    return vf_coef * value_term - ent_coef * tf.reduce_mean(entropy)


def approx_kl(log_probs: tf.Tensor, behaviour_log_probs: tf.Tensor) -> tf.Tensor:
    """``mean((r_t - 1) - log r_t)``, ``r_t = pi(a_t|o_t) / pi_behaviour(a_t|o_t)``: a low-variance,
    non-negative estimate of KL(behaviour || current) (Schulman's k3; SB3's ``approx_kl``)."""
    log_ratio = log_probs - behaviour_log_probs
    return tf.reduce_mean(tf.exp(log_ratio) - 1.0 - log_ratio)


def surrogate(log_probs: tf.Tensor, behaviour_log_probs: tf.Tensor, advantages: tf.Tensor,
              clip_range: float | tf.Tensor | None = None) -> tf.Tensor:
    """The policy loss whose gradient the default chains follow (reported, not differentiated).

    ``clip_range=None`` (A2C, REINFORCE): ``-mean(A_t log pi_t)``, as Stable-Baselines3 reports
    it. Otherwise PPO's ``-mean(min(r_t A_t, clip(r_t, 1 - c, 1 + c) A_t))`` with
    ``r_t = exp(log pi_t - log pi_behaviour_t)``.
    """
    if clip_range is None:
        return -tf.reduce_mean(advantages * log_probs)
    ratio = tf.exp(log_probs - behaviour_log_probs)
    clipped = tf.clip_by_value(ratio, 1.0 - clip_range, 1.0 + clip_range)
    return -tf.reduce_mean(tf.minimum(ratio * advantages, clipped * advantages))
