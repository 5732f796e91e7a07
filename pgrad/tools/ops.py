"""Ops that change the gradient flowing back through a tensor, built on ``tf.custom_gradient``.

Each op is the identity in the forward pass and rewrites the backward signal ``dy``:

* ``scale_gradient(x, factor)`` -- ``dy * factor`` (e.g. a shared actor-critic trunk that takes
  the critic's gradient at half strength);
* ``clip_gradient(x, lo, hi)`` -- ``clip(dy, lo, hi)`` element-wise;
* ``reverse_gradient(x, factor=1.0)`` -- ``-factor * dy`` (the gradient reversal layer of
  domain-adversarial training).

They work eagerly, inside ``tf.function`` and inside an exported SavedModel (TensorFlow saves
custom gradients by default, ``SaveOptions(experimental_custom_gradients=True)``). Each has a
Keras 3 layer twin (``ScaleGradient``, ``ClipGradient``, ``ReverseGradient``) that serialises
with the model.

The gradient of the *forward* function is 1, so a finite-difference check of these ops reports
the intended difference; ``pgrad.check_gradients(fn, x, reference=...)`` compares against the
function whose true derivative the modified gradient should equal (see ``docs/gradient_tools.md``).
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf


def _float_tensor(x, who: str) -> tf.Tensor:
    x = tf.convert_to_tensor(x)
    if not x.dtype.is_floating:
        raise TypeError(f"{who} needs a floating-point tensor; got {x.dtype.name}.")
    return x


@tf.custom_gradient
def _scaled(x: tf.Tensor, factor: tf.Tensor):
    def grad(dy):
        # factor has no effect on the forward value, so its true gradient is zero.
        return dy * factor, tf.zeros_like(factor)

    return tf.identity(x), grad


@tf.custom_gradient
def _clipped(x: tf.Tensor, lo: tf.Tensor, hi: tf.Tensor):
    def grad(dy):
        return tf.clip_by_value(dy, lo, hi), tf.zeros_like(lo), tf.zeros_like(hi)

    return tf.identity(x), grad


def scale_gradient(x: Any, factor: Any) -> tf.Tensor:
    """Identity forward; multiplies the incoming gradient by ``factor`` on the way back.

    Args:
      x: floating tensor, any shape.
      factor: Python number, tensor or variable (read at call time), broadcastable to ``x``;
        ``0`` is ``tf.stop_gradient``, ``1`` is the identity.

    Returns:
      A tensor equal to ``x`` whose gradient is ``factor * dy``.
    """
    x = _float_tensor(x, "scale_gradient")
    with tf.name_scope("scale_gradient"):
        return _scaled(x, tf.cast(factor, x.dtype))


def reverse_gradient(x: Any, factor: Any = 1.0) -> tf.Tensor:
    """Identity forward; the gradient comes back multiplied by ``-factor`` (gradient reversal).

    Args:
      x: floating tensor, any shape.
      factor: strength of the reversal (``lambda`` in domain-adversarial training), number,
        tensor or variable.

    Returns:
      A tensor equal to ``x`` whose gradient is ``-factor * dy``.
    """
    x = _float_tensor(x, "reverse_gradient")
    with tf.name_scope("reverse_gradient"):
        return _scaled(x, -tf.cast(factor, x.dtype))


def clip_gradient(x: Any, lo: Any, hi: Any) -> tf.Tensor:
    """Identity forward; clips the incoming gradient element-wise to ``[lo, hi]``.

    Args:
      x: floating tensor, any shape.
      lo: lower bound (a number or a tensor broadcastable to ``x``), ``lo <= hi``.
      hi: upper bound (a number or a tensor broadcastable to ``x``).

    Returns:
      A tensor equal to ``x`` whose gradient is ``clip(dy, lo, hi)``.

    Raises:
      ValueError: if ``lo > hi`` are known at call time.
    """
    x = _float_tensor(x, "clip_gradient")
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and lo > hi:
        raise ValueError(f"clip_gradient: lo={lo} is greater than hi={hi}.")
    with tf.name_scope("clip_gradient"):
        return _clipped(x, tf.cast(lo, x.dtype), tf.cast(hi, x.dtype))


# ---------------------------------------------------------------------------------------------
# Keras layers.
# ---------------------------------------------------------------------------------------------


class _FactorLayer(keras.layers.Layer):
    """Shared base: an identity layer whose gradient factor is a non-trainable variable.

    The factor lives in a variable so it can be annealed during training (``layer.factor.assign``
    from a callback, as the reversal strength is in domain-adversarial training) and is saved
    with the model's weights.
    """

    def __init__(self, factor: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True
        self.factor = self.add_weight(
            shape=(),
            initializer=keras.initializers.Constant(float(factor)),
            trainable=False,
            name="factor",
        )

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config["factor"] = float(keras.ops.convert_to_numpy(self.factor))
        return config


@keras.saving.register_keras_serializable(package="pgrad")
class ScaleGradient(_FactorLayer):
    """Keras layer: identity forward, gradient multiplied by ``factor`` (see ``scale_gradient``)."""

    def call(self, inputs: Any) -> tf.Tensor:
        return scale_gradient(inputs, self.factor)


@keras.saving.register_keras_serializable(package="pgrad")
class ReverseGradient(_FactorLayer):
    """Keras layer: identity forward, gradient multiplied by ``-factor`` (gradient reversal)."""

    def call(self, inputs: Any) -> tf.Tensor:
        return reverse_gradient(inputs, self.factor)


@keras.saving.register_keras_serializable(package="pgrad")
class ClipGradient(keras.layers.Layer):
    """Keras layer: identity forward, gradient clipped element-wise to ``[lo, hi]``."""

    def __init__(self, lo: float, hi: float, **kwargs: Any):
        super().__init__(**kwargs)
        if lo > hi:
            raise ValueError(f"ClipGradient: lo={lo} is greater than hi={hi}.")
        self.supports_masking = True
        self.lo = float(lo)
        self.hi = float(hi)

    def call(self, inputs: Any) -> tf.Tensor:
        return clip_gradient(inputs, self.lo, self.hi)

    def compute_output_shape(self, input_shape: tuple) -> tuple:
        return input_shape

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(lo=self.lo, hi=self.hi)
        return config
