"""Gradient checking: TensorFlow's gradient against central finite differences in float64.

``check_gradients(fn, *inputs)`` builds two jacobians of ``fn`` at ``inputs`` -- one from
``tf.GradientTape`` (so custom gradients, ``tf.custom_gradient`` ops and registered gradients are
what is tested) and one from central differences ``(f(x + eps e_j) - f(x - eps e_j)) / (2 eps)``
-- and reports, per input, the largest absolute and relative disagreement.

For ops that *deliberately* change the gradient (``scale_gradient``, ``clip_gradient``, ...), the
finite differences of the forward function are not what the gradient should be. Pass
``reference=g``: a function whose true derivative the modified gradient should equal (for
``2 * scale_gradient(x, 3)`` that is ``6 * x``); the finite differences are then taken on ``g``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf


@dataclass(frozen=True)
class GradCheck:
    """Result of :func:`check_gradients`; one entry per checked input.

    Attributes:
      abs_error: max over jacobian entries of ``|J_tf - J_fd|``.
      rel_error: ``abs_error`` divided by the largest jacobian entry (either one) -- a normwise
        relative error that stays meaningful where individual entries are ~0.
      theoretical: TensorFlow's jacobians, ``[num_outputs, input.size]`` each.
      numerical: the finite-difference jacobians, same shapes.
      eps: the finite-difference step used.
    """

    abs_error: tuple[float, ...]
    rel_error: tuple[float, ...]
    theoretical: tuple[np.ndarray, ...] = field(repr=False)
    numerical: tuple[np.ndarray, ...] = field(repr=False)
    eps: float = 1e-6

    @property
    def max_rel_error(self) -> float:
        """Largest relative error over all inputs."""
        return max(self.rel_error, default=0.0)

    def ok(self, tol: float = 1e-6) -> bool:
        """Whether every input's relative error is at most ``tol``.

        ``1e-6`` suits float64 with the default ``eps`` (smooth functions land near 1e-9); a
        wrong gradient is usually off by O(1). Use ~1e-2 for float32 checks.
        """
        return all(r <= tol for r in self.rel_error)

    def __repr__(self) -> str:
        parts = [
            f"input {i}: max abs {a:.2e}, max rel {r:.2e}"
            for i, (a, r) in enumerate(zip(self.abs_error, self.rel_error))
        ]
        return f"GradCheck({'; '.join(parts)}; eps={self.eps:g})"


def _flat_output(out, who: str) -> tf.Tensor:
    flat = tf.nest.flatten(out)
    if not flat:
        raise ValueError(f"check_gradients: {who} returned nothing.")
    parts = []
    for o in flat:
        o = tf.convert_to_tensor(o)
        if not o.dtype.is_floating:
            raise TypeError(f"check_gradients: {who} returned a {o.dtype.name} tensor.")
        parts.append(tf.reshape(tf.cast(o, tf.float64), [-1]))
    return tf.concat(parts, axis=0)  # [num_outputs]


def _theoretical(fn: Callable, xs: list[tf.Tensor]) -> list[np.ndarray]:
    """``[num_outputs, x.size]`` jacobian per input, one backward pass per output element.

    One ``tape.gradient`` per unit cotangent (not ``tape.jacobian``'s vectorisation): the check
    must run the user's gradient code exactly as training would.
    """
    with tf.GradientTape(persistent=True) as tape:
        for x in xs:
            tape.watch(x)
        y = _flat_output(fn(*xs), "fn")
    n_out = int(y.shape[0])
    rows: list[list[tf.Tensor]] = [[] for _ in xs]
    for k in range(n_out):
        cot = tf.one_hot(k, n_out, dtype=y.dtype)
        grads = tape.gradient(
            y, xs, output_gradients=cot, unconnected_gradients=tf.UnconnectedGradients.ZERO
        )
        for i, g in enumerate(grads):
            rows[i].append(np.reshape(tf.convert_to_tensor(g).numpy(), [-1]))
    del tape
    return [np.stack(r).astype(np.float64) if r else np.zeros((0, int(tf.size(x))))
            for r, x in zip(rows, xs)]


def _numerical(fn: Callable, arrays: list[np.ndarray], eps: float, dtype) -> list[np.ndarray]:
    """Central differences: column j of input i is (f(x + eps e_j) - f(x - eps e_j)) / 2 eps."""

    def call(values):
        return _flat_output(fn(*[tf.constant(v, dtype) for v in values]), "reference").numpy()

    out = []
    for i, a in enumerate(arrays):
        cols = []
        for j in range(a.size):
            plus, minus = [v.copy() for v in arrays], [v.copy() for v in arrays]
            plus[i].reshape(-1)[j] += eps
            minus[i].reshape(-1)[j] -= eps
            cols.append((call(plus) - call(minus)) / (2.0 * eps))
        n_out = cols[0].shape[0] if cols else call(arrays).shape[0]
        out.append(np.stack(cols, axis=1) if cols else np.zeros((n_out, 0)))
    return out


def check_gradients(
    fn: Callable[..., tf.Tensor],
    *inputs: Any,
    eps: float | None = None,
    reference: Callable[..., tf.Tensor] | None = None,
    dtype: tf.DType = tf.float64,
) -> GradCheck:
    """Compares TensorFlow's gradient of ``fn`` with central finite differences.

    Args:
      fn: ``fn(*inputs) -> tensor`` (or a nest of tensors), any shape; it must accept ``dtype``
        inputs. Custom gradients inside it are what gets checked.
      *inputs: points to check at: floating arrays or tensors, any shapes. Every input is
        checked; close over anything that should stay fixed.
      eps: finite-difference step; default ``1e-6`` for float64 and ``1e-3`` for float32. Keep
        ``x +- eps`` on one side of any kink (``relu`` at 0 has no derivative to agree with).
      reference: function whose finite differences the gradient of ``fn`` should match, for
        gradients that are modified on purpose; default ``fn``. Same output shape as ``fn``.
      dtype: dtype the inputs are cast to for both computations.

    Returns:
      A :class:`GradCheck`; ``result.ok(tol)`` is the pass/fail test.

    Raises:
      TypeError: if an input or output is not floating point.
      ValueError: if ``fn`` and ``reference`` disagree on the output size.
    """
    dtype = tf.as_dtype(dtype)
    if eps is None:
        eps = 1e-6 if dtype == tf.float64 else 1e-3
    arrays = []
    for i, x in enumerate(inputs):
        a = np.array(x.numpy() if hasattr(x, "numpy") else x)
        if not np.issubdtype(a.dtype, np.floating):
            raise TypeError(f"check_gradients: input {i} is {a.dtype}; inputs must be floating.")
        arrays.append(a.astype(dtype.as_numpy_dtype))
    xs = [tf.constant(a, dtype) for a in arrays]
    theoretical = _theoretical(fn, xs)
    numerical = _numerical(reference or fn, arrays, eps, dtype)
    abs_err, rel_err = [], []
    for t, n in zip(theoretical, numerical):
        if t.shape != n.shape:
            raise ValueError(
                f"check_gradients: fn has {t.shape[0]} outputs but reference has {n.shape[0]}."
            )
        diff = float(np.max(np.abs(t - n))) if t.size else 0.0
        scale = float(max(np.max(np.abs(t)), np.max(np.abs(n)))) if t.size else 0.0
        abs_err.append(diff)
        rel_err.append(diff / scale if scale > 0 else diff)
    return GradCheck(tuple(abs_err), tuple(rel_err), tuple(theoretical), tuple(numerical), eps)
