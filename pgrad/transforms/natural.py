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

Precision and the solvers (a direct Cholesky solve with float64 refinement, or conjugate
gradient with Fisher-vector products): :mod:`pgrad.transforms.fisher_solve`.

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
from typing import NamedTuple

import tensorflow as tf

from pgrad.transforms.base import GradientTransform, TransformError, context_value, reports
from pgrad.transforms.builtins import check_ddof, standardized
from pgrad.transforms.fisher_solve import (
    DIRECT_MAX,
    REFINE_STEPS,
    SOLVERS,
    conjugate_gradient,
    damped_fisher_solve,
    exact_cast,
    fisher_cg_solve,
    flatten_steps,
    unflatten,
)

__all__ = ["DIRECT_MAX", "REFINE_STEPS", "SOLVERS", "FisherState", "conjugate_gradient",
           "damped_fisher_solve", "fisher_cg_solve", "flatten_steps", "natural_gradient",
           "natural_policy_gradient", "trust_region", "unflatten"]


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
                measured = kl + 0.5 * exact_cast(damping, tf.float64) * tf.reduce_sum(
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
