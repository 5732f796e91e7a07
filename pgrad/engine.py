"""Runs a transform chain over a per-step objective by the cheapest exact path.

The chain splits at its aggregation (``sum_steps`` / ``mean_steps``) into a per-step part and a
post part. Paths:

* ``"fused"`` -- every per-step transform (and the aggregation) only multiplies step ``t``'s
  gradient by a scalar ``c_t``. Then ``sum_t c_t * grad log pi_t = grad sum_t stop(c_t) log pi_t``:
  one backward pass, no ``[T, params]`` tensor. Transforms that need per-step norms (clipping)
  get them from :func:`pgrad.per_step.norms_and_capture`: Dense layers' norms from the taps of
  one batched pass (:mod:`pgrad.taps`), other variables chunked. When every variable is tapped,
  the reweighted sum comes from the same pass (``x^T (c * delta)`` per layer); otherwise a
  second, surrogate backward pass forms it.
* ``"full"`` -- some per-step transform needs the per-step vectors (a user's function, natural
  gradient): materialise them with :func:`pgrad.per_step_grads` and run ``chain.update``.

Both paths call the same per-transform code, and tests check they agree to round-off.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from pgrad import per_step as per_step_lib
from pgrad.compose import check_outputs, flatten, run_updates, state_metrics
from pgrad.transforms import GradientTransform, TransformError, global_norm

PATHS = ("auto", "fused", "full")


def plan(chain: GradientTransform) -> str:
    """``"fused"`` if the chain's per-step part only rescales steps, else ``"full"``."""
    leaves = flatten(chain)
    for t in leaves:
        if t.step_scale is None:
            return "full"
        if t.aggregates:
            return "fused"
    return "full"  # no aggregation: materialise, and the shape check explains the mistake


def needs_norms(chain: GradientTransform) -> bool:
    """Whether the per-step part of the chain reads per-step gradient norms."""
    for t in flatten(chain):
        if t.needs == "norms":
            return True
        if t.aggregates:
            return False
    return False


def _check_log_probs(lp: tf.Tensor, num_steps) -> tf.Tensor:
    lp = tf.convert_to_tensor(lp)
    if lp.shape.rank != 1:
        raise ValueError(
            f"log_prob_fn must return a [T] tensor (one log-probability per step); it returned "
            f"shape {lp.shape.as_list() if lp.shape.rank is not None else 'unknown'}."
        )
    return lp


def _check_final(chain: GradientTransform, grads, variables) -> None:
    for g, v in zip(grads, variables):
        if g.shape.rank is not None and not g.shape.is_compatible_with(v.shape):
            hint = ""
            if g.shape.rank == len(v.shape) + 1:
                hint = " The chain keeps the step axis: end it with mean_steps() or sum_steps()."
            raise TransformError(
                f"chain {chain.name!r} returned a gradient of shape {g.shape.as_list()} for "
                f"variable {getattr(v, 'path', None) or v.name!r} of shape {list(v.shape)}.{hint}"
            )


def _num_steps(inputs):
    first = tf.convert_to_tensor(tf.nest.flatten(inputs)[0])
    return first.shape[0] if first.shape[0] is not None else tf.shape(first)[0]


def policy_gradients(
    chain: GradientTransform,
    state: Any,
    log_prob_fn: Callable[..., tf.Tensor],
    variables: Sequence[tf.Variable],
    inputs: Sequence[Any],
    context: dict[str, Any] | None = None,
    *,
    path: str = "auto",
    chunk_size: int | None = None,
    norms_fn: Callable[..., tf.Tensor] | None = None,
    per_step_fn: Callable[..., list[tf.Tensor]] | None = None,
    use_taps: bool = True,
) -> tuple[list[tf.Tensor], Any, dict[str, tf.Tensor]]:
    """Aggregated, transformed policy gradients (ascent direction) for one batch.

    Args:
      chain: the transform (usually a ``chain``) to run; it must aggregate the step axis.
      state: its state (from ``chain.init(variables)`` or the previous call).
      log_prob_fn: ``log_prob_fn(*inputs) -> [T]`` per-step objective, row t from row t.
      variables: the policy variables.
      inputs: per-step inputs for ``log_prob_fn``, each ``[T, ...]``.
      context: per-step ``[T]`` tensors for the transforms (``advantages``, ``returns``, ...).
      path: ``"auto"`` (cheapest exact), or force ``"fused"`` / ``"full"`` (tests, benchmarks).
      chunk_size: rows per block when per-step gradients or norms are computed.
      norms_fn, per_step_fn: replacements for :func:`per_step_norms` / :func:`per_step_grads`
        with the same signature (e.g. a model-aware fast path).
      use_taps: let per-step gradients and norms of Dense layers come from one batched pass
        (:mod:`pgrad.taps`); ``False`` uses the generic vectorised path for every variable.

    Returns:
      ``(grads, new_state, info)``: one ``[*var.shape]`` gradient per variable, the new state,
      and metrics (``grad_norm`` of the result, ``path_fused`` 1/0, transform-reported values).
    """
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}; got {path!r}.")
    variables = list(variables)
    inputs = tuple(inputs)
    ctx = {k: v for k, v in (context or {}).items() if v is not None}
    chosen = plan(chain) if path == "auto" else path
    if chosen == "fused" and plan(chain) != "fused":
        raise ValueError(
            f"chain {chain.name!r} cannot run fused: a per-step transform needs the full per-step "
            "gradients (or the chain does not aggregate)."
        )
    leaves = flatten(chain)
    states = tuple(state) if chain.children else (state,)
    num_steps = _num_steps(inputs)
    info: dict[str, tf.Tensor] = {}

    if chosen == "full":
        grads_fn = per_step_fn or per_step_lib.per_step_grads
        kwargs = {} if per_step_fn else {"use_taps": use_taps}
        per_step = grads_fn(log_prob_fn, variables, *inputs, chunk_size=chunk_size, **kwargs)
        grads, new_states = run_updates(leaves, per_step, states, ctx)
    else:
        split = next(i for i, t in enumerate(leaves) if t.aggregates) + 1
        pre, post = leaves[:split], leaves[split:]
        norms, cap = None, None
        if needs_norms(chain):
            if norms_fn is not None:
                norms = norms_fn(log_prob_fn, variables, *inputs, chunk_size=chunk_size)
            else:
                norms, cap = per_step_lib.norms_and_capture(
                    log_prob_fn, variables, *inputs, chunk_size=chunk_size, use_taps=use_taps
                )
            info["step_norm_mean"] = tf.reduce_mean(norms)
        coeff = tf.constant(1.0)
        new_pre = []
        for t, s in zip(pre, states[:split]):
            current = None if norms is None else norms * tf.abs(coeff)
            try:
                scale, s = t.step_scale(current, s, num_steps=num_steps, **ctx)
            except TransformError:
                raise
            except Exception as err:
                raise TransformError(
                    f"transform {t.name!r} raised {type(err).__name__}: {err}"
                ) from err
            coeff = coeff * tf.cast(scale, tf.float32)  # [T] or []
            new_pre.append(s)
        coeff = tf.stop_gradient(tf.broadcast_to(tf.cast(coeff, tf.float32),
                                                 tf.reshape(num_steps, [1])))  # [T]

        def surrogate_grads():
            with tf.GradientTape() as tape:
                log_probs = _check_log_probs(log_prob_fn(*inputs), num_steps)
                surrogate = tf.reduce_sum(tf.cast(coeff, log_probs.dtype) * log_probs)
            return per_step_lib.zeros_for_unconnected(tape.gradient(surrogate, variables),
                                                      variables)

        if cap is not None and cap.all_covered:
            # Every variable's per-step gradients are Dense/per-step-copy taps: the reweighted
            # sum is x^T (c * delta) per layer, from the pass that gave the norms. (With unknown
            # T, whether the taps' rows were the steps is only known at run time.)
            if cap.rows_ok is True:
                grads = cap.weighted_sum(coeff)
            else:
                grads = tf.cond(cap.rows_ok, lambda: cap.weighted_sum(coeff), surrogate_grads)
        else:
            grads = surrogate_grads()
        grads = [tf.convert_to_tensor(g) for g in grads]
        agg = pre[-1]
        grads = check_outputs(agg, "", [tf.expand_dims(g, 0) for g in grads], grads)
        grads, new_post = run_updates(post, grads, states[split:], ctx, offset=split,
                                      total=len(leaves))
        new_states = tuple(new_pre) + tuple(new_post)

    _check_final(chain, grads, variables)
    new_state = new_states if chain.children else new_states[0]
    info["grad_norm"] = global_norm(grads)
    info["path_fused"] = tf.constant(1.0 if chosen == "fused" else 0.0)
    info.update(state_metrics(chain, new_state))
    return grads, new_state, info
