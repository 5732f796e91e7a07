"""Gradient transforms over per-step gradients, modelled on optax's ``GradientTransformation``.

A ``GradientTransform`` is ``(init, update)``:

* ``init(variables) -> state`` -- a NamedTuple of tensors (it goes into checkpoints);
* ``update(grads, state, **context) -> (grads, state)`` -- ``grads`` is a list aligned with the
  variables, per-step ``[T, *shape]`` until an aggregating transform (``sum_steps``,
  ``mean_steps``) removes the step axis, then ``[*shape]``. ``context`` carries per-step ``[T]``
  tensors by name (``returns``, ``advantages``, ``log_probs``, ``values``, ``rewards``, user keys);
  every transform ignores what it does not use.

Gradients are in the ascent direction (gradients of log-probabilities); ``apply_updates`` negates
them once for the minimising Keras optimizer.

Composition (``chain``) lives in :mod:`pgrad.compose`.

Besides ``update``, a transform whose per-step effect is to multiply each step's gradient by a
scalar carries ``step_scale(norms, state, *, num_steps, **context) -> (scale, state)`` where
``scale`` is ``[T]`` or a scalar and ``norms`` is the ``[T]`` global norm of each step's current
gradient (``None`` unless ``needs == "norms"``). The engine uses it to compute the chain without
materialising per-step gradients; ``update`` and ``step_scale`` share one code path, so both
routes agree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import tensorflow as tf

from pgrad.per_step import step_norms_squared


class GradientTransform(NamedTuple):
    """A pair of pure functions, plus what the engine needs to know to run it cheaply.

    Attributes:
      init: ``init(variables) -> state``.
      update: ``update(grads, state, **context) -> (grads, state)``.
      step_scale: per-step scalar form (see module docstring) or ``None`` if the transform needs
        the full per-step gradient vectors.
      needs: what the transform reads from per-step gradients: ``"scale"`` (nothing), ``"norms"``
        (their norms) or ``"full"`` (the vectors). A plain user function is ``"full"``.
      aggregates: reduces the step axis (``[T, *shape] -> [*shape]``).
      per_step_only: only meaningful before aggregation (e.g. ``weight_by``).
      name: used in error messages and metric names.
      children: the flattened transforms of a ``chain``.
    """

    init: Callable[[Sequence[tf.Variable]], Any]
    update: Callable[..., tuple[list[tf.Tensor], Any]]
    step_scale: Callable[..., tuple[tf.Tensor, Any]] | None = None
    needs: str = "full"
    aggregates: bool = False
    per_step_only: bool = False
    name: str = "transform"
    children: tuple = ()


class EmptyState(NamedTuple):
    """State of a stateless transform."""


class ClipState(NamedTuple):
    """Last update's clipping statistics (reported as metrics)."""

    clip_fraction: tf.Tensor  # [] fraction of steps whose gradient was scaled down

    METRICS = ("clip_fraction",)


class RunningStats(NamedTuple):
    """Running mean/variance over every step seen (parallel Welford, as in SB3's RunningMeanStd)."""

    count: tf.Tensor  # [] float32, number of steps seen
    mean: tf.Tensor  # [] float32
    var: tf.Tensor  # [] float32, population variance

    METRICS = ("mean", "var")


class TransformError(ValueError):
    """A transform failed or returned gradients of the wrong shape or dtype."""


def _empty_init(variables):
    del variables
    return EmptyState()


# ---------------------------------------------------------------------------------------------
# Helpers shared by the built-ins.
# ---------------------------------------------------------------------------------------------


def _context_value(ctx: dict, key: str, who: str) -> tf.Tensor:
    if key not in ctx or ctx[key] is None:
        have = sorted(k for k, v in ctx.items() if v is not None and not k.startswith("_"))
        raise TransformError(f"{who}: the context has no {key!r}; it has {have}.")
    return tf.cast(ctx[key], tf.float32)


def _scale_rows(grads: Sequence[tf.Tensor], scale: tf.Tensor, who: str) -> list[tf.Tensor]:
    """Multiplies row ``t`` of each ``[T, ...]`` gradient by ``scale[t]`` (or all by a scalar)."""
    scale = tf.convert_to_tensor(scale)
    out = []
    for g in grads:
        s = tf.cast(scale, g.dtype)
        if s.shape.rank == 1:
            if g.shape.rank is not None and g.shape.rank == 0:
                raise TransformError(f"{who} needs per-step gradients; it got aggregated ones.")
            t_g, t_s = g.shape[0], s.shape[0]
            if t_g is not None and t_s is not None and t_g != t_s:
                raise TransformError(
                    f"{who}: per-step weights have {t_s} steps but the gradients have {t_g}."
                )
            s = tf.reshape(s, [-1] + [1] * (g.shape.rank - 1))
        out.append(g * s)
    return out


def _from_step_scale(step_scale: Callable, who: str) -> Callable:
    """``update`` for a transform defined by its per-step scalar form."""

    def update(grads, state, **ctx):
        norms = tf.sqrt(step_norms_squared(grads))
        num_steps = tf.shape(grads[0])[0]
        scale, state = step_scale(norms, state, num_steps=num_steps, **ctx)
        return _scale_rows(grads, scale, who), state

    return update


def global_norm(grads: Sequence[tf.Tensor]) -> tf.Tensor:
    """Global L2 norm over every element of ``grads``."""
    return tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(tf.cast(g, tf.float32))) for g in grads]))


# ---------------------------------------------------------------------------------------------
# Built-ins.
# ---------------------------------------------------------------------------------------------


def identity() -> GradientTransform:
    """Leaves gradients unchanged."""

    def update(grads, state, **ctx):
        return list(grads), state

    def step_scale(norms, state, *, num_steps, **ctx):
        return tf.constant(1.0), state

    return GradientTransform(_empty_init, update, step_scale, "scale", name="identity")


def scale(factor: float) -> GradientTransform:
    """Multiplies gradients by ``factor`` (per-step or aggregated)."""

    def update(grads, state, **ctx):
        return [g * tf.cast(factor, g.dtype) for g in grads], state

    def step_scale(norms, state, *, num_steps, **ctx):
        return tf.constant(factor, tf.float32), state

    return GradientTransform(_empty_init, update, step_scale, "scale", name=f"scale({factor})")


def weight_by(key: str, standardize: bool = False, eps: float = 1e-8) -> GradientTransform:
    """Weights step ``t``'s gradient by ``context[key][t]`` (e.g. returns or advantages).

    With ``standardize=True`` the weights are first shifted and scaled to mean 0, std 1 over the
    batch (``eps`` guards a constant batch).
    """
    who = f"weight_by({key!r})"

    def weights(ctx):
        w = _context_value(ctx, key, who)  # [T]
        if standardize:
            mean, var = tf.nn.moments(w, axes=[0])
            w = (w - mean) / (tf.sqrt(var) + eps)
        return w

    def step_scale(norms, state, *, num_steps, **ctx):
        return weights(ctx), state

    return GradientTransform(
        _empty_init, _from_step_scale(step_scale, who), step_scale, "scale",
        per_step_only=True, name=who,
    )


def weight_by_running(key: str, center: bool = True, eps: float = 1e-8) -> GradientTransform:
    """Weights steps by ``context[key]`` normalised with running statistics (stateful).

    The state holds the count, mean and variance of every value of ``context[key]`` seen so far,
    updated with this batch first (as SB3's ``VecNormalize`` does for returns). The weight is
    ``(x - mean) / sqrt(var + eps)``, or ``x / sqrt(var + eps)`` with ``center=False``.
    """
    who = f"weight_by_running({key!r})"

    def init(variables):
        del variables
        return RunningStats(tf.constant(0.0), tf.constant(0.0), tf.constant(1.0))

    def step_scale(norms, state, *, num_steps, **ctx):
        x = _context_value(ctx, key, who)  # [T]
        n = tf.cast(tf.size(x), tf.float32)
        b_mean, b_var = tf.nn.moments(x, axes=[0])
        total = state.count + n
        delta = b_mean - state.mean
        mean = state.mean + delta * n / total
        m2 = state.var * state.count + b_var * n + tf.square(delta) * state.count * n / total
        new = RunningStats(total, mean, m2 / total)
        centred = x - new.mean if center else x
        return centred / tf.sqrt(new.var + eps), new

    return GradientTransform(
        init, _from_step_scale(step_scale, who), step_scale, "scale", per_step_only=True, name=who,
    )


def scale_steps(fn: Callable[..., tf.Tensor], needs_norms: bool = False,
                name: str | None = None) -> GradientTransform:
    """A user's per-step reweighting that the engine can run without per-step vectors.

    ``fn(**context)`` (or ``fn(norms, **context)`` with ``needs_norms=True``) returns a ``[T]``
    weight per step, or a scalar. Prefer this to ``stateless`` when the transform only rescales
    steps: it is exact and costs one backward pass instead of a jacobian.
    """
    who = name or getattr(fn, "__name__", "scale_steps")

    def step_scale(norms, state, *, num_steps, **ctx):
        out = fn(norms, **ctx) if needs_norms else fn(**ctx)
        return tf.cast(out, tf.float32), state

    return GradientTransform(
        _empty_init, _from_step_scale(step_scale, who), step_scale,
        "norms" if needs_norms else "scale", per_step_only=True, name=who,
    )


def clip_per_step(max_norm: float) -> GradientTransform:
    """Scales each step's gradient down so its global norm (over all variables) is <= max_norm.

    Reports the fraction of steps it scaled down as ``clip_fraction`` in its state.
    """
    who = f"clip_per_step({max_norm})"

    def init(variables):
        del variables
        return ClipState(tf.constant(0.0))

    def step_scale(norms, state, *, num_steps, **ctx):
        limit = tf.constant(max_norm, norms.dtype)
        factor = limit / tf.maximum(norms, limit)  # exactly 1 where norm <= max_norm
        return factor, ClipState(tf.reduce_mean(tf.cast(norms > limit, tf.float32)))

    return GradientTransform(
        init, _from_step_scale(step_scale, who), step_scale, "norms", per_step_only=True, name=who,
    )


def clip_by_global_norm(max_norm: float) -> GradientTransform:
    """Scales all gradients by one factor so their global norm is <= max_norm.

    Before aggregation the norm is taken over every step of every variable.
    """

    def factor(norm):
        limit = tf.constant(max_norm, norm.dtype)
        return limit / tf.maximum(norm, limit)

    def update(grads, state, **ctx):
        f = factor(global_norm(grads))
        return [g * tf.cast(f, g.dtype) for g in grads], state

    def step_scale(norms, state, *, num_steps, **ctx):
        return factor(tf.sqrt(tf.reduce_sum(tf.square(norms)))), state

    return GradientTransform(
        _empty_init, update, step_scale, "norms", name=f"clip_by_global_norm({max_norm})"
    )


def sum_steps() -> GradientTransform:
    """Aggregates per-step gradients by summing over the step axis."""

    def update(grads, state, **ctx):
        return [tf.reduce_sum(g, axis=0) for g in grads], state

    def step_scale(norms, state, *, num_steps, **ctx):
        return tf.constant(1.0), state

    return GradientTransform(
        _empty_init, update, step_scale, "scale", aggregates=True, per_step_only=True,
        name="sum_steps",
    )


def mean_steps() -> GradientTransform:
    """Aggregates per-step gradients by averaging over the step axis."""

    def update(grads, state, **ctx):
        return [tf.reduce_mean(g, axis=0) for g in grads], state

    def step_scale(norms, state, *, num_steps, **ctx):
        return 1.0 / tf.cast(num_steps, tf.float32), state

    return GradientTransform(
        _empty_init, update, step_scale, "scale", aggregates=True, per_step_only=True,
        name="mean_steps",
    )


def stateless(fn: Callable[..., Sequence[tf.Tensor]], name: str | None = None) -> GradientTransform:
    """Wraps a plain ``fn(grads, **context) -> grads`` as a transform with empty state.

    Placed before aggregation, ``fn`` sees the full per-step gradients (the engine materialises
    them); after aggregation it sees the aggregated ones. Use ``scale_steps`` for a per-step
    reweighting that need not materialise anything.
    """
    who = name or getattr(fn, "__name__", "stateless")

    def update(grads, state, **ctx):
        return list(fn(list(grads), **ctx)), state

    return GradientTransform(_empty_init, update, None, "full", name=who)
