"""Composing transforms: ``chain``, and the checks that name a misbehaving transform.

``chain(*transforms)`` flattens nested chains into one tuple of leaves whose state is the tuple
of the leaves' states (as optax's ``chain``). ``run_updates`` is the loop both ``chain.update``
and the engine use: it runs each leaf and checks that it returned one gradient per variable
with the expected shape and dtype, so an error names the transform and both shapes.
"""

from __future__ import annotations

import tensorflow as tf

from pgrad.transforms import GradientTransform, TransformError


def flatten(transform: GradientTransform) -> tuple[GradientTransform, ...]:
    """The leaf transforms of a (possibly nested) chain."""
    return transform.children if transform.children else (transform,)


def _shape_str(shape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _compatible(a: tf.TensorShape, b: tf.TensorShape) -> bool:
    return a.rank is None or b.rank is None or a.is_compatible_with(b)


def check_outputs(transform: GradientTransform, position: str, before, after) -> list[tf.Tensor]:
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
        want = b.shape[1:] if transform.aggregates else b.shape
        if not _compatible(a.shape, want):
            raise TransformError(
                f"transform {transform.name!r}{position} returned gradient {i} with shape "
                f"{_shape_str(a.shape)}; expected {_shape_str(want)}."
            )
        if a.dtype != b.dtype:
            raise TransformError(
                f"transform {transform.name!r}{position} returned gradient {i} as {a.dtype.name}; "
                f"expected {b.dtype.name}."
            )
        out.append(a)
    return out


def run_updates(transforms, grads, states, ctx, offset: int = 0, total: int | None = None):
    """Runs ``update`` of each transform in turn, checking each output. Returns (grads, states)."""
    total = total or len(transforms)
    new_states = []
    for i, (t, s) in enumerate(zip(transforms, states)):
        position = f" (#{offset + i + 1} of {total} in the chain)" if total > 1 else ""
        try:
            out, s = t.update(grads, s, **ctx)
        except TransformError:
            raise
        except Exception as err:  # a user's transform: name it, keep the cause
            raise TransformError(
                f"transform {t.name!r}{position} raised {type(err).__name__}: {err}"
            ) from err
        grads = check_outputs(t, position, grads, out)
        new_states.append(s)
    return grads, tuple(new_states)


def chain(*transforms: GradientTransform, name: str = "chain") -> GradientTransform:
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
        if aggregated_by is not None and (t.aggregates or t.per_step_only):
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

    return GradientTransform(
        init, update, None, "full",
        aggregates=aggregated_by is not None,
        per_step_only=any(t.per_step_only for t in leaves_t),
        name=name, children=leaves_t,
    )


def state_metrics(transform: GradientTransform, state) -> dict[str, tf.Tensor]:
    """``{"<transform>/<field>": value}`` for state fields a transform reports as metrics."""
    leaves = flatten(transform)
    states = state if transform.children else (state,)
    out = {}
    for t, s in zip(leaves, states):
        for field in getattr(type(s), "METRICS", ()):
            out[f"{t.name}/{field}"] = getattr(s, field)
    return out
