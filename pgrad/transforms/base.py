"""The transform protocol: ``GradientTransform(init, update)`` and its per-step-scale subtype.

A transform is a pair of pure functions (modelled on optax's ``GradientTransformation``):

* ``init(variables) -> state`` -- a NamedTuple of tensors (it goes into checkpoints);
* ``update(grads, state, **context) -> (grads, state)`` -- ``grads`` is a list aligned with the
  variables: per-step ``[T, *shape]`` until an aggregating transform (``sum_steps``,
  ``mean_steps``) removes the step axis, then ``[*shape]``. ``context`` carries per-step ``[T]``
  tensors by name (``advantages``, ``returns``, ``log_probs``, ``values``, ``rewards``, user keys);
  every transform ignores what it does not use.

Gradients are in the ascent direction (gradients of log-probabilities); ``apply_updates`` negates
them once for the minimising Keras optimizer.

Extra capability is a subtype, detected with ``isinstance`` (optax's way), never a flag that can
disagree with the functions: a :class:`StepScale` multiplies step ``t``'s gradient by a scalar
``c_t`` computed from the context (and, if it says so, the per-step gradient norms). The engine
runs a chain of such transforms without materialising ``[T, params]``: see
:meth:`GradientTransform.fused_form` and :mod:`pgrad.engine`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import tensorflow as tf

from pgrad.core.per_step import step_norms_squared

#: What a transform does with the step axis.
STEP_AXES = ("any", "per_step", "aggregates")

_StateT = TypeVar("_StateT", bound=type)


def reports(*fields: str) -> Callable[[_StateT], _StateT]:
    """Class decorator: the state's ``fields`` that :meth:`GradientTransform.metrics` reports.

    The same as a ``METRICS = (...)`` class attribute in the NamedTuple's body (which works too,
    but type checkers read it as a field)::

        @reports("clip_fraction")
        class ClipState(NamedTuple):
            clip_fraction: tf.Tensor  # []
    """

    def mark(cls: _StateT) -> _StateT:
        setattr(cls, "METRICS", tuple(fields))  # noqa: B010 (not a field for type checkers)
        return cls

    return mark


def shape_str(shape: Sequence[int | None] | tf.TensorShape) -> str:
    """``[80, ?, 64]``: a shape as the transform errors print it."""
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


class TransformError(ValueError):
    """A transform failed or returned gradients of the wrong shape or dtype."""


class EmptyState(NamedTuple):
    """State of a stateless transform."""


def empty_init(variables: Any) -> EmptyState:
    """``init`` of a stateless transform."""
    del variables
    return EmptyState()


class FusedForm(NamedTuple):
    """How to run a transform from per-step scalars alone (see :mod:`pgrad.engine`).

    Attributes:
      needs_norms: ``run`` reads the ``[T]`` global norms of the per-step gradients.
      run: ``run(weighted_sum, norms, state, *, num_steps, **context) -> (grads, state)`` where
        ``weighted_sum(coeff)`` returns ``sum_t coeff[t] * grad_t`` for a ``[T]`` ``coeff`` (one
        backward pass) and ``norms`` is ``[T]`` or ``None``.
      weighted_sum_only: ``run`` returns ``weighted_sum(coeff)`` itself, untouched (nothing
        after the aggregation), so the engine may take that sum from a backward pass it shares
        with another loss (:func:`pgrad.engine.run`'s ``fold_aux``).
    """

    needs_norms: bool
    run: Callable[..., tuple[list[tf.Tensor], Any]]
    weighted_sum_only: bool = False


@dataclass(frozen=True)
class GradientTransform:
    """A pair of pure functions over per-step (or aggregated) gradients.

    Attributes:
      init: ``init(variables) -> state``.
      update: ``update(grads, state, **context) -> (grads, state)``.
      name: used in error messages and metric names.
      step_axis: ``"per_step"`` (needs ``[T, *shape]`` gradients: only before aggregation),
        ``"aggregates"`` (``[T, *shape] -> [*shape]``) or ``"any"``.
    """

    init: Callable[[Sequence[Any]], Any]
    update: Callable[..., tuple[list[tf.Tensor], Any]]
    name: str = "transform"
    step_axis: str = "any"

    def __post_init__(self):
        if self.step_axis not in STEP_AXES:
            raise ValueError(f"step_axis must be one of {STEP_AXES}; got {self.step_axis!r}.")

    @property
    def aggregates(self) -> bool:
        """Whether this transform removes the step axis."""
        return self.step_axis == "aggregates"

    def fused_form(self) -> FusedForm | None:
        """How to run without per-step vectors, or ``None`` if the engine must materialise them."""
        return None

    def metrics(self, state: Any) -> dict[str, tf.Tensor]:
        """``{"<name>/<field>": value}`` for the fields the state's class lists in ``METRICS``."""
        return {f"{self.name}/{f}": getattr(state, f) for f in getattr(type(state), "METRICS", ())}


ScaleFn = Callable[..., tuple[tf.Tensor, Any]]


@dataclass(frozen=True, kw_only=True)
class StepScale(GradientTransform):
    """A transform that multiplies step ``t``'s gradient by a scalar ``c_t``.

    Attributes:
      scale: ``scale(norms, state, *, num_steps, **context) -> (c, state)``; ``c`` is ``[T]`` or a
        scalar; ``norms`` is the ``[T]`` global norm of each step's incoming gradient, or
        ``None`` unless ``needs_norms``.
      needs_norms: ``scale`` reads ``norms``.

    ``update`` is derived from ``scale`` (pass ``update=None`` to the constructor helpers below),
    so the engine's fused route and the materialised route share one code path. An aggregating
    StepScale (``mean_steps``) multiplies by ``c_t`` and sums over steps.
    """

    scale: ScaleFn
    needs_norms: bool = False

    def fused_form(self) -> FusedForm | None:
        if not self.aggregates:
            return None  # keeps the step axis: only a chain ending in an aggregation can fuse
        scale_fn = self.scale

        def run(weighted_sum, norms, state, *, num_steps, **ctx):
            c, state = scale_fn(norms, state, num_steps=num_steps, **ctx)
            coeff = tf.broadcast_to(tf.cast(c, tf.float32), tf.reshape(num_steps, [1]))
            return weighted_sum(tf.stop_gradient(coeff)), state

        return FusedForm(self.needs_norms, run, weighted_sum_only=True)


def step_scale_update(scale_fn: ScaleFn, who: str, needs_norms: bool,
                      aggregates: bool = False) -> Callable:
    """``update`` of a transform defined by its per-step scalar form."""

    def update(grads, state, **ctx):
        grads = list(grads)
        if grads and grads[0].shape.rank == 0:
            raise TransformError(f"{who} needs per-step gradients; it got aggregated ones.")
        norms = tf.sqrt(step_norms_squared(grads)) if needs_norms else None
        num_steps = tf.shape(grads[0])[0]
        c, state = scale_fn(norms, state, num_steps=num_steps, **ctx)
        out = scale_rows(grads, c, who)
        if aggregates:
            out = [tf.reduce_sum(g, axis=0) for g in out]
        return out, state

    return update


def per_step_scale(
    scale: ScaleFn,
    init: Callable[[Sequence[Any]], Any] = empty_init,
    *,
    needs_norms: bool = False,
    aggregates: bool = False,
    name: str | None = None,
) -> StepScale:
    """Builds a (possibly stateful) per-step reweighting that the engine runs without ``[T, P]``.

    Args:
      scale: ``scale(norms, state, *, num_steps, **context) -> (c, new_state)`` with ``c``
        ``[T]`` or a scalar (see :class:`StepScale`).
      init: ``init(variables) -> state`` (a NamedTuple of tensors); default: no state.
      needs_norms: ``scale`` reads the per-step gradient norms.
      aggregates: also sum over the step axis after scaling (an aggregation such as
        ``mean_steps`` is ``c_t = 1 / T`` with ``aggregates=True``).
      name: for errors and metric names (default: ``scale.__name__``).

    Example, a running-normalised weighting (the built-in ``weight_by_running`` is one)::

        def init(variables):
            return RunningStats(tf.constant(0.0), tf.constant(0.0), tf.constant(1.0))

        def scale(norms, state, *, num_steps, returns, **ctx):
            new = ...  # update the statistics with this batch
            return (returns - new.mean) / tf.sqrt(new.var + 1e-8), new

        pgrad.per_step_scale(scale, init, name="running_returns")
    """
    who = name or str(getattr(scale, "__name__", "per_step_scale"))
    return StepScale(
        init, step_scale_update(scale, who, needs_norms, aggregates), name=who,
        step_axis="aggregates" if aggregates else "per_step", scale=scale,
        needs_norms=needs_norms,
    )


# ---------------------------------------------------------------------------------------------
# Helpers shared by the built-ins (public: user transforms may use them too).
# ---------------------------------------------------------------------------------------------


def context_value(ctx: dict, key: str, who: str) -> tf.Tensor:
    """``ctx[key]`` as float32, or a :class:`TransformError` naming ``who`` and the keys present."""
    if key not in ctx or ctx[key] is None:
        have = sorted(k for k, v in ctx.items() if v is not None and not k.startswith("_"))
        raise TransformError(f"{who}: the context has no {key!r}; it has {have}.")
    return tf.cast(ctx[key], tf.float32)


def scale_rows(grads: Sequence[tf.Tensor], scale: tf.Tensor, who: str) -> list[tf.Tensor]:
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


def global_norm(grads: Sequence[tf.Tensor]) -> tf.Tensor:
    """Global L2 norm over every element of ``grads``."""
    return tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(tf.cast(g, tf.float32))) for g in grads]))
