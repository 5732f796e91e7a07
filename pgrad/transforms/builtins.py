"""Built-in transforms: weighting, clipping, scaling, aggregation, PPO's ratio clip, wrappers.

Each is a small factory returning a :class:`~pgrad.transforms.base.GradientTransform`. The ones
whose per-step effect is a scalar per step are :class:`~pgrad.transforms.base.StepScale` s, so the
engine runs them without materialising per-step gradients; ``stateless`` and ``from_function``
wrap arbitrary user functions (the engine materialises the per-step gradients for them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import tensorflow as tf

from pgrad.transforms.base import (
    GradientTransform,
    StepScale,
    TransformError,
    context_value,
    empty_init,
    global_norm,
    per_step_scale,
    reports,
    shape_str,
)


@reports("clip_fraction")
class ClipState(NamedTuple):
    """Last update's clipping statistics (reported as metrics)."""

    clip_fraction: tf.Tensor  # [] fraction of steps whose gradient was scaled down


@reports("mean", "var")
class RunningStats(NamedTuple):
    """Running mean/variance over every step seen (parallel Welford, as in SB3's RunningMeanStd)."""

    count: tf.Tensor  # [] float32, number of steps seen
    mean: tf.Tensor  # [] float32
    var: tf.Tensor  # [] float32, population variance


@reports("clip_fraction", "approx_kl", "policy_loss")
class RatioState(NamedTuple):
    """Last update's probability-ratio statistics of ``clip_ratio`` (reported as metrics)."""

    clip_fraction: tf.Tensor  # [] fraction of steps with |r_t - 1| > epsilon
    approx_kl: tf.Tensor  # [] mean((r_t - 1) - log r_t), an estimate of KL(behaviour || current)
    policy_loss: tf.Tensor  # [] -mean(min(r_t A_t, clip(r_t) A_t)): the objective, as SB3 reports


def _constant(value: float):
    def scale(norms, state, *, num_steps, **ctx):
        return tf.constant(value, tf.float32), state

    return scale


def identity() -> StepScale:
    """Leaves gradients unchanged."""

    def update(grads, state, **ctx):
        return list(grads), state

    return StepScale(empty_init, update, name="identity", scale=_constant(1.0))


def scale(factor: float | str, *, invert: bool = False) -> StepScale:
    """Multiplies gradients by ``factor`` (per-step or aggregated): a number, or the name of a
    context key holding a scalar (e.g. ``"learning_rate"``, which the agents put there each
    update); ``invert`` divides by it instead."""
    who = f"scale({factor!r})" if not invert else f"scale(1/{factor!r})"

    def value(ctx, dtype):
        f = context_value(ctx, factor, who) if isinstance(factor, str) else factor
        f = tf.cast(f, dtype)
        return 1.0 / f if invert else f

    def update(grads, state, **ctx):
        return [g * value(ctx, g.dtype) for g in grads], state

    def factors(norms, state, *, num_steps, **ctx):
        return tf.fill([num_steps], value(ctx, tf.float32)), state

    if isinstance(factor, str) or invert:
        return StepScale(empty_init, update, name=who, scale=factors)
    return StepScale(empty_init, update, name=f"scale({factor})", scale=_constant(factor))


def check_ddof(ddof: int, who: str) -> int:
    """``ddof`` as an int, or a ValueError naming ``who`` unless it is 0 or 1."""
    if ddof not in (0, 1) or isinstance(ddof, bool):
        raise ValueError(f"{who}: ddof must be 0 (population std) or 1 (sample std); got {ddof!r}.")
    return int(ddof)


def standardized(w: tf.Tensor, eps: float = 1e-8, ddof: int = 1) -> tf.Tensor:
    """``[T]`` weights shifted to mean 0 and divided by their std over the batch plus ``eps``.

    ``(w - mean(w)) / (std(w) + eps)``, Stable-Baselines3's advantage normalisation (PPO, A2C,
    sb3-contrib's TRPO) and CleanRL's: the std is the sample one, ``sqrt(sum (w - mean)^2 /
    (T - 1))`` (``ddof=1``, torch's ``.std()``), and ``eps`` is added to the std, not the
    variance. ``ddof=0`` divides by ``T`` instead (numpy's default, Spinning Up's), which makes
    the result ``sqrt(T / (T - 1))`` times larger: 0.79% at ``T = 64``. A single step
    standardises to 0 (its deviation from the mean), with either ``ddof``.
    """
    ddof = check_ddof(ddof, "standardized")
    mean = tf.reduce_mean(w)
    centred = w - mean  # [T]
    n = tf.cast(tf.size(w), w.dtype)
    # [] the variance as one sum over one divisor: (n - ddof), at least 1 (T = 1 keeps it 0).
    var = tf.reduce_sum(tf.square(centred)) / tf.maximum(n - float(ddof), 1.0)
    return centred / (tf.sqrt(var) + eps)


def weight_by(key: str, standardize: bool = False, eps: float = 1e-8, ddof: int = 1
              ) -> StepScale:
    """Weights step ``t``'s gradient by ``context[key][t]`` (e.g. returns or advantages).

    With ``standardize=True`` the weights are first standardised over the batch,
    ``(w - mean) / (std + eps)`` with the sample std (``ddof=1``, as Stable-Baselines3) or the
    population one (``ddof=0``); see :func:`standardized`.
    """
    who = f"weight_by({key!r})"
    ddof = check_ddof(ddof, who)

    def weights(norms, state, *, num_steps, **ctx):
        w = context_value(ctx, key, who)  # [T]
        return (standardized(w, eps, ddof) if standardize else w), state

    return per_step_scale(weights, name=who)


def weight_by_running(key: str, center: bool = True, eps: float = 1e-8) -> StepScale:
    """Weights steps by ``context[key]`` normalised with running statistics (stateful).

    The state holds the count, mean and variance of every value of ``context[key]`` seen so far,
    updated with this batch first (as SB3's ``VecNormalize`` does for returns). The weight is
    ``(x - mean) / sqrt(var + eps)``, or ``x / sqrt(var + eps)`` with ``center=False``.
    """
    who = f"weight_by_running({key!r})"

    def init(variables):
        del variables
        return RunningStats(tf.constant(0.0), tf.constant(0.0), tf.constant(1.0))

    def weights(norms, state, *, num_steps, **ctx):
        x = context_value(ctx, key, who)  # [T]
        n = tf.cast(tf.size(x), tf.float32)
        b_mean, b_var = tf.nn.moments(x, axes=[0])
        total = state.count + n
        delta = b_mean - state.mean
        mean = state.mean + delta * n / total
        m2 = state.var * state.count + b_var * n + tf.square(delta) * state.count * n / total
        new = RunningStats(total, mean, m2 / total)
        centred = x - new.mean if center else x
        return centred / tf.sqrt(new.var + eps), new

    return per_step_scale(weights, init, name=who)


def scale_steps(fn: Callable[..., tf.Tensor], needs_norms: bool = False,
                name: str | None = None) -> StepScale:
    """A user's stateless per-step reweighting that the engine can run without per-step vectors.

    ``fn(**context)`` (or ``fn(norms, **context)`` with ``needs_norms=True``) returns a ``[T]``
    weight per step, or a scalar. Prefer this to ``stateless`` when the transform only rescales
    steps: it is exact and costs one backward pass instead of a jacobian. For a stateful one,
    see :func:`pgrad.per_step_scale`.
    """
    who = name or str(getattr(fn, "__name__", "scale_steps"))

    def weights(norms, state, *, num_steps, **ctx):
        out = fn(norms, **ctx) if needs_norms else fn(**ctx)
        return tf.cast(out, tf.float32), state

    return per_step_scale(weights, needs_norms=needs_norms, name=who)


def clip_per_step(max_norm: float) -> StepScale:
    """Scales each step's gradient down so its global norm (over all variables) is <= max_norm.

    Reports the fraction of steps it scaled down as ``clip_fraction`` in its state.
    """

    def init(variables):
        del variables
        return ClipState(tf.constant(0.0))

    def factors(norms, state, *, num_steps, **ctx):
        limit = tf.constant(max_norm, norms.dtype)
        factor = limit / tf.maximum(norms, limit)  # exactly 1 where norm <= max_norm
        return factor, ClipState(tf.reduce_mean(tf.cast(norms > limit, tf.float32)))

    return per_step_scale(factors, init, needs_norms=True, name=f"clip_per_step({max_norm})")


def clip_by_global_norm(max_norm: float) -> StepScale:
    """Scales all gradients by one factor so their global norm is <= max_norm.

    Before aggregation the norm is taken over every step of every variable.
    """

    def factor(norm):
        limit = tf.constant(max_norm, norm.dtype)
        return limit / tf.maximum(norm, limit)

    def update(grads, state, **ctx):
        f = factor(global_norm(grads))
        return [g * tf.cast(f, g.dtype) for g in grads], state

    def from_norms(norms, state, *, num_steps, **ctx):
        return factor(tf.sqrt(tf.reduce_sum(tf.square(norms)))), state

    return StepScale(empty_init, update, name=f"clip_by_global_norm({max_norm})",
                     scale=from_norms, needs_norms=True)


def clip_ratio(
    epsilon: float | str,
    *,
    key: str = "advantages",
    behaviour_key: str = "behaviour_log_probs",
) -> StepScale:
    """PPO's clipped surrogate as a per-step scale (Schulman et al., 2017).

    The gradient of ``min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t)`` with
    ``r_t = exp(log pi_t - log pi_behaviour_t)`` is ``A_t r_t grad log pi_t`` where the unclipped
    term is the smaller one, else 0. So step ``t`` is scaled by ``A_t r_t 1[not clipped]``: the
    engine runs it on the fused path, from the current log-probabilities of its own forward pass
    (``context["log_probs"]``). Follow it with ``mean_steps()`` for PPO's mean surrogate.

    Args:
      epsilon: the clip range, or the name of a context key holding it (a schedule the agent
        updates, e.g. ``"clip_range"``).
      key: context key of the advantages ``A_t``.
      behaviour_key: context key of the behaviour policy's log-probabilities.

    Its :class:`RatioState` reports ``clip_fraction`` (``|r_t - 1| > eps``, as Stable-Baselines3),
    ``approx_kl`` (``mean((r_t - 1) - log r_t)``) and ``policy_loss`` (PPO's clipped surrogate
    loss, ``-mean(min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t))``), computed from the same ratio
    (the agents report them and stop early on ``approx_kl`` without computing them again).
    """
    who = "clip_ratio"
    if not isinstance(epsilon, str) and not epsilon > 0:
        raise ValueError(f"{who}: epsilon must be > 0; got {epsilon}.")

    def init(variables):
        del variables
        return RatioState(tf.constant(0.0), tf.constant(0.0), tf.constant(0.0))

    def factors(norms, state, *, num_steps, **ctx):
        adv = context_value(ctx, key, who)  # [T]
        log_ratio = context_value(ctx, "log_probs", who) - context_value(ctx, behaviour_key, who)
        ratio = tf.exp(log_ratio)  # [T]
        eps = context_value(ctx, epsilon, who) if isinstance(epsilon, str) else epsilon
        unclipped = ratio * adv
        clipped = tf.clip_by_value(ratio, 1.0 - eps, 1.0 + eps) * adv
        # tf.minimum sends the gradient to its first argument on ties: the same choice here.
        active = tf.cast(unclipped <= clipped, tf.float32)
        stats = RatioState(tf.reduce_mean(tf.cast(tf.abs(ratio - 1.0) > eps, tf.float32)),
                           tf.reduce_mean(ratio - 1.0 - log_ratio),
                           -tf.reduce_mean(tf.minimum(unclipped, clipped)))
        return adv * ratio * active, stats

    return per_step_scale(factors, init, name=who)


def _reduce_steps(reduce):
    def update(grads, state, **ctx):
        if grads and grads[0].shape.rank == 0:
            raise TransformError("aggregation needs per-step gradients; it got aggregated ones.")
        return [reduce(g, axis=0) for g in grads], state

    return update


def sum_steps() -> StepScale:
    """Aggregates per-step gradients by summing over the step axis."""
    return StepScale(empty_init, _reduce_steps(tf.reduce_sum), name="sum_steps",
                     step_axis="aggregates", scale=_constant(1.0))


def mean_steps() -> StepScale:
    """Aggregates per-step gradients by averaging over the step axis."""

    def inverse_count(norms, state, *, num_steps, **ctx):
        return 1.0 / tf.cast(num_steps, tf.float32), state

    return StepScale(empty_init, _reduce_steps(tf.reduce_mean), name="mean_steps",
                     step_axis="aggregates", scale=inverse_count)


def stateless(fn: Callable[..., Sequence[tf.Tensor]], name: str | None = None) -> GradientTransform:
    """Wraps a plain ``fn(grads, **context) -> grads`` as a transform with empty state.

    Placed before aggregation, ``fn`` sees the full per-step gradients (the engine materialises
    them); after aggregation it sees the aggregated ones. Use ``scale_steps`` for a per-step
    reweighting that need not materialise anything.
    """
    who = name or str(getattr(fn, "__name__", "stateless"))

    def update(grads, state, **ctx):
        return list(fn(list(grads), **ctx)), state

    return GradientTransform(empty_init, update, name=who)


def from_function(fn: Callable[..., Sequence[tf.Tensor]], name: str | None = None,
                  aggregate: Callable[[tf.Tensor], tf.Tensor] | None = None) -> GradientTransform:
    """A plain ``fn(grads, **context)`` over per-step gradients that also aggregates.

    ``fn`` sees per-step gradients ``[T, *shape]``. If it returns per-step gradients, they are
    then averaged over the steps (``aggregate``, default ``tf.reduce_mean(g, 0)``); if it returns
    already aggregated ones (``[*shape]``: it computed the final gradient itself), they are used
    as they are. Decided by shape, per call. This is what ``--transform module:fn`` builds from
    a plain function.
    """
    who = name or str(getattr(fn, "__name__", "from_function"))
    reduce = aggregate or (lambda g: tf.reduce_mean(g, axis=0))

    def update(grads, state, **ctx):
        grads = list(grads)
        out = fn(grads, **ctx)
        if isinstance(out, tf.Tensor) or not isinstance(out, (list, tuple)):
            raise TransformError(f"transform {who!r} returned {type(out).__name__}; expected a "
                                 f"list of {len(grads)} gradients.")
        if len(out) != len(grads):
            raise TransformError(f"transform {who!r} returned {len(out)} gradients; expected "
                                 f"{len(grads)} (one per variable).")
        result = []
        for i, (o, g) in enumerate(zip(out, grads)):
            o = tf.convert_to_tensor(o)
            if o.shape.rank == g.shape.rank - 1 and o.shape.is_compatible_with(g.shape[1:]):
                result.append(o)  # fn aggregated the steps itself
            elif o.shape.is_compatible_with(g.shape):
                result.append(reduce(o))
            else:
                raise TransformError(
                    f"transform {who!r} returned gradient {i} with shape {shape_str(o.shape)}; "
                    f"expected {shape_str(g.shape)} (per step) or {shape_str(g.shape[1:])} "
                    "(aggregated).")
        return result, state

    return GradientTransform(empty_init, update, name=who, step_axis="aggregates")


__all__ = [
    "ClipState", "RatioState", "RunningStats", "clip_by_global_norm", "clip_per_step",
    "clip_ratio", "from_function", "identity", "mean_steps", "scale", "scale_steps",
    "standardized", "stateless", "sum_steps", "weight_by", "weight_by_running",
]
