"""Per-step gradient taps: exact per-step gradients of tapped layers from one batched pass.

For a per-step objective ``f`` (row ``t`` depends only on row ``t`` of the inputs) and a Dense
layer ``z = x @ W + b`` applied to ``[T, in]`` rows, the gradient of ``sum_t f_t`` with respect to
the pre-activation ``z`` has row ``t`` equal to ``delta_t = d f_t / d z_t`` (no other step reads
row ``t``). Hence, from one ordinary batched backward pass::

    d f_t / d W = outer(x_t, delta_t)            # [in, out]
    d f_t / d b = delta_t                        # [out]
    |d f_t / d W|^2 = |x_t|^2 |delta_t|^2        # no [T, in, out] tensor needed
    sum_t c_t d f_t / d W = x^T (c * delta)      # a reweighted gradient, one matmul

(the per-example gradient-norm trick of Goodfellow, 2015). A variable that enters as a copy per
step (``per_step_variable``, e.g. the Gaussian head's log-std) has per-step gradient equal to
the gradient with respect to that ``[T, *shape]`` copy. The same holds for the other tapped
layers, each with its own maths: Conv1D/Conv2D and Dense on ``[T, ..., in]`` inputs
(:mod:`pgrad.core.conv_taps`: ghost or materialised norms, chosen per layer), Embedding and
LayerNormalization (:mod:`pgrad.core.layer_taps`).

How the taps are recorded -- the context that makes the layers' ``call`` record what they need
for the variables being differentiated, and restores it after -- is
:mod:`pgrad.core.recording`; its names are importable from here too. This module turns one
recorded pass into per-step gradients: :func:`capture` backpropagates the pass's output to the
taps (``delta``), and :class:`Capture` builds per-step gradient rows, their norms and reweighted
sums from what each tap recorded and ``delta``, variable by variable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import tensorflow as tf

from pgrad.core.recording import (
    DenseTap,
    Recorder,
    StepTap,
    disabled,
    enabled,
    per_step_variable,
    recording,
    var_keys,
)

__all__ = ["OUTER_BUCKET", "SHAPE_MARK", "USE_XLA", "XLA_MIN_ELEMENTS", "Capture", "DenseTap",
           "Recorder", "StepTap", "capture", "check_per_step", "disabled", "enabled",
           "outer_rows", "per_step_variable", "recording", "split_output", "var_keys"]

SHAPE_MARK = "must return a [T] tensor"


def split_output(out: Any) -> tuple[tf.Tensor, dict]:
    """``fn``'s output as ``(per-step values, extras)``: ``fn`` may return ``(values, dict)``."""
    if isinstance(out, (tuple, list)) and len(out) == 2 and isinstance(out[1], dict):
        return out[0], dict(out[1])
    return out, {}


def check_per_step(out: Any, num_steps: tf.Tensor | int, where: str) -> tf.Tensor:
    """``out`` as a ``[T]`` tensor (``T = num_steps`` where known), or one clear ValueError."""
    out = tf.convert_to_tensor(out)
    static_t = num_steps if isinstance(num_steps, int) else None
    bad = out.shape.rank != 1 or (
        static_t is not None and out.shape[0] is not None and out.shape[0] != static_t
    )
    if bad:
        shape = out.shape.as_list() if out.shape.rank is not None else "unknown"
        raise ValueError(
            f"{where}: fn(*args) {SHAPE_MARK} (one value per step, row t depending only on row "
            f"t of the args); for T={static_t if static_t is not None else '?'} it returned "
            f"shape {shape}."
        )
    return out


#: Materialise per-step kernel gradients with an XLA-compiled outer product (one fused write,
#: measured ~1.4x faster than TensorFlow's batched einsum on CPU). Rows are padded to a multiple
#: of ``OUTER_BUCKET`` so that a varying T compiles at most once per bucket (~0.1-0.2 s each);
#: outputs under ``XLA_MIN_ELEMENTS`` (where compiling costs more than it saves) use einsum.
USE_XLA = True
OUTER_BUCKET = 256
XLA_MIN_ELEMENTS = 2**18
_xla_works: bool | None = None


@tf.function(jit_compile=True)
def _xla_outer(x, d):
    return tf.einsum("ti,to->tio", x, d)


def _xla_available() -> bool:
    global _xla_works
    if _xla_works is None:
        with tf.init_scope():  # run eagerly, even while a graph is being traced
            try:
                _xla_outer(tf.ones([1, 1]), tf.ones([1, 1])).numpy()
                _xla_works = True
            except Exception:  # noqa: BLE001  (no XLA in this build: plain einsum)
                _xla_works = False
    return _xla_works


def outer_rows(x: tf.Tensor, d: tf.Tensor) -> tf.Tensor:
    """``[T, in], [T, out] -> [T, in, out]`` row-wise outer products."""
    n = x.shape[0]
    width = (x.shape[1] or 1) * (d.shape[1] or 1)
    if width * (n if n is not None else 1024) < XLA_MIN_ELEMENTS or not USE_XLA:
        return tf.einsum("ti,to->tio", x, d)
    if not _xla_available():
        return tf.einsum("ti,to->tio", x, d)
    if n is not None and n % OUTER_BUCKET == 0:
        return _xla_outer(x, d)
    rows = tf.shape(x)[0]
    pad = (OUTER_BUCKET - rows % OUTER_BUCKET) % OUTER_BUCKET
    out = _xla_outer(tf.pad(x, [[0, pad], [0, 0]]), tf.pad(d, [[0, pad], [0, 0]]))
    return out[:rows]  # a leading-axis slice from 0: no copy


class _Parts(NamedTuple):
    """Per-step gradient factors of one variable (all ``[T, ...]``)."""

    pairs: list  # Dense kernel uses: (x [T, in], index of its tap target)
    rows: list  # bias uses and per-step copies: index of the tap target whose rows they are
    layer: list  # uses by the other taps (conv_taps, layer_taps): (tap index, role)


def _square_rows(g: tf.Tensor) -> tf.Tensor:
    return tf.reduce_sum(tf.reshape(tf.square(g), [tf.shape(g)[0], -1]), 1)


def _graph_key():
    return None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()


class Capture:
    """The taps of one batched pass, by variable.

    Attributes:
      covered: per variable, whether its per-step gradients come from the taps.
      rows_ok: ``True``, or a scalar bool tensor (dynamic shapes) that is true when every tap had
        exactly ``T`` rows; callers must fall back to the generic path when it is false.
      out: the ``[T]`` output of the recorded pass; ``extras``: what ``fn`` returned besides it.
    """

    def __init__(self, variables: Sequence[Any], parts: list[_Parts], covered: list[bool],
                 rows_ok: bool | tf.Tensor,
                 targets: list[tf.Tensor], deltas: list[tf.Tensor], tape: tf.GradientTape,
                 out: tf.Tensor, extras: dict, layer_taps: list, offset: int):
        self.variables = list(variables)
        self._parts = parts
        self.covered = covered
        self.rows_ok = rows_ok
        self._targets, self._deltas, self._tape = targets, deltas, tape
        self._layers, self._offset = layer_taps, offset  # target index of layer tap i: offset + i
        self._kept: dict = {}  # (tap index, role) -> (graph, rows kept by norms_squared)
        self.out, self.extras = out, extras
        self.aux: tf.Tensor | None = None  # what ``capture``'s ``aux`` returned

    @property
    def all_covered(self) -> bool:
        return all(self.covered)

    @property
    def any_covered(self) -> bool:
        return any(self.covered)

    def _zeros(self, v, num_rows) -> tf.Tensor:
        return tf.zeros(tf.concat([[num_rows], tf.shape(v)], 0), v.dtype)

    def _layer(self, j):
        return self._layers[j - self._offset]

    def _rows_of(self, p: _Parts, num_rows) -> list[tf.Tensor]:
        d = self._deltas
        return ([outer_rows(x, d[j]) for x, j in p.pairs] + [d[j] for j in p.rows]
                + [self._layer(j).rows(role, d[j], num_rows) for j, role in p.layer])

    def per_step_grads(self, num_rows: tf.Tensor | int) -> list[tf.Tensor | None]:
        """``[T, *shape]`` per covered variable (``None`` where not covered)."""
        out: list[tf.Tensor | None] = []
        for v, p, ok in zip(self.variables, self._parts, self.covered):
            if not ok:
                out.append(None)
                continue
            terms = self._rows_of(p, num_rows)
            out.append(tf.add_n(terms) if terms else self._zeros(v, num_rows))
        return out

    def norms_squared(self, num_rows: tf.Tensor | int, keep: bool = False) -> tf.Tensor:
        """``[T]`` squared global norm of each step's gradient over the covered variables.

        ``keep``: a :meth:`weighted_sum` follows in the same graph; layers that materialise
        their per-step rows for the norm then keep them for it (see
        :meth:`pgrad.core.conv_taps.PatchTap.method`).
        """
        dtype = self.variables[0].dtype if self.variables else tf.float32
        d = self._deltas
        row_sq: dict[int, tf.Tensor] = {}  # tap index -> [T] |delta_t|^2, shared by kernel and bias

        def squared_rows(j):
            if j not in row_sq:
                row_sq[j] = _square_rows(d[j])
            return row_sq[j]

        # Few, larger ops: at these sizes each op's dispatch costs about what its arithmetic
        # does, so the kernel and bias of a layer share one |delta|^2 and one add_n sums all.
        terms = []
        for p, ok in zip(self._parts, self.covered):
            if not ok or not (p.pairs or p.rows or p.layer):  # not covered, or unconnected
                continue
            pairs = [(x, d[j]) for x, j in p.pairs]
            if len(p.layer) == 1 and not (pairs or p.rows):  # a conv/embedding/norm variable
                j, role = p.layer[0]
                sq, kept = self._layer(j).norms_sq(role, d[j], num_rows, keep)
                if kept is not None:
                    self._kept[(j, role)] = (_graph_key(), kept)
                terms.append(sq)
            elif p.layer:  # used by several such layers, or mixed: rare, so materialise
                terms.append(_square_rows(tf.add_n(self._rows_of(p, num_rows))))
            elif len(pairs) == 1 and not p.rows:  # the common case: |x_t|^2 |delta_t|^2
                x, _ = pairs[0]
                terms.append(tf.reduce_sum(tf.square(x), 1) * squared_rows(p.pairs[0][1]))
            elif pairs and not p.rows:  # a layer called k times: sum_kl (x_k.x_l)(d_k.d_l)
                for x1, d1 in pairs:
                    for x2, d2 in pairs:
                        terms.append(tf.reduce_sum(x1 * x2, 1) * tf.reduce_sum(d1 * d2, 1))
            elif len(p.rows) == 1 and not pairs:  # a bias, or one per-step copy
                terms.append(squared_rows(p.rows[0]))
            elif p.rows and not pairs:
                terms.append(_square_rows(tf.add_n([d[j] for j in p.rows])))
            else:  # mixed kinds of use (not produced by Dense layers); rare, so materialise
                terms.append(_square_rows(tf.add_n(self._rows_of(p, num_rows))))
        if not terms:
            return tf.zeros(tf.reshape(tf.cast(num_rows, tf.int32), [1]), dtype)
        return tf.add_n([tf.cast(t, dtype) for t in terms])

    def _assemble(self, dz: list[tf.Tensor | None], coeff=None) -> list[tf.Tensor | None]:
        """Per covered variable, the batched gradient from pre-activation gradients ``dz``
        (``coeff``: ``dz`` are the deltas scaled by it, so kept rows can be reweighted)."""
        out: list[tf.Tensor | None] = []
        graph = _graph_key()
        for v, p, ok in zip(self.variables, self._parts, self.covered):
            if not ok:
                out.append(None)
                continue
            terms = [tf.matmul(x, dz[j], transpose_a=True) for x, j in p.pairs if dz[j] is not None]
            terms += [tf.reduce_sum(dz[j], 0) for j in p.rows if dz[j] is not None]
            for j, role in p.layer:
                kept = self._kept.get((j, role)) if coeff is not None else None
                if kept is not None and kept[0] is graph:
                    terms.append(self._layer(j).reweigh_kept(kept[1], coeff))
                elif dz[j] is not None:
                    terms.append(self._layer(j).summed(role, dz[j]))
            out.append(tf.add_n(terms) if terms else tf.zeros(v.shape, v.dtype))
        return out

    def weighted_sum(self, coeff: tf.Tensor) -> list[tf.Tensor | None]:
        """``sum_t coeff[t] * grad_t`` per covered variable, without per-step tensors (beyond
        rows :meth:`norms_squared` kept)."""
        scaled = []
        for d in self._deltas:
            c = tf.reshape(tf.cast(coeff, d.dtype), [-1] + [1] * (d.shape.rank - 1))
            scaled.append(c * d)
        return self._assemble(scaled, coeff)

    def gradient_of(self, target: tf.Tensor) -> list[tf.Tensor | None]:
        """Gradient of a scalar computed from the recorded pass (e.g. an entropy bonus), per
        covered variable (``None`` where not covered), by backprop to the taps."""
        n = len(self._targets)
        grads = self._tape.gradient(target, self._targets + self.variables,
                                    unconnected_gradients="none")
        out = self._assemble(grads[:n])
        # Uses of a covered variable that are not taps of the log-prob pass (an aux term may
        # read a variable directly) reach it through the tape: add them.
        return [o if o is None or r is None else o + tf.convert_to_tensor(r)
                for o, r in zip(out, grads[n:])]


def _rows_check(tensor: tf.Tensor, num_steps):
    """True/False when decidable at trace time, else a scalar bool tensor."""
    n = tensor.shape[0]
    if n is not None and isinstance(num_steps, int):
        return n == num_steps
    return tf.equal(tf.shape(tensor)[0], tf.cast(num_steps, tf.int32))


def capture(fn: Callable, variables: Sequence, args: Sequence, num_steps: tf.Tensor | int,
            where: str = "per_step_grads", aux: Callable | None = None
            ) -> tuple[tf.Tensor, Capture]:
    """Runs ``fn(*args)`` once under a recording and backpropagates ``sum(fn(*args))`` to taps.

    ``fn`` may return ``(values [T], extras dict)``; ``aux(values, extras)``, if given, is
    computed under the same (persistent) tape so that :meth:`Capture.gradient_of` can
    differentiate it.

    Returns:
      ``(out, capture)``: the ``[T]`` output and the per-variable taps (``capture.aux`` holds
      the aux value).
    """
    variables = list(variables)
    with tf.GradientTape(persistent=True) as tape:
        with recording(tape, variables) as rec:
            out, extras = split_output(fn(*args))
        out = check_per_step(out, num_steps, where)
        total = tf.reduce_sum(out)
        aux_value = aux(out, extras) if aux is not None else None
    targets = [t.z for t in rec.dense] + [t.value for t in rec.step] + [t.z for t in rec.layers]
    grads = tape.gradient(total, targets + variables, unconnected_gradients="none")
    deltas, residual = grads[: len(targets)], grads[len(targets) :]
    # A tap the tape cannot connect to the output is either unused (zero rows) or hidden from
    # the tape (e.g. inside a tf.custom_gradient); the generic path tells these apart, exactly.
    dead = [g is None for g in deltas]
    deltas = [tf.zeros_like(t) if g is None else tf.convert_to_tensor(g)
              for t, g in zip(targets, deltas)]

    index: dict[int, int] = {}
    for i, v in enumerate(variables):
        for k in var_keys(v):
            index.setdefault(k, i)
    parts = [_Parts([], [], []) for _ in variables]
    bad: set[int] = set()
    dynamic = []

    def slot(var, rows_ok):
        i = next((index[k] for k in var_keys(var) if k in index), None)
        if i is not None:
            if rows_ok is False:
                bad.add(i)
            elif rows_ok is not True:
                dynamic.append(rows_ok)
        return i

    for j, (tap, unconnected) in enumerate(zip(rec.dense, dead)):
        ok = False if unconnected else _rows_check(tap.x, num_steps)
        i = slot(tap.kernel, ok)
        if i is not None:
            parts[i].pairs.append((tap.x, j))
        if tap.bias is not None:
            k = slot(tap.bias, ok)
            if k is not None:
                parts[k].rows.append(j)
    offset = len(rec.dense)
    for j, (step_tap, unconnected) in enumerate(zip(rec.step, dead[offset:]), start=offset):
        i = slot(step_tap.variable,
                 False if unconnected else _rows_check(step_tap.value, num_steps))
        if i is not None:
            parts[i].rows.append(j)
    offset += len(rec.step)
    for j, (tap, unconnected) in enumerate(zip(rec.layers, dead[offset:]), start=offset):
        ok = False if unconnected else _rows_check(tap.z, num_steps)
        for var, role in tap.uses():
            i = slot(var, ok)
            if i is not None:
                parts[i].layer.append((j, role))

    covered = [r is None and i not in bad for i, r in enumerate(residual)]
    rows_ok = True if not dynamic else tf.reduce_all(tf.stack(dynamic))
    cap = Capture(variables, parts, covered, rows_ok, targets, deltas, tape, out, extras,
                  rec.layers, offset)
    cap.aux = aux_value
    return out, cap
