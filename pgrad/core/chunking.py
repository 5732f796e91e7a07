"""Row chunks: apply a function to ``[T, ...]`` tensors a block of rows at a time.

Used wherever per-step work would otherwise hold a ``[T, large]`` intermediate at once: the
generic vectorised path (:mod:`pgrad.core.per_step`) and the convolution taps' shifted windows
(:mod:`pgrad.core.conv_taps`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf


def map_chunks(
    block_fn: Callable,
    args: Sequence[Any],
    num_rows: tf.Tensor | int,
    chunk_size: int,
    out_specs: Sequence[tf.TensorSpec],
) -> list[tf.Tensor]:
    """Applies ``block_fn(rows) -> list of [n, ...]`` over step chunks and concatenates.

    Single chunk (the common case) is a direct call; otherwise a ``tf.while_loop`` over chunks,
    so that only one chunk's intermediates are alive at a time, eagerly or in a graph.
    """
    if isinstance(num_rows, int) and num_rows <= chunk_size:
        return list(block_fn(args))
    n = tf.convert_to_tensor(num_rows, tf.int32)
    num_chunks = (n + chunk_size - 1) // chunk_size
    arrays = [
        tf.TensorArray(s.dtype, size=num_chunks, infer_shape=False, element_shape=s.shape)
        for s in out_specs
    ]

    def body(i, arrays):
        start = i * chunk_size
        size = tf.minimum(chunk_size, n - start)
        rows = tf.nest.map_structure(lambda x: x[start : start + size], args)
        outs = block_fn(rows)
        return i + 1, [a.write(i, o) for a, o in zip(arrays, outs)]

    _, arrays = tf.while_loop(lambda i, _: i < num_chunks, body, (tf.constant(0), arrays))
    return [a.concat() for a in arrays]


def chunk_rows(bytes_per_row: int, max_bytes: int) -> int:
    """Rows per chunk so that ``rows * bytes_per_row`` stays under ``max_bytes`` (at least 1)."""
    return max(1, int(max_bytes // max(int(bytes_per_row), 1)))
