"""The natural gradient's linear solve: ``(G^T G / T + d I) x = G^T v`` from per-step rows.

``G`` (``[T, P]``) holds the flattened per-step log-prob gradients (:func:`flatten_steps`). Two
solvers: :func:`damped_fisher_solve`, a direct Cholesky solve of the smaller of the ``T x T``
and ``P x P`` systems (the push-through identity, see :mod:`pgrad.transforms.natural`), exact to
round-off; and :func:`fisher_cg_solve`, conjugate gradient with Fisher-vector products
``G^T (G x) / T + d x`` (``O(T P)`` memory, for large ``T P``), as exact as its iterations allow
(its relative residual is reported).

Precision. The Gram product (``G G^T`` or ``G^T G``, ``O(T^2 P)``, the dominant cost) runs in
the gradients' float32, which alone leaves a relative error of up to about ``cond * 1e-7``. Its
Cholesky factor (float64) then preconditions two steps of float64 iterative refinement, each a
residual from float64 mat-vecs with ``G`` (``O(T P)``) and a correction through that factor,
which bring the solution to the all-float64 solve's accuracy at float32-Gram cost (measured in
docs/beyond_weighting.md, "Accuracy"). ``cg_residual`` reports the relative residual
``||b - A x|| / ||b||`` of the ``P``-space system for either solver. The update is returned in
float32.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import tensorflow as tf

SOLVERS = ("auto", "cholesky", "cg")
#: ``solver="auto"`` uses the direct (Cholesky) solve up to this min(T, P), CG beyond.
DIRECT_MAX = 2048
#: Float64 iterative-refinement steps after the direct solve's float32-Gram Cholesky.
REFINE_STEPS = 2


def exact_cast(value, dtype: tf.DType) -> tf.Tensor:
    """``value`` in ``dtype``; a Python number exactly (``tf.cast`` rounds it to float32 first)."""
    return tf.cast(value, dtype) if tf.is_tensor(value) else tf.constant(value, dtype)


def conjugate_gradient(matvec: Callable[[tf.Tensor], tf.Tensor], b: tf.Tensor, iterations: int,
                       tol: float = 1e-10) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Solves ``A x = b`` for symmetric positive-definite ``A`` given only ``matvec(v) = A v``.

    Standard CG from ``x = 0`` (Hestenes and Stiefel), at most ``iterations`` steps, stopping
    once ``||r||^2 <= tol`` (as the TRPO/NPG references do).

    Returns:
      ``(x, iterations run, relative residual ||b - A x|| / ||b||)``.
    """
    b = tf.convert_to_tensor(b)
    x = tf.zeros_like(b)
    r, p = b, b
    rr = tf.reduce_sum(r * r)

    def body(i, x, r, p, rr):
        ap = matvec(p)
        alpha = rr / tf.maximum(tf.reduce_sum(p * ap), tf.cast(1e-30, b.dtype))
        x = x + alpha * p
        r = r - alpha * ap
        rr_new = tf.reduce_sum(r * r)
        p = r + (rr_new / tf.maximum(rr, tf.cast(1e-30, b.dtype))) * p
        return i + 1, x, r, p, rr_new

    i, x, _, _, _ = tf.while_loop(lambda i, x, r, p, rr: tf.logical_and(i < iterations, rr > tol),
                                  body, (tf.constant(0), x, r, p, rr))
    residual = tf.norm(b - matvec(x)) / tf.maximum(tf.norm(b), tf.cast(1e-30, b.dtype))
    return x, i, residual


def fisher_cg_solve(g_rows: tf.Tensor, v: tf.Tensor, damping: float, iterations: int,
                    tol: float = 1e-10) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """``(G^T G / T + damping I) x = G^T v`` by conjugate gradient, in float64.

    Fisher-vector products come from the per-step gradients, ``F u = G^T (G u) / T``: two
    ``[T, P]`` mat-vecs per iteration, never a ``P x P`` (or ``T x T``) matrix.

    Returns:
      ``(x [P], G x [T], iterations, relative residual)``.
    """
    rows = tf.cast(g_rows, tf.float64)
    t = tf.cast(tf.shape(rows)[0], tf.float64)
    d = exact_cast(damping, tf.float64)

    def fvp(u):
        return tf.linalg.matvec(rows, tf.linalg.matvec(rows, u), transpose_a=True) / t + d * u

    b = tf.linalg.matvec(rows, tf.cast(v, tf.float64), transpose_a=True)  # [P] = G^T v
    x, its, residual = conjugate_gradient(fvp, b, iterations, tol)
    return x, tf.linalg.matvec(rows, x), its, residual


def flatten_steps(grads: Sequence[tf.Tensor], dtype: tf.DType | None = None) -> tf.Tensor:
    """``[T, P]`` matrix of per-step gradients (one ``[T, *shape]`` tensor per variable)."""
    num_steps = tf.shape(grads[0])[0]
    dtype = dtype or grads[0].dtype
    return tf.concat([tf.reshape(tf.cast(g, dtype), [num_steps, -1]) for g in grads], axis=1)


def unflatten(x: tf.Tensor, like: Sequence[tf.Tensor]) -> list[tf.Tensor]:
    """Splits a ``[P]`` vector into tensors shaped like ``like[i].shape[1:]``, in their dtypes."""
    sizes = [math.prod(g.shape[1:]) for g in like]
    parts = tf.split(x, sizes)
    return [tf.cast(tf.reshape(p, g.shape[1:]), g.dtype) for p, g in zip(parts, like)]


def _refined_solve(chol: tf.Tensor, apply_a, b: tf.Tensor, steps: int) -> tf.Tensor:
    """``A x = b`` through an approximate Cholesky factor of ``A`` plus ``steps`` refinements.

    Each step adds the correction ``chol_solve(b - A x)`` with the residual from the exact
    ``apply_a(x) = A x``: the classic mixed-precision iterative refinement (Wilkinson; Moler
    1967), which converges to the accuracy of ``apply_a`` while ``cond(A) * ||A - LL^T|| /
    ||A||`` is below 1.
    """
    x = tf.linalg.cholesky_solve(chol, b[:, None])[:, 0]
    for _ in range(steps):
        x = x + tf.linalg.cholesky_solve(chol, (b - apply_a(x))[:, None])[:, 0]
    return x


def damped_fisher_solve(
    g_rows: tf.Tensor, v: tf.Tensor, damping: float, solve_dtype: tf.DType = tf.float64,
    refine_steps: int = REFINE_STEPS,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Solves ``(G^T G / T + damping I) x = G^T v`` without a ``P x P`` matrix when ``T < P``.

    The Gram product (``O(T^2 P)``, the dominant cost) runs in ``g_rows``' dtype; its Cholesky
    factor, in ``solve_dtype``, preconditions ``refine_steps`` steps of iterative refinement
    whose residuals come from mat-vecs with ``G`` in ``solve_dtype`` (see the module
    docstring), so the result has ``solve_dtype``'s accuracy at float32 Gram cost.

    Args:
      g_rows: ``G``, ``[T, P]`` per-step gradients.
      v: ``[T]`` step coefficients of the right-hand side (``1/T`` each for the mean gradient).
      damping: ``> 0``; makes the system positive definite.
      solve_dtype: dtype of the factorisation, the refinement and the results.
      refine_steps: refinement steps (0: the plain solve with the ``g_rows``-dtype Gram).

    Returns:
      ``(x, g_x, residual)`` in ``solve_dtype``: the ``[P]`` solution, ``G x`` (``[T]``, from
      which the KL estimate ``0.5 ||G x||^2 / T`` is cheap) and the relative residual
      ``||b - A x|| / ||b||`` of the ``P x P`` system ``A x = b``.
    """
    g_rows = tf.convert_to_tensor(g_rows)
    rows = tf.cast(g_rows, solve_dtype)  # [T, P]
    v = tf.cast(v, solve_dtype)
    num_steps, num_params = tf.shape(g_rows)[0], tf.shape(g_rows)[1]
    t_float = tf.cast(num_steps, solve_dtype)
    d = exact_cast(damping, solve_dtype)
    b = tf.linalg.matvec(rows, v, transpose_a=True)  # [P] = G^T v

    def apply_p(x):  # [P] -> (G^T G / T + d I) x
        return tf.linalg.matvec(rows, tf.linalg.matvec(rows, x), transpose_a=True) / t_float + d * x

    def small_t():  # push-through: x = G^T u, (G G^T / T + d I) u = v
        def apply_t(u):  # [T] -> (G G^T / T + d I) u
            return (tf.linalg.matvec(rows, tf.linalg.matvec(rows, u, transpose_a=True)) / t_float
                    + d * u)

        gram = tf.cast(tf.matmul(g_rows, g_rows, transpose_b=True), solve_dtype)  # [T, T]
        chol = tf.linalg.cholesky(gram / t_float + d * tf.eye(num_steps, dtype=solve_dtype))
        u = _refined_solve(chol, apply_t, v, refine_steps)  # [T]
        return tf.linalg.matvec(rows, u, transpose_a=True)  # [P]

    def small_p():  # direct: (G^T G / T + d I) x = G^T v
        gram = tf.cast(tf.matmul(g_rows, g_rows, transpose_a=True), solve_dtype)  # [P, P]
        chol = tf.linalg.cholesky(gram / t_float + d * tf.eye(num_params, dtype=solve_dtype))
        return _refined_solve(chol, apply_p, b, refine_steps)

    static_t, static_p = g_rows.shape[0], g_rows.shape[1]
    if static_t is not None and static_p is not None:
        x = small_t() if static_t < static_p else small_p()
    else:
        x = tf.cond(num_steps < num_params, small_t, small_p)
    g_x = tf.linalg.matvec(rows, x)  # [T]
    r = b - (tf.linalg.matvec(rows, g_x, transpose_a=True) / t_float + d * x)  # [P]
    residual = tf.norm(r) / tf.maximum(tf.norm(b), tf.constant(1e-30, solve_dtype))
    return x, g_x, residual
