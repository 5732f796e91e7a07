"""Per-step gradients: one gradient row per step of a per-step objective.

``per_step_grads(fn, variables, *args)`` is the jacobian of a ``[T]``-valued ``fn`` with respect
to each variable, computed as ``T`` independent per-example gradients vectorised with
``tf.vectorized_map`` -- O(T), not the O(T^2) of ``tape.jacobian`` on a batched output, which
backpropagates the whole batch once per row. Memory stays bounded by processing the steps in
chunks whose ``[chunk, params]`` block fits a byte budget.

Contract on ``fn``: ``fn(*args)`` returns a ``[T]`` tensor whose row ``t`` depends only on row
``t`` of every arg (log-probabilities of a policy are the canonical case). Each arg is a tensor
(or nest of tensors) with the step axis first.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from pgrad.core import taps
from pgrad.core.chunking import map_chunks

#: Default byte budget for one chunk of materialised per-step gradients.
DEFAULT_MAX_BYTES = 256 * 2**20

_warned_fallback = False


def num_params(variables: Sequence[tf.Variable]) -> int:
    """Total number of scalars in ``variables``."""
    return int(sum(math.prod(v.shape) for v in variables))


def default_chunk_size(variables: Sequence[tf.Variable], max_bytes: int = DEFAULT_MAX_BYTES) -> int:
    """Rows per chunk so that ``[chunk, params]`` float32 gradients stay under ``max_bytes``.

    Vectorised backprop holds a few row-sized intermediates per parameter row, hence the 4x.
    """
    per_row = 4 * 4 * max(num_params(variables), 1)
    return max(1, int(max_bytes // per_row))


def num_steps(args: Any) -> tf.Tensor | int:
    """``T``, the leading (step) dimension of the first per-step argument (static if known)."""
    flat = tf.nest.flatten(args)
    if not flat:
        raise ValueError("per_step_grads needs at least one per-step argument (step axis first).")
    first = tf.convert_to_tensor(flat[0])
    if first.shape.rank == 0:
        raise ValueError("per_step_grads arguments need a leading step axis; got a scalar.")
    static = first.shape[0]
    return static if static is not None else tf.shape(first)[0]


def _example_grads(fn: Callable, variables: Sequence[tf.Variable], where: str):
    """Returns ``one(row_args) -> [grad per variable]`` for a single step (no step axis)."""

    def one(row_args):
        batched = tf.nest.map_structure(lambda x: tf.expand_dims(x, 0), row_args)
        with tf.GradientTape() as tape:
            out = taps.check_per_step(taps.split_output(fn(*batched))[0], 1, where)
            total = tf.reduce_sum(out)
        grads = tape.gradient(total, variables)
        return zeros_for_unconnected(grads, variables)

    return one


def zeros_for_unconnected(grads: Sequence[tf.Tensor | None],
                          variables: Sequence[tf.Variable]) -> list[tf.Tensor]:
    """``grads`` with ``None`` replaced by zeros.

    (``UnconnectedGradients.ZERO`` fails for Keras 3 variables, whose ``dtype`` is a string.)
    """
    return [tf.zeros(v.shape, tf.as_dtype(v.dtype)) if g is None else tf.convert_to_tensor(g)
            for g, v in zip(grads, variables)]


def _vectorized(one: Callable, rows, variables) -> list[tf.Tensor]:
    """Per-example gradients for a block of rows; falls back to a while-loop if pfor fails."""
    global _warned_fallback
    try:
        return tf.vectorized_map(one, rows, fallback_to_while_loop=False)
    except Exception as err:  # noqa: BLE001  (pfor fails in many ways; the loop re-raises
        # any error that is the function's own)
        if isinstance(err, ValueError) and taps.SHAPE_MARK in str(err):
            line = next(x for x in str(err).splitlines() if taps.SHAPE_MARK in x)
            raise ValueError(line.strip()) from None
        if not _warned_fallback:
            _warned_fallback = True
            warnings.warn(
                "pgrad.per_step_grads: tf.vectorized_map could not vectorise this function "
                f"({type(err).__name__}: {str(err).splitlines()[0][:120]}); using a slower "
                "sequential loop. Results are exact.",
                RuntimeWarning,
                stacklevel=3,
            )
        return tf.map_fn(
            one,
            rows,
            fn_output_signature=[tf.TensorSpec(v.shape, v.dtype) for v in variables],
        )


def _generic_grads(fn, variables, args, num_rows, chunk_size, max_bytes) -> list[tf.Tensor]:
    """Per-example gradients vectorised with ``tf.vectorized_map``, in chunks."""
    chunk = int(chunk_size) if chunk_size else default_chunk_size(variables, max_bytes)
    one = _example_grads(fn, variables, "per_step_grads")
    specs = [tf.TensorSpec([None, *v.shape], v.dtype) for v in variables]
    return map_chunks(lambda rows: _vectorized(one, rows, variables), args, num_rows, chunk, specs)


def _generic_norms_sq(fn, variables, args, num_rows, chunk_size, max_bytes) -> tf.Tensor:
    """``[T]`` squared per-step norms over ``variables``, one chunk of rows alive at a time."""
    chunk = int(chunk_size) if chunk_size else default_chunk_size(variables, max_bytes)
    one = _example_grads(fn, variables, "per_step_norms")
    dtype = variables[0].dtype if variables else tf.float32

    def block(rows):
        return [step_norms_squared(_vectorized(one, rows, variables))]

    return map_chunks(block, args, num_rows, chunk, [tf.TensorSpec([None], dtype)])[0]


def _sequence_block(fn, variables, length: int):
    """``block(rows) -> [grad rows per variable]`` for rows that are whole sequences of
    ``length`` steps: a jacobian through each sequence (row ``t`` of a sequence may read its
    earlier rows: ``length`` backward passes through it), one sequence after the other
    (``tf.map_fn``; pfor cannot vectorise a jacobian through the core's ``tf.scan`` twice)."""

    def one(seq_args):  # one sequence, [L, ...] per arg -> [L, *shape] per variable
        with tf.GradientTape(persistent=True) as tape:
            out = taps.check_per_step(taps.split_output(fn(*seq_args))[0], length,
                                      "per_step_grads")
        # a loop of backward passes: pfor through the core's tf.scan takes ~10 s to build
        jac = tape.jacobian(out, variables, experimental_use_pfor=False)
        return zeros_for_unconnected(jac, variables)

    def block(rows):
        seqs = tf.nest.map_structure(
            lambda x: tf.reshape(x, tf.concat([[-1, length], tf.shape(x)[1:]], 0)), rows)
        grads = tf.map_fn(one, seqs, fn_output_signature=[
            tf.TensorSpec([length, *v.shape], v.dtype) for v in variables])  # [k, L, *shape]
        return [tf.reshape(g, tf.concat([[-1], tf.shape(g)[2:]], 0)) for g in grads]

    return block


def sequence_grads(fn: Callable[..., tf.Tensor], variables: Sequence[tf.Variable],
                   args: Sequence[Any], num_rows: tf.Tensor | int, length: int,
                   chunk_size: int | None = None,
                   max_bytes: int = DEFAULT_MAX_BYTES) -> list[tf.Tensor]:
    """Per-step gradients of ``fn`` over env-major sequences of ``length`` rows (a recurrent
    policy: row ``t`` of a sequence depends on rows ``0..t`` of it), in chunks of whole
    sequences. Each sequence costs ``length`` backward passes through it (vectorised)."""
    chunk = int(chunk_size) if chunk_size else default_chunk_size(variables, max_bytes)
    chunk = max(1, chunk // length) * length
    specs = [tf.TensorSpec([None, *v.shape], v.dtype) for v in variables]
    return map_chunks(_sequence_block(fn, variables, length), args, num_rows, chunk, specs)


def _guarded(cap: taps.Capture, fast: Callable, slow: Callable):
    """``fast()`` when every tap had T rows; with dynamic shapes, decided at run time."""
    if cap.rows_ok is True:
        return fast()
    return tf.cond(cap.rows_ok, fast, slow)


def _prepare(variables, args):
    variables = list(variables)
    args = tf.nest.map_structure(tf.convert_to_tensor, args)
    return variables, args, num_steps(args)


def per_step_grads(
    fn: Callable[..., tf.Tensor],
    variables: Sequence[tf.Variable],
    *args: Any,
    chunk_size: int | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    use_taps: bool = True,
    sequence_length: int | None = None,
) -> list[tf.Tensor]:
    """Per-step gradients of a per-step objective.

    Variables of Keras ``Dense``, ``Conv1D``/``Conv2D``, ``Embedding`` and
    ``LayerNormalization`` layers (and per-step copies made with
    :func:`pgrad.core.taps.per_step_variable`) get their rows from one batched backward pass
    (:mod:`pgrad.core.taps`); every other variable from vectorised per-example gradients. Both are
    exact.

    Args:
      fn: ``fn(*args) -> [T]``; row ``t`` depends only on row ``t`` of each arg.
      variables: the variables to differentiate (Keras or ``tf.Variable``).
      *args: per-step inputs, each ``[T, ...]`` (nests allowed).
      chunk_size: steps per vectorised block (generic path); default from ``max_bytes``.
      max_bytes: memory budget for one block of ``[chunk, params]`` gradients.
      use_taps: use the layer taps where they apply (``False``: generic path only).
      sequence_length: ``L``: the rows are env-major sequences of ``L`` steps and row ``t`` of
        a sequence may depend on its rows ``0..t`` (a recurrent policy); each row's gradient is
        taken through its prefix (no taps: a layer's row is read by later steps too).

    Returns:
      One ``[T, *variable.shape]`` tensor per variable; row ``t`` is ``d fn(*args)[t] / d var``.

    Raises:
      ValueError: if ``fn`` does not return one value per step.
    """
    variables, args, num_rows = _prepare(variables, args)
    if sequence_length:
        return sequence_grads(fn, variables, args, num_rows, int(sequence_length), chunk_size,
                              max_bytes)

    def generic(vs):
        return _generic_grads(fn, vs, args, num_rows, chunk_size, max_bytes)

    if not (use_taps and variables and taps.enabled()):
        return generic(variables)
    _, cap = taps.capture(fn, variables, args, num_rows, "per_step_grads")
    if not cap.any_covered:
        return generic(variables)

    def fast():
        rows = cap.per_step_grads(num_rows)
        missing = [i for i, r in enumerate(rows) if r is None]
        if missing:
            for i, g in zip(missing, generic([variables[i] for i in missing])):
                rows[i] = g
        return rows

    return _guarded(cap, fast, lambda: generic(variables))


def step_norms_squared(grads: Sequence[tf.Tensor]) -> tf.Tensor:
    """``[T]`` squared global norm of each step's gradient across all variables."""
    total = None
    for g in grads:
        g = tf.convert_to_tensor(g)
        sq = tf.reduce_sum(tf.reshape(tf.square(g), [tf.shape(g)[0], -1]), axis=1)
        total = sq if total is None else total + sq
    return total


def per_step_norms(
    fn: Callable[..., tf.Tensor],
    variables: Sequence[tf.Variable],
    *args: Any,
    chunk_size: int | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    use_taps: bool = True,
    sequence_length: int | None = None,
) -> tf.Tensor:
    """``[T]`` global norm of each step's gradient, never materialising all rows at once.

    Tapped variables contribute from one batched pass (Dense: ``|x_t|^2 |delta_t|^2``;
    convolutions: ghost or materialised per layer, in chunks; no ``[T, params]`` tensor at all);
    other variables go through the chunked generic path.
    Arguments as in :func:`per_step_grads`.
    """
    if sequence_length:
        variables, args, num_rows = _prepare(variables, args)
        length = int(sequence_length)
        chunk = int(chunk_size) if chunk_size else default_chunk_size(variables, max_bytes)
        chunk = max(1, chunk // length) * length
        grads_of = _sequence_block(fn, variables, length)
        dtype = variables[0].dtype if variables else tf.float32
        return tf.sqrt(map_chunks(lambda rows: [step_norms_squared(grads_of(rows))], args,
                                  num_rows, chunk, [tf.TensorSpec([None], dtype)])[0])
    return norms_and_capture(
        fn, variables, *args, chunk_size=chunk_size, max_bytes=max_bytes, use_taps=use_taps
    )[0]


def norms_and_capture(
    fn: Callable[..., tf.Tensor],
    variables: Sequence[tf.Variable],
    *args: Any,
    chunk_size: int | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    use_taps: bool = True,
) -> tuple[tf.Tensor, taps.Capture | None]:
    """:func:`per_step_norms` plus the :class:`pgrad.core.taps.Capture` it used (or ``None``).

    The engine reuses the capture to form the reweighted gradient without a second pass.
    """
    variables, args, num_rows = _prepare(variables, args)

    def generic(vs):
        return _generic_norms_sq(fn, vs, args, num_rows, chunk_size, max_bytes)

    if not (use_taps and variables and taps.enabled()):
        return tf.sqrt(generic(variables)), None
    _, cap = taps.capture(fn, variables, args, num_rows, "per_step_norms")
    if not cap.any_covered:
        return tf.sqrt(generic(variables)), None

    def fast():
        total = cap.norms_squared(num_rows)
        missing = [v for v, ok in zip(variables, cap.covered) if not ok]
        return total + generic(missing) if missing else total

    return tf.sqrt(_guarded(cap, fast, lambda: generic(variables))), cap
