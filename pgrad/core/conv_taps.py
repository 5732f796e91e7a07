"""Taps of layers that are one matmul per position: Conv1D / Conv2D, and Dense on ``[T, ..., in]``.

At every output position ``l`` such a layer computes ``z_t[l] = a_t[l] @ W + b``, where
``a_t[l]`` is what that position reads (the kernel window of a convolution, one input row of a
Dense layer). With ``A_t = [a_t[l]]_l`` (``[L, k]``) and ``D_t = d f_t / d z_t`` (``[L, c]``,
row ``t`` of one batched backward pass)::

    d f_t / d W = A_t^T D_t                              # materialised: L k c per step
    |d f_t / d W|^2 = sum((A_t A_t^T) * (D_t D_t^T))     # "ghost" norm: L^2 (k + c) per step
    d f_t / d b = sum_l D_t[l]
    sum_t c_t d f_t / d W = the layer's own filter gradient with output gradient c * D

(ghost clipping: Li et al. 2022; choosing per layer: Bu et al. 2023). :meth:`PatchTap.method`
chooses per layer; ``NORM_METHOD`` forces one (tests, benchmarks).

No im2col: a convolution with strides ``s`` is first rearranged space-to-depth (blocks of
``s`` x ``s`` pixels become channels), which turns it into a stride-1 convolution with a
``ceil(k / s)``-wide kernel; ``A_t`` is then a few *shifted windows* of that tensor (4 for
NatureCNN's 8x8 stride-4 layer), each one slice, and ``A_t^T D_t`` one batched matmul per window.
Dilation (stride 1) shifts the windows by the dilation instead. Measured here for that layer at
T = 256: 25-32 ms against 44 ms with ``tf.image.extract_patches``.

Only exact cases are tapped (:func:`record_conv`): channels_last, static shapes after the step
axis, no LoRA; anything else runs Keras's own ``call`` and is left to the generic path.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

import keras
import tensorflow as tf

from pgrad.core.chunking import chunk_rows, map_chunks

if TYPE_CHECKING:
    from pgrad.core.recorder import Recorder

#: ``"auto"`` (per layer, :meth:`PatchTap.method`), or force ``"ghost"`` / ``"materialise"``.
NORM_METHOD = "auto"
#: Byte budget for one chunk of per-step intermediates (windows, Gram matrices, kernel rows).
MAX_BYTES = 256 * 2**20


class ConvGeometry(NamedTuple):
    """A Conv1D/Conv2D as a 2-D convolution (Conv1D: height 1), all static ints."""

    kernel_shape: tuple  # the variable's shape
    kernel: tuple  # (kh, kw)
    strides: tuple  # (sh, sw)
    dilation: tuple  # (dh, dw); Keras allows strides > 1 or dilation > 1, not both
    pads: tuple  # ((top, bottom), (left, right)) explicit zero padding ("same")
    out: tuple  # (oh, ow)
    channels: int  # input channels
    filters: int
    groups: int
    conv_args: dict  # strides, padding, dilation_rate for keras.ops.conv

    @property
    def positions(self) -> int:  # L
        return self.out[0] * self.out[1]

    @property
    def shifts(self) -> tuple:
        return tuple(-(-k // s) for k, s in zip(self.kernel, self.strides))

    @property
    def patch(self) -> int:  # k of the space-to-depth form (kernel taps padded to the strides)
        return math.prod(self.shifts) * math.prod(self.strides) * self.channels

    def windows(self, x: tf.Tensor) -> list[tf.Tensor]:
        """``x [n, (H,) W, C]`` -> one ``[n, L, sh * sw * C]`` window per shift."""
        if len(self.kernel_shape) == 3:  # Conv1D
            x = x[:, None]
        (sh, sw), (dh, dw), (oh, ow) = self.strides, self.dilation, self.out
        size = [s * ((n - 1) * d + o) for s, n, d, o in
                zip(self.strides, self.shifts, self.dilation, self.out)]
        after = [t - n - p[0] for t, n, p in zip(size, x.shape[1:3], self.pads)]
        # Rows past `size` no output reads; taps past the kernel (ceil(k / s) * s > k) may read
        # rows past the input, padded here, and are zeroed below.
        x = tf.pad(x, [[0, 0], [self.pads[0][0], max(after[0], 0)],
                       [self.pads[1][0], max(after[1], 0)], [0, 0]])
        x = x[:, : size[0], : size[1]]
        if sh * sw > 1:  # space-to-depth; channel order (bi, bj, c)
            x = tf.reshape(x, [-1, size[0] // sh, sh, size[1] // sw, sw, self.channels])
            x = tf.reshape(tf.transpose(x, [0, 1, 3, 2, 4, 5]),
                           [-1, size[0] // sh, size[1] // sw, sh * sw * self.channels])
        na, nb = self.shifts
        (kh, kw), c = self.kernel, self.channels
        out = []
        for a in range(na):
            for b in range(nb):
                w = tf.reshape(x[:, a * dh : a * dh + oh, b * dw : b * dw + ow],
                               [-1, oh * ow, sh * sw * c])
                if (a + 1) * sh > kh or (b + 1) * sw > kw:  # taps past the kernel read data
                    keep = [float(a * sh + i < kh and b * sw + j < kw)
                            for i in range(sh) for j in range(sw) for _ in range(c)]
                    w = w * tf.constant(keep, w.dtype)
                out.append(w)
        return out

    def assemble(self, blocks: list[tf.Tensor], transposed: bool) -> tf.Tensor:
        """Per-shift blocks -> ``[n, *kernel_shape]``.

        Blocks are ``[n, sh * sw * C / g, filters]``, or ``[n, filters, sh * sw * C / g]`` if
        ``transposed``. Only the untransposed ones keep the last two axes in place, so that the
        rearrangement below moves whole rows (measured 0.6-0.75x the time for large kernels).
        """
        (sh, sw), (na, nb), (kh, kw) = self.strides, self.shifts, self.kernel
        ig, c = self.channels // self.groups, self.filters
        g = tf.stack(blocks, 1)
        if transposed:
            g = tf.reshape(g, [-1, na, nb, c, sh, sw, ig])
            g = tf.transpose(g, [0, 1, 4, 2, 5, 6, 3])
        else:
            g = tf.reshape(g, [-1, na, nb, sh, sw, ig, c])
            if sh * sw > 1:
                g = tf.transpose(g, [0, 1, 3, 2, 4, 5, 6])
        g = tf.reshape(g, [-1, na * sh, nb * sw, ig, c])
        if na * sh != kh or nb * sw != kw:
            g = g[:, :kh, :kw]
        return tf.reshape(g, [-1, *self.kernel_shape])

    def summed_kernel(self, x: tf.Tensor, dz: tf.Tensor) -> tf.Tensor:
        """``sum_t A_t^T dz_t``: the convolution's own filter gradient (one op).

        The forward convolution on the tape here is never fetched, so in a graph it is pruned.
        """
        k = tf.zeros(self.kernel_shape, x.dtype)  # the filter gradient does not read it
        with tf.GradientTape() as tape:
            tape.watch(k)
            y = keras.ops.conv(x, k, data_format="channels_last", **self.conv_args)
        return tape.gradient(y, k, output_gradients=dz)


class DenseGeometry(NamedTuple):
    """A Dense layer on ``[n, *middle, in]``: one position per middle index, no shifts."""

    kernel_shape: tuple  # (in, out)
    positions: int  # L = prod(middle)
    groups: int = 1

    @property
    def channels(self) -> int:
        return self.kernel_shape[0]

    @property
    def filters(self) -> int:
        return self.kernel_shape[1]

    @property
    def patch(self) -> int:
        return self.kernel_shape[0]

    def windows(self, x: tf.Tensor) -> list[tf.Tensor]:
        return [tf.reshape(x, [-1, self.positions, self.channels])]

    def assemble(self, blocks: list[tf.Tensor], transposed: bool) -> tf.Tensor:
        return tf.transpose(blocks[0], [0, 2, 1]) if transposed else blocks[0]

    def summed_kernel(self, x: tf.Tensor, dz: tf.Tensor) -> tf.Tensor:
        return tf.matmul(tf.reshape(x, [-1, self.channels]),
                         tf.reshape(dz, [-1, self.filters]), transpose_a=True)


class PatchTap:
    """One recorded call of a Conv1D/Conv2D, or of a Dense layer on ``[n, *middle, in]``.

    ``x`` is the layer's input (padded where the layer pads it first, causal Conv1D), ``z`` its
    pre-activation output (watched).
    """

    def __init__(self, kernel: keras.Variable, bias: keras.Variable | None,
                 geometry: ConvGeometry | DenseGeometry, x: tf.Tensor, z: tf.Tensor):
        self.kernel, self.bias, self.geometry, self.x, self.z = kernel, bias, geometry, x, z

    def uses(self) -> list[tuple[Any, str]]:
        return [(self.kernel, "kernel")] + ([(self.bias, "bias")] if self.bias is not None else [])

    def _deltas(self, delta):
        return tf.reshape(delta, [-1, self.geometry.positions, self.geometry.filters])

    def _block(self, w, d, transposed: bool):
        """``A^T D`` of one window: ``[n, L, k'], [n, L, c] -> [n, k' / g, c]``, or its
        transpose ``[n, c, k' / g]`` (measured 11-23% faster for NatureCNN's layers: norms)."""
        geo = self.geometry
        if geo.groups == 1:
            return tf.matmul(d, w, transpose_a=True) if transposed else tf.matmul(
                w, d, transpose_a=True)
        g, L = geo.groups, geo.positions
        w = tf.reshape(w, [-1, L, w.shape[-1] // geo.channels, g, geo.channels // g])
        d = tf.reshape(d, [-1, L, g, geo.filters // g])
        if transposed:
            rows = tf.einsum("nlpgi,nlgo->ngopi", w, d)
            return tf.reshape(rows, [-1, geo.filters, w.shape[2] * w.shape[4]])
        rows = tf.einsum("nlpgi,nlgo->npigo", w, d)
        return tf.reshape(rows, [-1, w.shape[2] * w.shape[4], geo.filters])

    def _gram(self, windows, d):
        """``sum((A A^T) * (D D^T))`` per step (per group, summed)."""
        geo = self.geometry
        if geo.groups == 1:
            aat = tf.add_n([tf.matmul(w, w, transpose_b=True) for w in windows])
            return tf.reduce_sum(aat * tf.matmul(d, d, transpose_b=True), [1, 2])
        g, L = geo.groups, geo.positions
        split = [tf.reshape(w, [-1, L, w.shape[-1] // geo.channels, g, geo.channels // g])
                 for w in windows]
        aat = tf.add_n([tf.einsum("nlpgi,nmpgi->nglm", w, w) for w in split])
        d = tf.reshape(d, [-1, L, g, geo.filters // g])
        return tf.reduce_sum(aat * tf.einsum("nlgo,nmgo->nglm", d, d), [1, 2, 3])

    def costs(self) -> dict[str, int]:
        """Multiply-adds per step of each way to the kernel's squared norm."""
        geo = self.geometry
        L, k, c = geo.positions, geo.patch, geo.filters
        return {"materialise": L * k * c // geo.groups, "ghost": L * L * (k + c)}

    def _row_bytes(self, method: str) -> int:
        geo = self.geometry
        L, k, c = geo.positions, geo.patch, geo.filters
        extra = k * c // geo.groups if method == "materialise" else 2 * L * L
        return self.x.dtype.size * (L * k + extra)

    def method(self, num_rows: tf.Tensor | int | None, keep: bool) -> str:
        """How this layer's kernel norms are computed: ``"materialise"`` or ``"ghost"``.

        ``keep``: a reweighted sum follows (the engine's clip path). Materialised rows that fit
        in one chunk are kept and reweighted for it (``T k c`` work), where the ghost path needs
        its own filter-gradient pass (``T L k c``): then materialising is never more work.
        Otherwise the cheaper per step of ``L k c`` and ``L^2 (k + c)``.
        """
        if NORM_METHOD != "auto":
            return NORM_METHOD
        if keep and self._fits(num_rows, "materialise"):
            return "materialise"
        cost = self.costs()
        return "ghost" if cost["ghost"] < cost["materialise"] else "materialise"

    def _fits(self, num_rows, method) -> bool:
        return isinstance(num_rows, int) and num_rows <= chunk_rows(self._row_bytes(method),
                                                                   MAX_BYTES)

    def rows(self, role: str, delta: tf.Tensor, num_rows: tf.Tensor | int | None) -> tf.Tensor:
        """``[n, *variable.shape]`` per-step gradients of ``role`` ("kernel" or "bias")."""
        d = self._deltas(delta)
        if role == "bias":
            return tf.reduce_sum(d, 1)
        geo = self.geometry

        def block(xd):
            x, dd = xd
            return [geo.assemble([self._block(w, dd, False) for w in geo.windows(x)], False)]

        spec = tf.TensorSpec([None, *geo.kernel_shape], d.dtype)
        chunk = chunk_rows(self._row_bytes("materialise"), MAX_BYTES)
        return map_chunks(block, (self.x, d), num_rows, chunk, [spec])[0]

    def norms_sq(self, role: str, delta: tf.Tensor, num_rows: tf.Tensor | int | None,
                 keep: bool = False) -> tuple[tf.Tensor, list[tf.Tensor] | None]:
        """``([n] squared norms of role's per-step gradients, kept blocks or None)``."""
        d = self._deltas(delta)
        if role == "bias":
            return tf.reduce_sum(tf.square(tf.reduce_sum(d, 1)), 1), None
        geo = self.geometry
        method = self.method(num_rows, keep)
        if method == "materialise" and keep and self._fits(num_rows, method):
            blocks = [self._block(w, d, True) for w in geo.windows(self.x)]
            return tf.add_n([tf.reduce_sum(tf.square(b), [1, 2]) for b in blocks]), blocks

        def block(xd):
            x, dd = xd
            windows = geo.windows(x)
            if method == "ghost":
                return [self._gram(windows, dd)]
            return [tf.add_n([tf.reduce_sum(tf.square(self._block(w, dd, True)), [1, 2])
                              for w in windows])]

        chunk = chunk_rows(self._row_bytes(method), MAX_BYTES)
        spec = tf.TensorSpec([None], d.dtype)
        return map_chunks(block, (self.x, d), num_rows, chunk, [spec])[0], None

    def summed(self, role: str, dz: tf.Tensor) -> tf.Tensor:
        """``sum_t`` of role's per-step gradients for output gradients ``dz`` (no rows)."""
        if role == "bias":
            return tf.reduce_sum(self._deltas(dz), [0, 1])
        return tf.reshape(self.geometry.summed_kernel(self.x, dz), self.geometry.kernel_shape)

    def reweigh_kept(self, blocks: list[tf.Tensor], coeff: tf.Tensor) -> tf.Tensor:
        """``sum_t coeff[t] * rows[t]`` from the blocks :meth:`norms_sq` kept."""
        coeff = tf.cast(coeff, blocks[0].dtype)
        return self.geometry.assemble([tf.tensordot(coeff, b, 1)[None] for b in blocks], True)[0]


def _conv_geometry(layer, shape, padding: str, kernel_shape) -> ConvGeometry | None:
    spatial, ks = list(shape[1:-1]), list(layer.kernel_size)
    st, dl = list(layer.strides), list(layer.dilation_rate)
    if layer.rank == 1:
        spatial, ks, st, dl = [1, *spatial], [1, *ks], [1, *st], [1, *dl]
    pads, out = [], []
    for n, k, s, d in zip(spatial, ks, st, dl):
        span = (k - 1) * d + 1
        if padding == "same":  # TensorFlow's SAME: the odd pixel goes after
            o = -(-n // s)
            total = max((o - 1) * s + span - n, 0)
            pads.append((total // 2, total - total // 2))
        else:
            o = (n - span) // s + 1
            pads.append((0, 0))
        out.append(o)
    if min(out) < 1 or (max(st) > 1 and max(dl) > 1):
        return None
    args = {"strides": list(layer.strides), "padding": padding,
            "dilation_rate": layer.dilation_rate}
    return ConvGeometry(tuple(kernel_shape), tuple(ks), tuple(st), tuple(dl), tuple(pads),
                        tuple(out), int(shape[-1]), int(layer.filters), int(layer.groups), args)


def record_conv(rec: Recorder, layer: keras.layers.Layer, inputs: Any) -> tf.Tensor | None:
    """``layer(inputs)`` of a Conv1D/Conv2D with its taps recorded, or ``None`` where the tap
    would not be exact (then the caller runs Keras's own ``call``)."""
    conv = keras.layers.Conv2D  # kernel / convolution_op are BaseConv's, shared with Conv1D
    kernel = getattr(layer, "_kernel", None)
    if (kernel is None or type(layer).kernel is not conv.kernel
            or type(layer).convolution_op is not conv.convolution_op
            or getattr(layer, "lora_enabled", False)
            or getattr(layer, "quantization_mode", None) is not None
            or layer.rank not in (1, 2) or layer.data_format != "channels_last"):
        return None
    if (not isinstance(inputs, tf.Tensor) or inputs.shape.rank != layer.rank + 2
            or not inputs.shape[1:].is_fully_defined() or not inputs.dtype.is_floating
            or inputs.dtype != kernel.dtype or not rec.wants(kernel)):
        return None
    padding = layer.padding
    if padding == "causal":  # as Conv1D.call: pad on the left, then a valid convolution
        left = layer.dilation_rate[0] * (layer.kernel_size[0] - 1)
        inputs = tf.pad(inputs, [[0, 0], [left, 0], [0, 0]])
        padding = "valid"
    geometry = _conv_geometry(layer, inputs.shape, padding, kernel.shape)
    if geometry is None:
        return None
    z = keras.ops.conv(inputs, tf.stop_gradient(tf.convert_to_tensor(kernel)),
                       data_format="channels_last", **geometry.conv_args)
    if tuple(z.shape[1:-1]) != (geometry.out[1:] if layer.rank == 1 else geometry.out):
        return None  # not the geometry computed above: leave it to the generic path
    if layer.bias is not None:
        bias = tf.stop_gradient(tf.convert_to_tensor(layer.bias))
        z = keras.ops.add(z, keras.ops.reshape(bias, (1,) * (layer.rank + 1) + (layer.filters,)))
    rec.tape.watch(z)
    rec.layers.append(PatchTap(kernel, layer.bias, geometry, tf.stop_gradient(inputs), z))
    return layer.activation(z) if layer.activation is not None else z


def record_dense(rec: Recorder, layer: keras.layers.Layer, inputs: tf.Tensor
                 ) -> tf.Tensor | None:
    """A Dense layer on ``[n, *middle, in]`` (static ``middle``), recorded; ``None`` otherwise.

    ``inputs`` were checked by the caller (a plain Dense kernel of the input's dtype).
    """
    if not inputs.shape[1:].is_fully_defined():
        return None
    kernel = layer._kernel
    z = keras.ops.matmul(inputs, tf.stop_gradient(tf.convert_to_tensor(kernel)))
    if layer.bias is not None:
        z = keras.ops.add(z, tf.stop_gradient(tf.convert_to_tensor(layer.bias)))
    rec.tape.watch(z)
    geometry = DenseGeometry(tuple(kernel.shape), math.prod(inputs.shape[1:-1]))
    rec.layers.append(PatchTap(kernel, layer.bias, geometry, tf.stop_gradient(inputs), z))
    return layer.activation(z) if layer.activation is not None else z
