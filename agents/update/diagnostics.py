"""Per-step gradient diagnostics of an update (``diagnostics``, opt-in): :func:`update_diagnostics`
adds ``diag_*`` scalars (per-step norm quantiles, grad SNR, mean cosine, clip fraction, mean
gradient norm) of ``A_t grad log pi_t`` to the update's metrics, by the cheap path
(:func:`pgrad.policy_diagnostics`: per-step norms from one batched pass, one JVP for the dot
products; never ``[T, P]``), and returns the ``[N]`` per-step norms for a TensorBoard histogram.
With it off nothing here runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

import pgrad
from pgrad.core.per_step import per_step_norms

DIAG_PREFIX = "diag_"
STEP_NORMS_KEY = "diag_step_norms"  # [N] array metric -> TensorBoard histogram only


def update_diagnostics(
    log_prob_fn: Callable[[tf.Tensor, tf.Tensor], tf.Tensor],
    variables: list[Any],
    obs: tf.Tensor,
    actions: tf.Tensor,
    advantages: tf.Tensor,
    max_norm: float,
) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
    """Diagnostics of ``A_t grad log pi(a_t | o_t)`` for one update batch (inside tf.function).

    Args:
      log_prob_fn: ``(obs [N, d], actions [N, ...]) -> [N]``.
      variables: the policy variables.
      obs, actions, advantages: the update batch, ``[N, ...]``.
      max_norm: per-step threshold for ``diag_clip_fraction`` (what ``clip_per_step(max_norm)``
        would clip); ``<= 0`` leaves it out.

    Returns:
      ``({"diag_step_norm_min", ..., "diag_grad_snr", "diag_mean_cosine", "diag_mean_grad_norm"[,
      "diag_clip_fraction"]}, [N] weighted per-step norms |A_t| ||grad log pi_t||)``.
    """
    norms = per_step_norms(log_prob_fn, variables, obs, actions)  # [N] unweighted
    out = pgrad.policy_diagnostics(log_prob_fn, variables, (obs, actions), advantages,
                                   max_norm if max_norm > 0 else None, norms=norms)
    weighted = tf.abs(tf.cast(advantages, norms.dtype)) * norms
    return {DIAG_PREFIX + k: v for k, v in out.items()}, tf.cast(weighted, tf.float32)
