"""Taps of Embedding and LayerNormalization layers.

**Embedding**, ``z_t = E[ids_t]`` (``ids_t``: the ``S`` ids of step ``t``, ``z_t``: ``[S, dim]``).
Step ``t``'s gradient scatters the rows of ``D_t = d f_t / d z_t`` into the looked-up ids,
``dE_t[v] = sum_{s: ids_t[s] = v} D_t[s]``. Its squared norm needs no ``[vocab, dim]`` tensor:
sum the rows of ``D`` per distinct (step, id) pair (one ``tf.unique`` and a segment sum, O(T S
dim)), square, and add up per step. That is cheaper than both the materialised ``[T, vocab,
dim]`` rows and the Gram form ``sum_{s, s'} [ids_s = ids_s'] D_s . D_s'`` (``S^2 dim`` per
step), so it is the only norm used. The reweighted sum is one segment sum into ``[vocab, dim]``.

**LayerNormalization**, ``z = xhat * gamma + beta`` (``xhat``: the input normalised over the
layer's axes). ``d gamma_t`` is the sum over the other non-step axes of ``D_t * xhat_t`` and
``d beta_t`` that of ``D_t``: ``[T, *gamma.shape]``, never larger than ``D``, so they are always
materialised. The forward value is Keras's own ``layer_normalization`` (with the parameters cut
from the tape), so the recorded pass computes exactly what the plain one does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import keras
import tensorflow as tf

if TYPE_CHECKING:
    from pgrad.core.recorder import Recorder


def _square_rows(g: tf.Tensor) -> tf.Tensor:
    return tf.reduce_sum(tf.reshape(tf.square(g), [tf.shape(g)[0], -1]), 1)


class EmbeddingTap:
    """One recorded call of an Embedding layer: ``ids [n, ...]`` (negative ids wrapped, as
    ``keras.ops.take`` does) and the watched output ``z [n, ..., dim]``."""

    def __init__(self, embeddings: keras.Variable, ids: tf.Tensor, z: tf.Tensor):
        self.embeddings, self.ids, self.z = embeddings, ids, z
        self.vocab, self.dim = int(embeddings.shape[0]), int(embeddings.shape[1])

    def uses(self) -> list[tuple[Any, str]]:
        return [(self.embeddings, "embeddings")]

    def _keys(self, n) -> tf.Tensor:
        """``[n * S]`` int64 ``step * vocab + id`` of every lookup."""
        ids = tf.reshape(tf.cast(self.ids, tf.int64), [n, -1])
        return tf.reshape(tf.range(tf.cast(n, tf.int64))[:, None] * self.vocab + ids, [-1])

    def rows(self, role: str, delta: tf.Tensor, num_rows: tf.Tensor | int | None) -> tf.Tensor:
        n = tf.shape(delta)[0]
        flat = tf.reshape(delta, [-1, self.dim])
        out = tf.math.unsorted_segment_sum(flat, self._keys(n), tf.cast(n, tf.int64) * self.vocab)
        return tf.reshape(out, [n, self.vocab, self.dim])

    def norms_sq(self, role: str, delta: tf.Tensor, num_rows: tf.Tensor | int | None,
                 keep: bool = False) -> tuple[tf.Tensor, None]:
        per_step = self.ids.shape[1:].num_elements()
        if per_step == 1:  # one id per step: the row itself
            return _square_rows(delta), None
        n = tf.shape(delta)[0]
        keys, where = tf.unique(self._keys(n))
        sums = tf.math.unsorted_segment_sum(tf.reshape(delta, [-1, self.dim]), where,
                                            tf.shape(keys)[0])  # [distinct (step, id), dim]
        return tf.math.unsorted_segment_sum(tf.reduce_sum(tf.square(sums), 1),
                                            keys // self.vocab, n), None

    def summed(self, role: str, dz: tf.Tensor) -> tf.Tensor:
        return tf.math.unsorted_segment_sum(tf.reshape(dz, [-1, self.dim]),
                                            tf.reshape(self.ids, [-1]), self.vocab)


class LayerNormTap:
    """One recorded call of a LayerNormalization layer: ``xhat`` and the watched output ``z``
    (both ``[n, ...]``); ``reduce_axes`` are the non-step axes the parameters do not span."""

    def __init__(self, gamma: keras.Variable | None, beta: keras.Variable | None,
                 xhat: tf.Tensor, z: tf.Tensor, reduce_axes: list[int]):
        self.gamma, self.beta, self.xhat, self.z = gamma, beta, xhat, z
        self.reduce_axes = reduce_axes

    def uses(self) -> list[tuple[Any, str]]:
        return [(v, r) for v, r in ((self.gamma, "gamma"), (self.beta, "beta")) if v is not None]

    def rows(self, role: str, delta: tf.Tensor, num_rows: tf.Tensor | int | None) -> tf.Tensor:
        g = delta * self.xhat if role == "gamma" else delta
        return tf.reduce_sum(g, self.reduce_axes) if self.reduce_axes else g

    def norms_sq(self, role: str, delta: tf.Tensor, num_rows: tf.Tensor | int | None,
                 keep: bool = False) -> tuple[tf.Tensor, None]:
        return _square_rows(self.rows(role, delta, num_rows)), None

    def summed(self, role: str, dz: tf.Tensor) -> tf.Tensor:
        return tf.reduce_sum(self.rows(role, dz, None), 0)


def record_embedding(rec: Recorder, layer: keras.layers.Layer, inputs: Any) -> tf.Tensor | None:
    """``layer(inputs)`` of an Embedding with its tap recorded, or ``None`` where the tap would
    not be exact (LoRA, quantised, sparse or ragged ids, a mixed-precision policy)."""
    table = getattr(layer, "_embeddings", None)
    if (table is None or type(layer).embeddings is not keras.layers.Embedding.embeddings
            or getattr(layer, "lora_enabled", False)
            or getattr(layer, "quantization_mode", None) is not None):
        return None
    if (not isinstance(inputs, tf.Tensor) or inputs.shape.rank is None or inputs.shape.rank < 1
            or tf.as_dtype(table.dtype) != tf.as_dtype(layer.compute_dtype)
            or not rec.wants(table)):
        return None
    ids = inputs if inputs.dtype in (tf.int32, tf.int64) else tf.cast(inputs, tf.int32)
    z = keras.ops.take(tf.stop_gradient(tf.convert_to_tensor(table)), ids, axis=0)
    z = keras.ops.cast(z, layer.compute_dtype)
    rec.tape.watch(z)
    vocab = tf.cast(table.shape[0], ids.dtype)
    rec.layers.append(EmbeddingTap(table, tf.stop_gradient(tf.where(ids < 0, ids + vocab, ids)),
                                   z))
    return z


def record_layer_norm(rec: Recorder, layer: keras.layers.Layer, inputs: Any
                      ) -> tf.Tensor | None:
    """``layer(inputs)`` of a LayerNormalization with its tap recorded, or ``None`` where the
    tap would not be exact (``rms_scaling``, the step axis normalised, mixed dtypes)."""
    params = [v for v in (layer.gamma, layer.beta) if v is not None]
    if (getattr(layer, "rms_scaling", False) or not params or not isinstance(inputs, tf.Tensor)
            or inputs.shape.rank is None or not inputs.dtype.is_floating):
        return None
    rank = inputs.shape.rank
    axes = sorted(a % rank for a in layer.axis)
    if 0 in axes or any(tf.as_dtype(v.dtype) != inputs.dtype for v in params):
        return None
    if tf.as_dtype(layer.compute_dtype) != inputs.dtype or not any(map(rec.wants, params)):
        return None

    def cut(v):
        return None if v is None else tf.stop_gradient(tf.convert_to_tensor(v))

    z = keras.ops.layer_normalization(inputs, cut(layer.gamma), cut(layer.beta), layer.axis,
                                      layer.epsilon)
    z = keras.ops.cast(z, layer.compute_dtype)
    rec.tape.watch(z)
    mean, var = keras.ops.moments(inputs, axes, keepdims=True)
    xhat = tf.stop_gradient((inputs - mean) * tf.math.rsqrt(var + layer.epsilon))
    reduce_axes = [i for i in range(1, rank) if i not in axes]
    rec.layers.append(LayerNormTap(layer.gamma, layer.beta, xhat, z, reduce_axes))
    return z
