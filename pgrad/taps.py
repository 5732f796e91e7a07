"""Per-step gradient taps: exact per-step gradients of Dense layers from one batched pass.

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
the gradient with respect to that ``[T, *shape]`` copy.

How the taps are captured: :func:`capture` runs ``fn`` once under a :class:`Recorder`. While a
recorder is active (on this thread, in the graph it was opened in), ``keras.layers.Dense.call``
computes ``x @ stop_gradient(W) + stop_gradient(b)`` and records ``x`` and the (watched) ``z``.
Because the tapped use of ``W`` is cut from the tape, the batched gradient with respect to ``W``
is *unconnected* exactly when every use of ``W`` was tapped. Any variable that is also used in
another way (shared with a non-Dense layer, a LoRA/quantised Dense, a Dense on 3-D inputs, a
Dense inside a nested ``tf.function`` or loop body), whose tap rows are not the steps, or whose
tap the tape cannot connect to the output (unused, or hidden inside a ``tf.custom_gradient``), is
reported as *not covered*; callers compute those with the generic vectorised path, so results
are always exact.

Limitation (documented in ``docs/performance.md``): a Dense layer whose input has exactly ``T``
rows is taken to be applied row-per-step. Disable the taps (``use_taps=False`` arguments, or
``with pgrad.taps.disabled():``) for a model that applies a Dense layer to a ``T``-row tensor whose
rows are not the steps.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import keras
import tensorflow as tf

_local = threading.local()
_original_dense_call: Callable | None = None
_SHAPE_MARK = "must return a [T] tensor"


class DenseTap(NamedTuple):
    """One recorded call of a Dense layer."""

    kernel: Any  # the layer's kernel variable, [in, out]
    bias: Any  # its bias variable [out], or None
    x: tf.Tensor  # [N, in] layer input
    z: tf.Tensor  # [N, out] pre-activation output (watched)


class StepTap(NamedTuple):
    """One per-step copy of a variable (see :func:`per_step_variable`)."""

    variable: Any
    value: tf.Tensor  # [N, *variable.shape] (watched)


class Recorder:
    """Collects taps for one batched pass; see :func:`recording`."""

    def __init__(self, tape: tf.GradientTape):
        self.tape = tape
        self.eager = tf.executing_eagerly()
        self.graph = None if self.eager else tf.compat.v1.get_default_graph()
        self.dense: list[DenseTap] = []
        self.step: list[StepTap] = []

    def active_here(self) -> bool:
        """True if ops created now belong to the pass being recorded (not a nested graph)."""
        if tf.executing_eagerly():
            return self.eager
        return not self.eager and tf.compat.v1.get_default_graph() is self.graph


def _active() -> Recorder | None:
    rec = getattr(_local, "recorder", None)
    return rec if rec is not None and rec.active_here() else None


def _tappable(layer, inputs) -> bool:
    dense = keras.layers.Dense
    if type(layer).kernel is not dense.kernel or getattr(layer, "lora_enabled", False):
        return False
    if getattr(layer, "quantization_mode", None) is not None:
        return False
    kernel = getattr(layer, "_kernel", None)
    if kernel is None or not tf.is_tensor(inputs) or inputs.shape.rank != 2:
        return False
    return inputs.dtype == kernel.dtype


def _dense_call(self, inputs, training=None):
    """``keras.layers.Dense.call``, recording taps while a :class:`Recorder` is active."""
    rec = _active()
    if rec is None or not _tappable(self, inputs):
        return _original_dense_call(self, inputs, training=training)
    # Cut the tapped use of the variables from the tape: a variable whose batched gradient is
    # still connected afterwards is used elsewhere too, and is left to the generic path.
    z = tf.matmul(inputs, tf.stop_gradient(tf.convert_to_tensor(self._kernel)))  # [N, out]
    if self.bias is not None:
        z = z + tf.stop_gradient(tf.convert_to_tensor(self.bias))
    rec.tape.watch(z)
    rec.dense.append(DenseTap(self._kernel, self.bias, inputs, z))
    return self.activation(z) if self.activation is not None else z


def _install() -> None:
    """Wraps ``keras.layers.Dense.call`` once; it only changes anything inside a recording."""
    global _original_dense_call
    if _original_dense_call is None:
        _original_dense_call = keras.layers.Dense.call
        keras.layers.Dense.call = functools.wraps(_original_dense_call)(_dense_call)


@contextlib.contextmanager
def recording(tape: tf.GradientTape):
    """Records taps of the computation run inside, on this thread, into a :class:`Recorder`.

    Open it inside ``tape``'s context. Nested recordings are not supported (the inner one wins).
    """
    _install()
    rec = Recorder(tape)
    previous = getattr(_local, "recorder", None)
    _local.recorder = rec
    try:
        yield rec
    finally:
        _local.recorder = previous


@contextlib.contextmanager
def disabled():
    """No taps inside: for a ``fn`` that feeds a Dense layer ``T`` rows that are not the steps."""
    previous = getattr(_local, "disabled", False)
    _local.disabled = True
    try:
        yield
    finally:
        _local.disabled = previous


def enabled() -> bool:
    """False inside :func:`disabled`."""
    return not getattr(_local, "disabled", False)


def per_step_variable(variable, num_steps) -> tf.Tensor:
    """``[num_steps, *variable.shape]``: ``variable`` repeated once per step.

    Use it where a state-independent parameter meets per-step tensors (a Gaussian head's
    log-std): outside a recording it is a plain ``tf.broadcast_to``; inside one it is a tap, so
    the variable's per-step gradients come from the same batched pass as the Dense layers'.
    """
    value = tf.convert_to_tensor(variable)
    shape = tf.concat([tf.reshape(tf.cast(num_steps, tf.int32), [1]), tf.shape(value)], 0)
    rec = _active()
    if rec is None:
        return tf.broadcast_to(value, shape)
    out = tf.broadcast_to(tf.stop_gradient(value), shape)
    rec.tape.watch(out)
    rec.step.append(StepTap(variable, out))
    return out


# ---------------------------------------------------------------------------------------------
# Capture: one batched pass -> per-variable per-step gradient factors.
# ---------------------------------------------------------------------------------------------


def var_keys(variable) -> set[int]:
    """Identities under which a variable may appear (a Keras variable and its backing tf one)."""
    keys = {id(variable)}
    inner = getattr(variable, "_value", None)
    if inner is not None:
        keys.add(id(inner))
    return keys


def check_output(out, num_steps, where: str) -> tf.Tensor:
    """``out`` as a ``[T]`` tensor, or a clear ValueError."""
    out = tf.convert_to_tensor(out)
    static_t = num_steps if isinstance(num_steps, int) else None
    bad = out.shape.rank != 1 or (
        static_t is not None and out.shape[0] is not None and out.shape[0] != static_t
    )
    if bad:
        shape = out.shape.as_list() if out.shape.rank is not None else "unknown"
        raise ValueError(
            f"{where}: fn(*args) {_SHAPE_MARK} (one value per step, row t depending only on row "
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

    pairs: list  # Dense kernel uses: (x [T, in], delta [T, out])
    rows: list  # bias uses and per-step copies: [T, *shape]


class Capture:
    """The taps of one batched pass, by variable.

    Attributes:
      covered: per variable, whether its per-step gradients come from the taps.
      rows_ok: ``True``, or a scalar bool tensor (dynamic shapes) that is true when every tap had
        exactly ``T`` rows; callers must fall back to the generic path when it is false.
    """

    def __init__(self, variables, parts: list[_Parts | None], covered: list[bool], rows_ok):
        self.variables = list(variables)
        self._parts = parts
        self.covered = covered
        self.rows_ok = rows_ok

    @property
    def all_covered(self) -> bool:
        return all(self.covered)

    @property
    def any_covered(self) -> bool:
        return any(self.covered)

    def _zeros(self, v, num_rows) -> tf.Tensor:
        return tf.zeros(tf.concat([[num_rows], tf.shape(v)], 0), v.dtype)

    def per_step_grads(self, num_rows) -> list[tf.Tensor | None]:
        """``[T, *shape]`` per covered variable (``None`` where not covered)."""
        out = []
        for v, p, ok in zip(self.variables, self._parts, self.covered):
            if not ok:
                out.append(None)
                continue
            terms = [outer_rows(x, d) for x, d in p.pairs] + list(p.rows)
            out.append(tf.add_n(terms) if terms else self._zeros(v, num_rows))
        return out

    def norms_squared(self, num_rows) -> tf.Tensor:
        """``[T]`` squared global norm of each step's gradient over the covered variables."""
        dtype = self.variables[0].dtype if self.variables else tf.float32
        total = tf.zeros(tf.reshape(tf.cast(num_rows, tf.int32), [1]), dtype)
        for p, ok in zip(self._parts, self.covered):
            if not ok or not (p.pairs or p.rows):  # not covered, or unconnected: zero rows
                continue
            if len(p.pairs) == 1 and not p.rows:  # the common case: |x_t|^2 |delta_t|^2
                x, d = p.pairs[0]
                total += tf.reduce_sum(tf.square(x), 1) * tf.reduce_sum(tf.square(d), 1)
            elif p.pairs and not p.rows:  # a layer called k times: sum_kl (x_k.x_l)(d_k.d_l)
                for x1, d1 in p.pairs:
                    for x2, d2 in p.pairs:
                        total += tf.reduce_sum(x1 * x2, 1) * tf.reduce_sum(d1 * d2, 1)
            elif p.rows and not p.pairs:
                g = tf.add_n(p.rows)
                total += tf.reduce_sum(tf.reshape(tf.square(g), [tf.shape(g)[0], -1]), 1)
            else:  # mixed kinds of use (not produced by Dense layers); rare, so materialise
                g = tf.add_n([tf.einsum("ti,to->tio", x, d) for x, d in p.pairs] + p.rows)
                total += tf.reduce_sum(tf.reshape(tf.square(g), [tf.shape(g)[0], -1]), 1)
        return total

    def weighted_sum(self, coeff: tf.Tensor) -> list[tf.Tensor | None]:
        """``sum_t coeff[t] * grad_t`` per covered variable, without per-step tensors."""
        out = []
        for v, p, ok in zip(self.variables, self._parts, self.covered):
            if not ok:
                out.append(None)
                continue
            terms = [tf.matmul(x, coeff[:, None] * d, transpose_a=True) for x, d in p.pairs]
            for r in p.rows:
                c = tf.reshape(coeff, [-1] + [1] * (r.shape.rank - 1))
                terms.append(tf.reduce_sum(c * r, 0))
            out.append(tf.add_n(terms) if terms else tf.zeros(v.shape, v.dtype))
        return out


def _rows_check(tensor: tf.Tensor, num_steps):
    """True/False when decidable at trace time, else a scalar bool tensor."""
    n = tensor.shape[0]
    if n is not None and isinstance(num_steps, int):
        return n == num_steps
    return tf.equal(tf.shape(tensor)[0], tf.cast(num_steps, tf.int32))


def capture(fn: Callable, variables: Sequence, args: Sequence, num_steps,
            where: str = "per_step_grads") -> tuple[tf.Tensor, Capture]:
    """Runs ``fn(*args)`` once under a recording and backpropagates ``sum(fn(*args))`` to taps.

    Returns:
      ``(out, capture)``: the ``[T]`` output and the per-variable taps.
    """
    variables = list(variables)
    with tf.GradientTape() as tape:
        with recording(tape) as rec:
            out = fn(*args)
        out = check_output(out, num_steps, where)
        total = tf.reduce_sum(out)
    targets = [t.z for t in rec.dense] + [t.value for t in rec.step]
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
    parts = [_Parts([], []) for _ in variables]
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

    for tap, d, unconnected in zip(rec.dense, deltas, dead):
        ok = False if unconnected else _rows_check(tap.x, num_steps)
        i = slot(tap.kernel, ok)
        if i is not None:
            parts[i].pairs.append((tap.x, d))
        if tap.bias is not None:
            j = slot(tap.bias, ok)
            if j is not None:
                parts[j].rows.append(d)
    for tap, g, unconnected in zip(rec.step, deltas[len(rec.dense) :], dead[len(rec.dense) :]):
        i = slot(tap.variable, False if unconnected else _rows_check(tap.value, num_steps))
        if i is not None:
            parts[i].rows.append(g)

    covered = [r is None and i not in bad for i, r in enumerate(residual)]
    rows_ok = True if not dynamic else tf.reduce_all(tf.stack(dynamic))
    return out, Capture(variables, parts, covered, rows_ok)
