"""Diagnostics of per-step gradients: norm spread, signal-to-noise, agreement with the aggregate.

For per-step terms ``g_t`` (``[P]`` each, e.g. ``w_t * grad log pi(a_t | s_t)``) and their mean
``g_bar``:

* ``step_norm_{min,median,p90,max}`` -- quantiles of ``||g_t||`` (linear interpolation, as
  ``numpy.percentile``);
* ``grad_snr = ||g_bar||^2 / (tr(Sigma) / T)`` with ``Sigma`` the sample covariance of the
  ``g_t`` (``T - 1`` in the denominator), so ``tr(Sigma) / T`` is the variance of ``g_bar`` as an
  estimate of the expected gradient. ``> 1``: the batch gradient is mostly signal;
* ``mean_cosine`` -- mean over steps of ``cos(g_t, g_bar)`` (a step with a zero gradient counts 0);
* ``clip_fraction`` -- fraction of steps with ``||g_t|| > max_norm`` (what ``clip_per_step`` would
  clip), when ``max_norm`` is given;
* ``mean_grad_norm`` -- ``||g_bar||``.

All of them are invariant to summing instead of averaging the steps except ``mean_grad_norm``.

Three ways to get them, from most to least information needed:

* :func:`per_step_diagnostics` -- from materialised per-step gradients (``[T, *shape]`` each);
* :func:`policy_diagnostics` -- from a log-prob function, never holding the ``[T, P]`` matrix:
  per-step norms in chunks, ``g_bar`` from one backward pass, and the ``[T]`` dot products
  ``g_t . g_bar`` from one Jacobian-vector product (double-backward), which is all the formulas
  need (``tr(Sigma) = (sum_t ||g_t||^2 - T ||g_bar||^2) / (T - 1)``);
* :func:`norm_diagnostics` -- from per-step norms only (quantiles and clip fraction), e.g. the norms
  the engine already computed for ``clip_per_step``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf
import tensorflow_probability as tfp

from pgrad.core.per_step import per_step_norms, zeros_for_unconnected

_QUANTILES = (("min", 0.0), ("median", 50.0), ("p90", 90.0), ("max", 100.0))


def norm_diagnostics(norms: tf.Tensor, max_norm: float | None = None) -> dict[str, tf.Tensor]:
    """Quantiles of per-step gradient norms and the fraction above ``max_norm``.

    Args:
      norms: ``[T]`` per-step gradient norms.
      max_norm: the ``clip_per_step`` threshold, or ``None`` to skip ``clip_fraction``.

    Returns:
      ``{"step_norm_min", "step_norm_median", "step_norm_p90", "step_norm_max"[,
      "clip_fraction"]}``, float32 scalars.
    """
    norms = tf.cast(tf.convert_to_tensor(norms), tf.float32)  # [T]
    qs = tfp.stats.percentile(norms, [q for _, q in _QUANTILES], interpolation="linear")
    out = {f"step_norm_{name}": qs[i] for i, (name, _) in enumerate(_QUANTILES)}
    if max_norm is not None:
        out["clip_fraction"] = tf.reduce_mean(tf.cast(norms > max_norm, tf.float32))
    return out


def diagnostics_from_stats(
    norms: tf.Tensor,
    dots: tf.Tensor,
    mean_grad_sq_norm: tf.Tensor,
    max_norm: float | None = None,
) -> dict[str, tf.Tensor]:
    """All diagnostics from ``[T]`` norms, ``[T]`` dot products with the mean, and ``||g_bar||^2``.

    Args:
      norms: ``[T]`` ``||g_t||``.
      dots: ``[T]`` ``g_t . g_bar``.
      mean_grad_sq_norm: ``[]`` ``||g_bar||^2``.
      max_norm: optional clipping threshold for ``clip_fraction``.

    Returns:
      The dict described in the module docstring (float32 scalars).
    """
    out = norm_diagnostics(norms, max_norm)
    n = tf.cast(norms, tf.float64)  # float64: the trace below is a difference of sums
    dots = tf.cast(dots, tf.float64)
    sq_mean = tf.cast(mean_grad_sq_norm, tf.float64)
    t = tf.cast(tf.size(n), tf.float64)
    # sum_t ||g_t - g_bar||^2 = sum_t ||g_t||^2 - T ||g_bar||^2; >= 0 up to round-off.
    spread = tf.maximum(tf.reduce_sum(tf.square(n)) - t * sq_mean, 0.0)
    out.update(_snr_and_cosine(spread, t, sq_mean, n, dots))
    return out


def _snr_and_cosine(spread, t, sq_mean, norms, dots) -> dict[str, tf.Tensor]:
    """SNR from the centred sum of squares ``spread``; cosines from ``dots / (norms ||g_bar||)``."""
    trace_cov = spread / (t - 1.0)  # T == 1: 0/0 = nan, the covariance is undefined
    snr = sq_mean / (trace_cov / t)  # noise-free batch: inf
    cosine = tf.math.divide_no_nan(dots, norms * tf.sqrt(sq_mean))  # [T]
    return {
        "grad_snr": tf.cast(snr, tf.float32),
        "mean_cosine": tf.cast(tf.reduce_mean(cosine), tf.float32),
        "mean_grad_norm": tf.cast(tf.sqrt(sq_mean), tf.float32),
    }


def _weight_rows(grads: Sequence[tf.Tensor], weights) -> list[tf.Tensor]:
    if weights is None:
        return [tf.convert_to_tensor(g) for g in grads]
    out = []
    for g in grads:
        g = tf.convert_to_tensor(g)
        w = tf.reshape(tf.cast(weights, g.dtype), [-1] + [1] * (g.shape.rank - 1))
        out.append(g * w)
    return out


def per_step_diagnostics(
    per_step_grads: Sequence[tf.Tensor],
    weights: tf.Tensor | None = None,
    max_norm: float | None = None,
) -> dict[str, tf.Tensor]:
    """Diagnostics of materialised per-step gradients.

    Args:
      per_step_grads: one ``[T, *shape]`` tensor per variable (as from ``pgrad.per_step_grads``).
      weights: optional ``[T]`` per-step weights; the diagnosed terms are ``w_t * g_t``.
      max_norm: optional clipping threshold for ``clip_fraction``.

    Returns:
      The dict described in the module docstring (float32 scalars).
    """
    grads = _weight_rows(per_step_grads, weights)
    num_steps = tf.shape(grads[0])[0]
    rows = tf.concat(
        [tf.reshape(tf.cast(g, tf.float64), [num_steps, -1]) for g in grads], axis=1
    )  # [T, P]
    mean = tf.reduce_mean(rows, axis=0)  # [P]
    norms = tf.norm(rows, axis=1)  # [T]
    out = norm_diagnostics(norms, max_norm)
    # Centre explicitly: exact even when the noise is tiny next to the mean.
    spread = tf.reduce_sum(tf.square(rows - mean))
    t = tf.cast(num_steps, tf.float64)
    out.update(_snr_and_cosine(spread, t, tf.reduce_sum(tf.square(mean)), norms,
                               tf.linalg.matvec(rows, mean)))
    return out


def _rows_dot(log_prob_fn: Callable, variables, inputs, tangents) -> tf.Tensor:
    """``[T]`` ``grad log_prob_t . tangent`` by double backward (a JVP without ``[T, P]``).

    The gradient of ``sum_t u_t log_prob_t`` is ``G^T u``; its dot with the tangent is
    ``u . (G tangent)``, whose gradient with respect to ``u`` is ``G tangent``.
    """
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            log_probs = log_prob_fn(*inputs)  # [T]
        u = tf.ones_like(log_probs)
        outer.watch(u)
        grads = zeros_for_unconnected(
            inner.gradient(log_probs, variables, output_gradients=u), variables)
        total = tf.add_n([tf.reduce_sum(g * tf.cast(v, g.dtype))
                          for g, v in zip(grads, tangents)])
    return outer.gradient(total, u, unconnected_gradients=tf.UnconnectedGradients.ZERO)


def policy_diagnostics(
    log_prob_fn: Callable[..., tf.Tensor],
    variables: Sequence[Any],
    inputs: Sequence[Any],
    weights: tf.Tensor | None = None,
    max_norm: float | None = None,
    *,
    chunk_size: int | None = None,
    norms: tf.Tensor | None = None,
) -> dict[str, tf.Tensor]:
    """Diagnostics of ``w_t * grad log_prob_fn(*inputs)[t]`` without materialising ``[T, P]``.

    Cost: the chunked per-step norms (skipped if ``norms`` is passed), one backward pass for
    ``g_bar`` and one double-backward pass for the ``[T]`` dot products. Equals
    :func:`per_step_diagnostics` on the materialised gradients to round-off.

    Args:
      log_prob_fn: ``log_prob_fn(*inputs) -> [T]``, row ``t`` from row ``t`` of the inputs.
      variables: the policy variables.
      inputs: per-step inputs, each ``[T, ...]``.
      weights: optional ``[T]`` weights (e.g. advantages); the terms are ``w_t * g_t``.
      max_norm: optional clipping threshold for ``clip_fraction``.
      chunk_size: rows per block for the per-step norms.
      norms: ``[T]`` norms of the *unweighted* per-step gradients, if already computed.

    Returns:
      The dict described in the module docstring (float32 scalars).
    """
    variables = list(variables)
    inputs = tuple(inputs)
    if norms is None:
        norms = per_step_norms(log_prob_fn, variables, *inputs, chunk_size=chunk_size)  # [T]
    with tf.GradientTape() as tape:
        log_probs = log_prob_fn(*inputs)  # [T]
        w = tf.ones_like(log_probs) if weights is None else tf.cast(weights, log_probs.dtype)
        objective = tf.reduce_mean(tf.stop_gradient(w) * log_probs)
    mean = zeros_for_unconnected(tape.gradient(objective, variables), variables)
    dots = _rows_dot(log_prob_fn, variables, inputs, mean)  # [T] unweighted g_t . g_bar
    sq_mean = tf.add_n([tf.reduce_sum(tf.square(tf.cast(g, tf.float64))) for g in mean])
    w = tf.cast(w, norms.dtype)
    return diagnostics_from_stats(tf.abs(w) * norms, w * dots, sq_mean, max_norm)
