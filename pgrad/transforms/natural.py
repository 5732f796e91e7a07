"""Natural gradient and trust region from per-step gradients (the empirical Fisher).

With the per-step log-probability gradients flattened to ``G`` (``[T, P]``, row ``t`` is
``grad log pi(a_t | s_t)``), the empirical Fisher is ``F = G^T G / T`` and the policy gradient is
``g = G^T v`` with ``v_t = w_t / T`` (``w`` the per-step weights, e.g. advantages; ``w = 1`` for a
plain mean). The natural-gradient update solves

    (F + damping * I) x = g.

Because ``g`` lies in the row space of ``G``, the push-through identity
``(G^T G / T + d I)^{-1} G^T = G^T (G G^T / T + d I)^{-1}`` gives ``x = G^T u`` with
``(G G^T / T + d I) u = v``: a ``T x T`` Cholesky solve, no ``P x P`` matrix, when ``T < P``
(the usual case for a policy network). When ``T >= P`` the ``P x P`` system is solved directly.

Precision. The Gram product (``G G^T`` or ``G^T G``, ``O(T^2 P)``, the dominant cost) runs in
the gradients' float32, which alone leaves a relative error of up to about ``cond * 1e-7``. Its
Cholesky factor (float64) then preconditions two steps of float64 iterative refinement, each a
residual from float64 mat-vecs with ``G`` (``O(T P)``) and a correction through that factor,
which bring the solution to the all-float64 solve's accuracy at float32-Gram cost (measured in
docs/beyond_weighting.md, "Accuracy"). ``cg_residual`` reports the relative residual
``||b - A x|| / ||b||`` of the ``P``-space system for either solver. The update is returned in
float32.

The KL of a step ``x``. ``max_kl`` measures a step by the *damped* quadratic form

    0.5 x^T (F + damping I) x = 0.5 (||G x||^2 / T + damping ||x||^2),

which for the exact solve is ``0.5 g^T (F + damping I)^-1 g``, so the normalised step is
``sqrt(2 max_kl / g^T (F + damping I)^-1 g) x``: TRPO's (modular_rl, baselines, sb3-contrib,
Spinning Up, Tianshou) and mjrl's NPG (Rajeswaran et al. 2017), all with the damping inside
the Fisher-vector product of that form. ``damped_kl=False`` measures by the Fisher alone,
``0.5 x^T F x`` (pgrad's earlier convention): the same direction, a step
``sqrt(1 + damping ||x||^2 / x^T F x)`` times longer. The ``kl`` metric is always the Fisher
estimate ``0.5 x^T F x`` of the returned update (below ``max_kl`` under the damped measure).

Fisher vs. weights. In natural policy gradient ``F = E[grad log pi grad log pi^T]`` is the Fisher
of the *policy*, computed from the unweighted log-prob gradients, while ``g`` is the *weighted*
policy gradient. So these transforms read the weights themselves (``weights_key="advantages"``)
and are meant to be placed directly on the raw per-step gradients:

    chain(natural_gradient(1e-3, weights_key="advantages"))

Placing them after ``weight_by("advantages")`` instead uses the weighted rows ``w_t G_t`` for both
``F`` and ``g`` -- the second moment of the gradient estimator, a different (TONGA-like)
preconditioner; that is allowed, but it is not the natural policy gradient.

The KL bound is on the update these transforms return. An optimizer step is ``lr * x`` (SGD) or
something else entirely (Adam), so the bound holds for the parameter step only with
``keras.optimizers.SGD(learning_rate=1.0)``, as in NPG/TRPO.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import tensorflow as tf

from pgrad.transforms.base import GradientTransform, TransformError, context_value, reports
from pgrad.transforms.builtins import check_ddof, standardized


@reports("kl", "scale", "cg_iterations", "cg_residual")
class FisherState(NamedTuple):
    """Last update's step statistics (reported as metrics)."""

    kl: tf.Tensor  # [] float32, 0.5 x^T F x of the returned update x (undamped Fisher)
    scale: tf.Tensor  # [] float32, factor applied to meet max_kl (1.0 when not limited)
    cg_iterations: tf.Tensor  # [] float32, conjugate-gradient iterations (0: direct solve)
    cg_residual: tf.Tensor  # [] float32, ||b - A x|| / ||b|| of the solve (either solver)


def _fisher_init(variables):
    del variables
    return FisherState(tf.constant(0.0), tf.constant(1.0), tf.constant(0.0), tf.constant(0.0))


SOLVERS = ("auto", "cholesky", "cg")
#: ``solver="auto"`` uses the direct (Cholesky) solve up to this min(T, P), CG beyond.
DIRECT_MAX = 2048
#: Float64 iterative-refinement steps after the direct solve's float32-Gram Cholesky.
REFINE_STEPS = 2


def _exact(value, dtype: tf.DType) -> tf.Tensor:
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
    d = _exact(damping, tf.float64)

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
    d = _exact(damping, solve_dtype)
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


def _fisher_transform(
    damping: float | None, max_kl: float | None, weights_key: str | None, standardize: bool,
    eps: float, name: str, solver: str = "auto", cg_iters: int = 10, exact_kl: bool = False,
    damped_kl: bool = True, ddof: int = 1,
) -> GradientTransform:
    """Shared body of ``natural_gradient`` (``damping`` set) and ``trust_region`` (``None``)."""
    if solver not in SOLVERS:
        raise ValueError(f"{name}: solver must be one of {SOLVERS}; got {solver!r}.")
    if int(cg_iters) < 1:
        raise ValueError(f"{name}: cg_iters must be >= 1; got {cg_iters}.")
    if damping is not None and not damping > 0:
        raise ValueError(f"{name}: damping must be > 0 (the Fisher is singular); got {damping}.")
    if max_kl is not None and not max_kl > 0:
        raise ValueError(f"{name}: max_kl must be > 0; got {max_kl}.")
    if not isinstance(damped_kl, bool):
        raise ValueError(f"{name}: damped_kl must be true or false; got {damped_kl!r}.")
    check_ddof(ddof, name)

    def update(grads, state, **ctx):
        if grads[0].shape.rank is not None and grads[0].shape.rank == 0:
            raise TransformError(f"{name} needs per-step gradients; it got aggregated ones.")
        rows = flatten_steps(grads)  # [T, P] float32
        num_steps = tf.shape(rows)[0]
        t_float = tf.cast(num_steps, tf.float64)
        if weights_key is None:
            v = tf.ones([num_steps], tf.float64) / t_float  # [T]: g = mean of the rows
        else:
            w = tf.cast(context_value(ctx, weights_key, name), tf.float64)  # [T]
            v = (standardized(w, eps, ddof) if standardize else w) / t_float
        its = residual = tf.constant(0.0, tf.float64)
        if damping is None:
            # [P] plain (weighted) mean gradient, and G x, in float64 (two mat-vecs).
            rows64 = tf.cast(rows, tf.float64)
            x = tf.linalg.matvec(rows64, v, transpose_a=True)
            g_x = tf.linalg.matvec(rows64, x)  # [T]
        else:
            direct = solver == "cholesky"
            if solver == "auto":
                # The direct solve's system is min(T, P) square; P is static even when T is not.
                num_params = sum(math.prod(g.shape[1:]) for g in grads)
                direct = min(grads[0].shape[0] or num_params, num_params) <= DIRECT_MAX
            if direct:
                x, g_x, residual = damped_fisher_solve(rows, v, damping)
            else:
                x, g_x, its, residual = fisher_cg_solve(rows, v, damping, cg_iters)
                its, residual = tf.cast(its, tf.float64), tf.cast(residual, tf.float64)
        kl = 0.5 * tf.reduce_sum(tf.square(g_x)) / t_float  # 0.5 x^T F x, F the empirical Fisher
        factor = tf.ones([], tf.float64)
        if max_kl is not None:
            # The step's KL as max_kl measures it: 0.5 x^T (F + damping I) x (TRPO's and the NPG
            # references' quadratic form, the damping inside their Fisher-vector product), or the
            # Fisher's alone; the same without damping.
            measured = kl
            if damping is not None and damped_kl:
                measured = kl + 0.5 * _exact(damping, tf.float64) * tf.reduce_sum(
                    tf.square(x))
            limit = tf.constant(max_kl, tf.float64)
            # sqrt(max_kl / measured) makes the measured KL exactly max_kl; a bound never scales
            # up, an exact step (natural policy gradient's normalised step) does.
            if exact_kl:
                factor = tf.sqrt(limit / tf.maximum(measured, tf.constant(1e-30, tf.float64)))
            else:
                factor = tf.where(measured > limit,
                                  tf.sqrt(limit / tf.maximum(measured, limit)), factor)
        new_state = FisherState(tf.cast(kl * factor**2, tf.float32), tf.cast(factor, tf.float32),
                                tf.cast(its, tf.float32), tf.cast(residual, tf.float32))
        return unflatten(x * factor, grads), new_state

    return GradientTransform(_fisher_init, update, name=name, step_axis="aggregates")


def natural_gradient(
    damping: float,
    *,
    weights_key: str | None = None,
    max_kl: float | None = None,
    standardize: bool = False,
    eps: float = 1e-8,
    solver: str = "auto",
    cg_iters: int = 10,
    exact_kl: bool = False,
    damped_kl: bool = True,
    ddof: int = 1,
) -> GradientTransform:
    """Aggregates per-step gradients into the damped natural gradient ``(F + damping I)^-1 g``.

    ``F = G^T G / T`` is the empirical Fisher of the incoming per-step gradients ``G`` (``[T, P]``
    flattened over all variables) and ``g = mean_t w_t G_t`` with ``w = context[weights_key]``
    (``w = 1`` without a key). Solved exactly (a float32 Gram product, its Cholesky factor in
    float64 and two float64 refinement steps) through the ``T x T`` system when ``T < P``, else
    the ``P x P`` one (see the module docstring); cost ``O(T^2 P)``. Needs the full per-step
    gradients, so the engine materialises them.

    Args:
      damping: Tikhonov damping added to the Fisher's diagonal, ``> 0``.
      weights_key: context key of the per-step weights (e.g. ``"advantages"``). Use it on the raw
        per-step gradients for natural policy gradient: ``F`` from unweighted log-prob gradients.
      max_kl: if set, the update ``x`` is scaled down so its KL, measured as
        ``0.5 x^T (F + damping I) x`` (``damped_kl``), is ``<= max_kl`` (trust region).
      standardize: standardise the weights over the batch first (as ``weight_by``).
      eps: added to the std when standardising (guards a constant batch).
      solver: ``"cholesky"`` (exact, through the ``T x T`` or ``P x P`` system), ``"cg"``
        (conjugate gradient in float64 with Fisher-vector products ``G^T (G u) / T``: no
        ``P x P`` or ``T x T`` matrix, for large ``T * P``; approximate, see ``cg_iters``), or
        ``"auto"`` (Cholesky up to ``min(T, P) = 2048``, else CG).
      cg_iters: conjugate-gradient iterations at most (it also stops once ``||r||^2 <= 1e-10``,
        as the TRPO references do).
      exact_kl: with ``max_kl``, scale every step to a measured KL of exactly ``max_kl`` (up as
        well as down: the normalised step ``sqrt(2 max_kl / g^T (F + damping I)^-1 g) x`` of
        natural policy gradient and TRPO) instead of bounding it.
      damped_kl: measure a step's KL for ``max_kl`` with the damped matrix,
        ``0.5 x^T (F + damping I) x`` (TRPO, sb3-contrib, Spinning Up, Tianshou, mjrl), or with
        ``False`` by the Fisher alone, ``0.5 x^T F x``, which allows a longer step along the
        same direction.
      ddof: the std for ``standardize``: 1 the sample std (Stable-Baselines3), 0 the population.

    Returns:
      An aggregating ``GradientTransform``; its ``FisherState`` reports ``kl`` (the Fisher
      estimate ``0.5 x^T F x`` of the returned update), ``scale`` (applied for ``max_kl``),
      ``cg_iterations`` and ``cg_residual`` (relative residual of the solve, either solver).
    """
    name = f"natural_gradient({damping})"  # no commas or quotes: it names metric columns
    if exact_kl and max_kl is None:
        raise ValueError(f"{name}: exact_kl needs max_kl.")
    return _fisher_transform(damping, max_kl, weights_key, standardize, eps, name, solver,
                             cg_iters, exact_kl, damped_kl, ddof)


def trust_region(
    max_kl: float,
    *,
    weights_key: str | None = None,
    damping: float | None = None,
    standardize: bool = False,
    eps: float = 1e-8,
    damped_kl: bool = True,
    ddof: int = 1,
) -> GradientTransform:
    """Aggregates per-step gradients and scales the result so its estimated KL is <= ``max_kl``.

    The update is the (weighted) mean gradient ``g = mean_t w_t G_t`` or, with ``damping`` set,
    the natural gradient (then it equals ``natural_gradient(damping, max_kl=max_kl)``). Its KL
    is measured by the quadratic form ``0.5 x^T F x`` with the empirical Fisher ``F = G^T G / T``
    of the incoming per-step gradients, plus ``0.5 damping ||x||^2`` with ``damping`` set (and
    ``damped_kl``, as TRPO); if it exceeds ``max_kl`` the update is multiplied by
    ``sqrt(max_kl / measured)``, which makes the measure exactly ``max_kl``. The applied factor
    is the ``scale`` metric. The plain-gradient form costs only two ``[T, P]`` mat-vecs (no
    solve).

    Args:
      max_kl: bound on the measured KL of the returned update, ``> 0``.
      weights_key: context key of per-step weights (see ``natural_gradient``).
      damping: if set, the direction is the damped natural gradient.
      standardize: standardise the weights over the batch first.
      eps: added to the std when standardising (guards a constant batch).
      damped_kl: with ``damping``, include it in the KL measure (see ``natural_gradient``).
      ddof: the std for ``standardize``: 1 the sample std (Stable-Baselines3), 0 the population.

    Returns:
      An aggregating ``GradientTransform`` with a ``FisherState`` (metrics ``kl`` and ``scale``).
    """
    name = f"trust_region({max_kl})"  # no commas or quotes: it names metric columns
    return _fisher_transform(damping, max_kl, weights_key, standardize, eps, name,
                             damped_kl=damped_kl, ddof=ddof)


def natural_policy_gradient(
    damping: float = 0.1,
    max_kl: float = 0.05,
    learning_rate: float | str = "learning_rate",
    weights_key: str = "advantages",
    damped_kl: bool = True,
) -> GradientTransform:
    """Natural policy gradient whose *applied* step, after ``SGD(learning_rate)``, has KL <= max_kl.

    ``chain(natural_gradient(damping, weights_key=..., max_kl=...), scale(1 / learning_rate))``:
    an agent's single SGD optimizer multiplies the policy update by its learning rate (and its
    value-function gradient too, which keeps a normal step size), so the ``1 / learning_rate``
    factor makes the policy step exactly the KL-bounded natural-gradient step. The learning rate
    is the optimizer's own by default: the agents put the value of each update (its schedule's)
    into the context as ``"learning_rate"``; a number fixes it instead (for a loop of your own).
    Turn off the agent's global-norm clipping (it would rescale the bounded step). The KL is
    measured as ``natural_gradient``'s ``damped_kl`` says. All arguments have defaults, so
    ``--transform pgrad.transforms.natural:natural_policy_gradient`` works as is (see
    docs/beyond_weighting.md).
    """
    from pgrad.transforms.builtins import scale
    from pgrad.transforms.chain import chain

    return chain(
        natural_gradient(damping, weights_key=weights_key, max_kl=max_kl, damped_kl=damped_kl),
        scale(learning_rate, invert=True), name="natural_policy_gradient",
    )
