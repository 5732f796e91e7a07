"""Composing transforms: ``chain``, and the checks that name a misbehaving transform.

``chain(*transforms)`` flattens nested chains into one tuple of leaves whose state is the tuple
of the leaves' states (as optax's ``chain``). ``run_updates`` runs each leaf's ``update`` and
checks that it returned one gradient per variable with the expected shape and dtype, so an error
names the transform, its position and both shapes.

A chain composes its own fused form (see :class:`~pgrad.transforms.base.FusedForm`): when every
leaf up to and including the first aggregation is a :class:`~pgrad.transforms.base.StepScale`,
their per-step scalars multiply into one coefficient per step (each reading the norms of the
gradient as the leaves before it left it), the engine forms the weighted sum once, and the
leaves after the aggregation run on the aggregated gradient.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from pgrad.transforms.base import (
    FusedForm,
    GradientTransform,
    StepScale,
    TransformError,
    shape_str,
)


def _compatible(a: tf.TensorShape, b: tf.TensorShape) -> bool:
    return a.rank is None or b.rank is None or a.is_compatible_with(b)


def check_outputs(transform: GradientTransform, position: str, before: Sequence[tf.Tensor],
                  after: Any) -> list[tf.Tensor]:
    """Checks that a transform kept one gradient per variable, with the right shapes and dtypes."""
    if isinstance(after, tf.Tensor) or not isinstance(after, (list, tuple)):
        raise TransformError(
            f"transform {transform.name!r}{position} returned {type(after).__name__}; "
            f"expected a list of {len(before)} gradients."
        )
    after = list(after)
    if len(after) != len(before):
        raise TransformError(
            f"transform {transform.name!r}{position} returned {len(after)} gradients; "
            f"expected {len(before)} (one per variable)."
        )
    out = []
    for i, (b, a) in enumerate(zip(before, after)):
        try:
            a = tf.convert_to_tensor(a)
        except (TypeError, ValueError) as err:
            raise TransformError(
                f"transform {transform.name!r}{position} returned a non-tensor for gradient {i}: "
                f"{err}"
            ) from None
        want = b.shape[1:] if transform.aggregates and b.shape.rank else b.shape
        if not _compatible(a.shape, want):
            raise TransformError(
                f"transform {transform.name!r}{position} returned gradient {i} with shape "
                f"{shape_str(a.shape)}; expected {shape_str(want)}."
            )
        if a.dtype != b.dtype:
            raise TransformError(
                f"transform {transform.name!r}{position} returned gradient {i} as {a.dtype.name}; "
                f"expected {b.dtype.name}."
            )
        out.append(a)
    return out


def _position(i: int, total: int) -> str:
    return f" (#{i + 1} of {total} in the chain)" if total > 1 else ""


def _named(transform: GradientTransform, position: str, fn, *args, **kwargs):
    """Calls ``fn``; an error that is not already a TransformError gets the transform's name."""
    try:
        return fn(*args, **kwargs)
    except TransformError:
        raise
    except Exception as err:  # a user's transform: name it, keep the cause
        raise TransformError(
            f"transform {transform.name!r}{position} raised {type(err).__name__}: {err}"
        ) from err


def run_updates(transforms: Sequence[GradientTransform], grads: Sequence[tf.Tensor],
                states: Sequence[Any], ctx: dict[str, Any], offset: int = 0,
                total: int | None = None) -> tuple[Sequence[tf.Tensor], tuple[Any, ...]]:
    """Runs ``update`` of each transform in turn, checking each output. Returns (grads, states)."""
    total = total or len(transforms)
    new_states = []
    for i, (t, s) in enumerate(zip(transforms, states)):
        position = _position(offset + i, total)
        out, s = _named(t, position, t.update, grads, s, **ctx)
        grads = check_outputs(t, position, grads, out)
        new_states.append(s)
    return grads, tuple(new_states)


@dataclass(frozen=True, kw_only=True)
class Chain(GradientTransform):
    """What :func:`chain` returns: a transform whose state is the tuple of its leaves' states."""

    leaves: tuple[GradientTransform, ...]

    def fused_form(self) -> FusedForm | None:
        split = next((i for i, t in enumerate(self.leaves) if t.aggregates), None)
        if split is None or not all(isinstance(t, StepScale) for t in self.leaves[: split + 1]):
            return None
        # Every leaf up to the aggregation is a StepScale (checked above): filtering only narrows.
        pre = [t for t in self.leaves[: split + 1] if isinstance(t, StepScale)]
        post, total = self.leaves[split + 1:], len(self.leaves)

        def run(weighted_sum, norms, states, *, num_steps, **ctx):
            coeff = tf.constant(1.0)
            new_pre = []
            for i, (t, s) in enumerate(zip(pre, states)):
                current = None if norms is None else norms * tf.abs(coeff)
                c, s = _named(t, _position(i, total), t.scale, current, s, num_steps=num_steps,
                              **ctx)
                coeff = coeff * tf.cast(c, tf.float32)  # [T] or []
                new_pre.append(s)
            coeff = tf.broadcast_to(coeff, tf.reshape(num_steps, [1]))  # [T]
            grads = weighted_sum(tf.stop_gradient(coeff))
            grads, new_post = run_updates(post, grads, states[split + 1:], ctx, offset=split + 1,
                                          total=total)
            return grads, tuple(new_pre) + tuple(new_post)

        return FusedForm(any(t.needs_norms for t in pre), run, weighted_sum_only=not post)

    def metrics(self, state: Any) -> dict[str, tf.Tensor]:
        out: dict[str, tf.Tensor] = {}
        for t, s in zip(self.leaves, state):
            out.update(t.metrics(s))
        return out


def flatten(transform: GradientTransform) -> tuple[GradientTransform, ...]:
    """The leaf transforms of a (possibly nested) chain."""
    return transform.leaves if isinstance(transform, Chain) else (transform,)


def chain(*transforms: GradientTransform, name: str = "chain") -> Chain:
    """Composes transforms left to right; the state is the tuple of the leaves' states.

    Nested chains are flattened. Raises ``ValueError`` for an order that cannot work: two
    aggregations, or a per-step-only transform (``weight_by``, ``clip_per_step``) after one.
    """
    leaves: list[GradientTransform] = []
    for t in transforms:
        if not isinstance(t, GradientTransform):
            raise TypeError(
                f"chain() takes GradientTransforms; got {type(t).__name__}. "
                "Wrap a plain function with pgrad.stateless(fn)."
            )
        leaves.extend(flatten(t))
    aggregated_by = None
    for t in leaves:
        if aggregated_by is not None and t.step_axis != "any":
            raise ValueError(
                f"chain: {t.name!r} needs per-step gradients but comes after {aggregated_by!r}, "
                "which has already removed the step axis."
            )
        if t.aggregates:
            aggregated_by = t.name
    leaves_t = tuple(leaves)

    def init(variables):
        return tuple(t.init(variables) for t in leaves_t)

    def update(grads, state, **ctx):
        return run_updates(leaves_t, list(grads), state, ctx)

    if aggregated_by is not None:
        axis = "aggregates"
    elif any(t.step_axis == "per_step" for t in leaves_t):
        axis = "per_step"
    else:
        axis = "any"
    return Chain(init, update, name=name, step_axis=axis, leaves=leaves_t)


def state_metrics(transform: GradientTransform, state: Any) -> dict[str, tf.Tensor]:
    """``{"<transform>/<field>": value}`` for state fields a transform reports as metrics."""
    return transform.metrics(state)
