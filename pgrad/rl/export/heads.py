"""The action heads' maths in plain TensorFlow ops, for exported policies.

An export (:mod:`pgrad.rl.export.saved_model`) must run without TFP or Keras, and convert to TFLite
and
ONNX with their built-in operators only. So the heads' modes, samples and distribution
parameters are written here again in elementwise ops, ``cumsum``, ``argmax`` and ``matmul``;
sampling takes its randomness as an input: ``u``, uniforms in ``[0, 1)`` ``[N, noise_size]``
(:func:`noise_size`), so any host with a uniform random source can sample from a converted
model, and the SavedModel's seeded ``sample`` draws ``u`` with a stateless random op.

Every function takes the head (its static facts: sizes, bounds, options), ``params`` ``[N,
param_size]`` (the actor's output) and, for Gaussian heads, ``log_std``: the export's own copy
of the head's log-std variable (or None for a state-dependent std).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from pgrad.rl import distributions as dist_lib


def _unsupported(head) -> ValueError:
    return ValueError(f"cannot export head {type(head).__name__}; supported: "
                      f"{dist_lib.SUPPORTED} action spaces")


def noise_size(head: dist_lib.ActionHead) -> int:
    """Uniforms per observation that :func:`sample` reads: one per categorical dimension or
    binary unit, two per Gaussian dimension (Box-Muller)."""
    if isinstance(head, dist_lib.CategoricalHead):
        return 1
    if isinstance(head, dist_lib.GaussianHead):
        return 2 * head.size
    if isinstance(head, dist_lib.MultiCategoricalHead):
        return len(head.nvec)
    if isinstance(head, dist_lib.BernoulliHead):
        return int(np.prod(head.space_shape))
    raise _unsupported(head)


def _with_rows(x: tf.Tensor, shape) -> tf.Tensor:
    """``[N, prod(shape)] -> [N, *shape]``."""
    return tf.reshape(x, tf.concat([tf.shape(x)[:1], tf.constant(shape, tf.int32)], 0))


def mean_and_log_std(head: dist_lib.GaussianHead, params: tf.Tensor, log_std: tf.Tensor | None
                     ) -> tuple[tf.Tensor, tf.Tensor]:
    """A Gaussian head's ``([N, A]`` mean, ``[N, A]`` log-std) (the pre-squash Gaussian), as
    :meth:`pgrad.rl.distributions.GaussianHead.mean_and_log_std`; gSDE: the per-state marginal."""
    a = head.size
    if head.uses_latent:
        latent = params[:, a:]
        assert log_std is not None  # gSDE heads carry their log-std (narrows the type for mypy)
        var = tf.matmul(tf.square(latent), tf.exp(2.0 * log_std)) + dist_lib.SDE_EPS
        return params[:, :a], 0.5 * tf.math.log(var)
    if head.state_dependent_std:
        return params[:, :a], tf.clip_by_value(head.log_std_init + params[:, a:],
                                               dist_lib.LOG_STD_MIN, dist_lib.LOG_STD_MAX)
    return params[:, :a], tf.broadcast_to(log_std, tf.shape(params[:, :a]))


def _gaussian_to_env(head, u: tf.Tensor) -> tf.Tensor:
    """Pre-squash Gaussian values ``[N, A]`` -> env actions ``[N, *shape]`` (as ``to_env``)."""
    if head.squash:
        u = head.center + head.half_range * tf.tanh(u)
    return tf.clip_by_value(_with_rows(u, head.space_shape), head.low, head.high)


def _inverse_cdf(logits: tf.Tensor, u: tf.Tensor) -> tf.Tensor:
    """One categorical draw per row of ``[N, K]`` logits from ``[N, 1]`` uniforms: the number
    of CDF entries below ``u``, clipped to ``K - 1`` (as pgrad's numpy sampler). ``[N]`` int64."""
    e = tf.exp(logits - tf.reduce_max(logits, axis=1, keepdims=True))
    cdf = tf.cumsum(e, axis=1)  # [N, K], unnormalised: compare with u * total
    below = tf.cast(u * cdf[:, -1:] > cdf, tf.int64)
    return tf.minimum(tf.reduce_sum(below, axis=1), logits.shape[1] - 1)


def _split(head, params: tf.Tensor) -> list[tf.Tensor]:
    return tf.split(params, [int(n) for n in head.nvec], axis=1)


def mode(head: dist_lib.ActionHead, params: tf.Tensor) -> tf.Tensor:
    """Deterministic env actions ``[N, ...]``: argmax (Discrete, MultiDiscrete), the Gaussian
    mean squashed if so and clipped to the bounds (Box), ``logit > 0`` (MultiBinary)."""
    if isinstance(head, dist_lib.CategoricalHead):
        return tf.argmax(params, axis=1) + head.start
    if isinstance(head, dist_lib.GaussianHead):
        return _gaussian_to_env(head, params[:, : head.size])
    if isinstance(head, dist_lib.MultiCategoricalHead):
        modes = tf.stack([tf.argmax(p, axis=1) for p in _split(head, params)], axis=1)
        return modes + tf.constant(np.asarray(head.start, np.int64))
    if isinstance(head, dist_lib.BernoulliHead):
        return _with_rows(tf.cast(params > 0, tf.int8), head.space_shape)
    raise _unsupported(head)


def sample(head: dist_lib.ActionHead, params: tf.Tensor, log_std: tf.Tensor | None,
           u: tf.Tensor) -> tf.Tensor:
    """Env actions ``[N, ...]`` drawn from the head's distribution with the uniforms ``u``
    ``[N, noise_size]`` in ``[0, 1)``: inverse-CDF draws (Discrete, MultiDiscrete), Box-Muller
    normals ``mean + std * z`` squashed if so and clipped (Box), ``u < sigmoid(logit)``
    (MultiBinary). The same ``u`` gives the same actions."""
    if isinstance(head, dist_lib.CategoricalHead):
        return _inverse_cdf(params, u[:, :1]) + head.start
    if isinstance(head, dist_lib.GaussianHead):
        a = head.size
        mean, step_log_std = mean_and_log_std(head, params, log_std)
        # Box-Muller: 1 - u is in (0, 1], so the log is finite; cos takes u as it is.
        z = tf.sqrt(-2.0 * tf.math.log(1.0 - u[:, :a])) * tf.cos((2.0 * np.pi) * u[:, a:2 * a])
        return _gaussian_to_env(head, mean + tf.exp(step_log_std) * z)
    if isinstance(head, dist_lib.MultiCategoricalHead):
        draws = [_inverse_cdf(p, u[:, d:d + 1]) for d, p in enumerate(_split(head, params))]
        return tf.stack(draws, axis=1) + tf.constant(np.asarray(head.start, np.int64))
    if isinstance(head, dist_lib.BernoulliHead):
        return _with_rows(tf.cast(u < tf.sigmoid(params), tf.int8), head.space_shape)
    raise _unsupported(head)


def distribution_params(head: dist_lib.ActionHead, params: tf.Tensor,
                        log_std: tf.Tensor | None) -> dict[str, tf.Tensor]:
    """The distribution's parameters by name: ``logits`` (Discrete ``[N, n]``, MultiDiscrete
    ``[N, sum(nvec)]``, MultiBinary ``[N, *shape]``) or the pre-squash Gaussian's ``mean`` and
    ``log_std`` (Box, ``[N, *shape]`` each)."""
    if isinstance(head, (dist_lib.CategoricalHead, dist_lib.MultiCategoricalHead)):
        return {"logits": params}
    if isinstance(head, dist_lib.GaussianHead):
        mean, step_log_std = mean_and_log_std(head, params, log_std)
        return {"mean": _with_rows(mean, head.space_shape),
                "log_std": _with_rows(step_log_std, head.space_shape)}
    if isinstance(head, dist_lib.BernoulliHead):
        return {"logits": _with_rows(params, head.space_shape)}
    raise _unsupported(head)
