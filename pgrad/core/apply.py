"""Applying ascent-direction gradients with a Keras optimizer."""

from __future__ import annotations

from collections.abc import Sequence

import keras
import tensorflow as tf

from pgrad.core import variables_as_values


def all_finite(grads: Sequence[tf.Tensor]) -> tf.Tensor:
    """``[]`` bool: every element of every gradient is finite."""
    grads = [tf.convert_to_tensor(g) for g in grads]
    if not grads:
        return tf.constant(True)
    if len({g.dtype for g in grads}) == 1:  # one check over all elements: 3 ops, not 2 per tensor
        return tf.reduce_all(tf.math.is_finite(tf.concat([tf.reshape(g, [-1]) for g in grads], 0)))
    return tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])


def apply_updates(
    optimizer: keras.optimizers.Optimizer,
    grads: Sequence[tf.Tensor],
    variables: Sequence[tf.Variable],
    *,
    skip_nonfinite: bool = False,
    condition: tf.Tensor | None = None,
) -> tf.Tensor:
    """Applies ascent-direction ``grads`` to ``variables`` with a (minimising) Keras optimizer.

    The gradients are negated here, exactly once: pgrad's per-step gradients are gradients of
    log-probabilities (ascent), Keras optimizers minimise. The optimizer's own ``clipnorm``,
    ``clipvalue``, weight decay and learning-rate schedule apply as usual.

    Args:
      optimizer: any ``keras.optimizers.Optimizer`` (SGD, Adam, RMSprop, ...).
      grads: one gradient per variable, ``[*var.shape]``.
      variables: the variables to update.
      skip_nonfinite: if any gradient holds NaN/Inf, change nothing (no variable, no optimizer
        slot, no iteration count).
      condition: optional ``[]`` bool tensor; when false, change nothing either (e.g. an early
        stop decided in the same graph).

    Returns:
      ``[]`` bool tensor: whether the update was applied.
    """
    variables = list(variables)
    grads = [tf.convert_to_tensor(g) for g in grads]
    if len(grads) != len(variables):
        raise ValueError(f"apply_updates: {len(grads)} gradients for {len(variables)} variables.")
    if not optimizer.built:
        with tf.init_scope():  # slots must exist outside any tf.cond below
            optimizer.build(variables)
    descent = [-g for g in grads]
    if not skip_nonfinite and condition is None:
        optimizer.apply(descent, variables)
        return tf.constant(True)
    finite = all_finite(grads) if skip_nonfinite else tf.constant(True)
    if condition is not None:
        finite = tf.logical_and(finite, tf.cast(condition, tf.bool))
    if tf.executing_eagerly():
        if bool(finite):
            optimizer.apply(descent, variables)
        return finite

    def apply():
        optimizer.apply(descent, variables)
        return tf.constant(True)

    if variables_as_values.active() is not None:  # values, not variables: a select, no cond
        variables_as_values.select(finite, apply)
        return finite
    return tf.cond(finite, apply, lambda: tf.constant(False))
