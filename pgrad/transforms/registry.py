"""Transform chains described by data, so a model that uses one can be saved and re-created.

A *spec* is a list of items, each a registered name or a ``(name, kwargs)`` pair::

    [("clip_per_step", {"max_norm": 1.0}), "mean_steps"]

It is JSON-friendly (tuples come back as lists; both are accepted), so it goes into a Keras
model's config and a ``.keras`` file. ``transform_from_spec(spec)`` builds
``chain(factory(**kwargs), ...)``. Every pgrad built-in is registered under its function name;
register your own factories (a function returning a ``GradientTransform``) with
``register_transform`` -- the module that registers must be imported before loading, exactly as
Keras custom objects must.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pgrad.transforms import (
    builtins,
    counterfactual,
    importance,
    natural,
    sequence,
    sequence_terms,
)
from pgrad.transforms.base import GradientTransform
from pgrad.transforms.chain import chain

Factory = Callable[..., GradientTransform]
_REGISTRY: dict[str, Factory] = {}


def register_transform(name: str, factory: Factory | None = None, *, overwrite: bool = False
                       ) -> Factory | Callable[[Factory], Factory]:
    """Registers ``factory`` (``factory(**kwargs) -> GradientTransform``) under ``name``.

    Usable directly, ``register_transform("double", make_double)``, or as a decorator,
    ``@register_transform("double")``. Returns the factory.

    Raises:
      ValueError: if ``name`` is taken by a different factory and ``overwrite`` is False.
    """

    def add(f: Factory) -> Factory:
        if not callable(f):
            raise TypeError(f"register_transform({name!r}): factory must be callable.")
        if name in _REGISTRY and _REGISTRY[name] is not f and not overwrite:
            raise ValueError(
                f"register_transform: {name!r} is already registered; pass overwrite=True."
            )
        _REGISTRY[name] = f
        return f

    return add if factory is None else add(factory)


def registered_transforms() -> list[str]:
    """Names usable in a spec, sorted."""
    return sorted(_REGISTRY)


def normalize_spec(spec: Any) -> list[list]:
    """The canonical JSON form ``[[name, {kwargs}], ...]`` of a spec; validates it.

    Raises:
      ValueError: for a malformed item, an unregistered name or arguments JSON cannot hold.
    """
    if isinstance(spec, str):
        spec = [spec]
    if not isinstance(spec, (list, tuple)):
        raise ValueError(
            f"a transform spec is a list of names or (name, kwargs) pairs; got "
            f"{type(spec).__name__}."
        )
    out = []
    for item in spec:
        if isinstance(item, str):
            name, kwargs = item, {}
        elif (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str)
              and isinstance(item[1], dict)):
            name, kwargs = item[0], dict(item[1])
        else:
            raise ValueError(f"transform spec item {item!r} is not a name or (name, kwargs).")
        if name not in _REGISTRY:
            raise ValueError(
                f"transform {name!r} is not registered (known: {registered_transforms()}); "
                "register its factory with pgrad.register_transform (and import that module "
                "before loading a saved model)."
            )
        try:
            json.dumps(kwargs)
        except TypeError as err:
            raise ValueError(
                f"transform {name!r}: arguments must be JSON values ({err})."
            ) from None
        out.append([name, kwargs])
    return out


def transform_from_spec(spec: Any) -> GradientTransform:
    """Builds the chain a spec describes (see the module docstring)."""
    items = normalize_spec(spec)
    if not items:
        raise ValueError("a transform spec needs at least one item (e.g. ['mean_steps']).")
    parts = []
    for name, kwargs in items:
        try:
            parts.append(_REGISTRY[name](**kwargs))
        except TypeError as err:
            raise ValueError(f"transform {name!r} with arguments {kwargs}: {err}") from None
    return chain(*parts)


for _f in (
    builtins.identity,
    builtins.scale,
    builtins.weight_by,
    builtins.weight_by_running,
    builtins.clip_per_step,
    builtins.clip_by_global_norm,
    builtins.sum_steps,
    builtins.mean_steps,
    builtins.clip_ratio,
    counterfactual.counterfactual_advantage,
    importance.importance_weight,
    natural.natural_gradient,
    natural.trust_region,
    sequence_terms.clipped_ratio,
    sequence_terms.cispo_weight,
    sequence_terms.kl_k3,
    sequence.mean_over_sequences,
    sequence.mean_over_tokens,
    sequence.sum_over_max_length,
    sequence.mean_over_global_tokens,
    sequence.grpo_chain,
):
    register_transform(_f.__name__, _f)
