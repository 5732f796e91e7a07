"""Runs a transform chain over a per-step objective by the cheapest exact path.

Paths:

* ``"fused"`` -- the transform has a :meth:`~pgrad.transforms.GradientTransform.fused_form`
  (every per-step transform up to the aggregation only multiplies step ``t``'s gradient by a
  scalar ``c_t``). Then ``sum_t c_t * grad log pi_t = grad sum_t stop(c_t) log pi_t``: one
  forward and one backward pass, no ``[T, params]`` tensor. Transforms that read per-step norms
  (clipping) get them from the layer taps of the same pass (:mod:`pgrad.core.taps`), other
  variables chunked; when every variable is tapped the reweighted sum comes from the taps too
  (``x^T (c * delta)`` per Dense layer, the filter gradient with ``c * delta`` per convolution,
  or the per-step rows a convolution materialised for its norms, reweighted).
* ``"full"`` -- some per-step transform needs the per-step vectors (a user's function, natural
  gradient): materialise them (taps for tapped layers, vectorised per-example gradients for the
  rest) and run ``transform.update``.

Either way ``log_prob_fn`` runs forward once for the chain: the transforms find the *current*
log-probabilities of that pass in ``context["log_probs"]`` (a PPO ratio needs no second pass), an
optional ``aux_loss(log_probs, extras)`` (an entropy bonus) is differentiated from the same pass,
and both paths call the same per-transform code; tests check they agree to round-off.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import tensorflow as tf

from pgrad.core import per_step as per_step_lib
from pgrad.core import taps
from pgrad.transforms.base import GradientTransform, TransformError, global_norm

PATHS = ("auto", "fused", "full")


class EngineOutput(NamedTuple):
    """What :func:`run` returns for one batch."""

    grads: list[tf.Tensor]  # aggregated, transformed policy gradients (ascent), one per variable
    state: Any  # the transform's new state
    metrics: dict[str, tf.Tensor]  # grad_norm, path_fused, step_norm_mean?, transform metrics
    log_probs: tf.Tensor  # [T] current log-probabilities from the engine's forward pass
    extras: dict[str, tf.Tensor]  # what log_prob_fn returned besides them (e.g. entropy [T])
    aux_grads: list[tf.Tensor] | None  # gradient of aux_loss (a loss: descent), per aux variable


def plan(transform: GradientTransform) -> str:
    """``"fused"`` if the transform can run from per-step scalars alone, else ``"full"``."""
    return "fused" if transform.fused_form() is not None else "full"


def _check_final(transform: GradientTransform, grads, variables) -> None:
    for g, v in zip(grads, variables):
        if g.shape.rank is not None and not g.shape.is_compatible_with(v.shape):
            hint = ""
            if g.shape.rank == len(v.shape) + 1:
                hint = " The chain keeps the step axis: end it with mean_steps() or sum_steps()."
            raise TransformError(
                f"chain {transform.name!r} returned a gradient of shape {g.shape.as_list()} for "
                f"variable {getattr(v, 'path', None) or v.name!r} of shape {list(v.shape)}.{hint}"
            )


def _zeros(grads, variables) -> list[tf.Tensor]:
    return per_step_lib.zeros_for_unconnected(grads, variables)


class _Pass:
    """The engine's forward pass: plain (one tape) or recorded (taps), plus a lazy plain pass
    for the variables the taps do not cover."""

    def __init__(self, fn, variables, inputs, num_steps, aux_loss, aux_variables, record,
                 sequence_length=None):
        self.fn, self.variables, self.inputs = fn, variables, inputs
        self.sequence_length = sequence_length
        self.num_steps, self.aux_loss, self.aux_variables = num_steps, aux_loss, aux_variables
        self.cap = None
        if record:
            out, self.cap = taps.capture(fn, variables, inputs, num_steps, "log_prob_fn",
                                         aux=aux_loss)
            self.log_probs, self.extras, self.aux = out, self.cap.extras, self.cap.aux
            self._plain = None
        else:
            self._plain = self._forward()
            self.log_probs, self.extras, self.aux = self._plain[1:]

    def _forward(self):
        with tf.GradientTape(persistent=True) as tape:
            out, extras = taps.split_output(self.fn(*self.inputs))
            out = taps.check_per_step(out, self.num_steps, "log_prob_fn")
            aux = self.aux_loss(out, extras) if self.aux_loss is not None else None
        return tape, out, extras, aux

    def plain(self):
        if self._plain is None:  # variables the taps do not cover: one more ordinary pass
            self._plain = self._forward()
        return self._plain

    def weighted_sum(self, coeff) -> list[tf.Tensor]:
        """``sum_t coeff[t] grad log_prob_t`` per variable (one backward pass)."""
        covered = self.cap.weighted_sum(coeff) if self.cap is not None else [None] * len(
            self.variables)
        missing = [i for i, g in enumerate(covered) if g is None]
        if missing:
            tape, out = self.plain()[:2]
            vs = [self.variables[i] for i in missing]
            rest = _zeros(tape.gradient(out, vs, output_gradients=tf.cast(coeff, out.dtype)), vs)
            for i, g in zip(missing, rest):
                covered[i] = g
        return [tf.convert_to_tensor(g) for g in covered]

    def folded_sum(self, coeff) -> list[tf.Tensor]:
        """``sum_t coeff[t] grad log_prob_t - grad aux_loss`` per variable, in one backward pass
        (plain pass only: the taps keep the two apart)."""
        tape, out, _, aux = self.plain()
        grads = tape.gradient([out, aux], self.variables,
                              output_gradients=[tf.cast(coeff, out.dtype),
                                                tf.constant(-1.0, aux.dtype)])
        return [tf.convert_to_tensor(g) for g in _zeros(grads, self.variables)]

    def folded_aux_gradients(self) -> list[tf.Tensor]:
        """With :meth:`folded_sum`: per aux variable, zero where it is a policy variable (its
        aux gradient is in the folded sum), else the gradient of ``aux_loss`` (a backward pass
        through only what lies between the loss and those variables, e.g. a value head)."""
        vs = list(self.aux_variables)
        policy = {id(v) for v in self.variables}
        others = [v for v in vs if id(v) not in policy]
        tape, aux = self.plain()[0], self.plain()[3]
        rest = iter(_zeros(tape.gradient(aux, others), others) if others else [])
        return [tf.zeros(v.shape, v.dtype) if id(v) in policy else next(rest) for v in vs]

    def aux_gradients(self) -> list[tf.Tensor] | None:
        if self.aux_loss is None:
            return None
        vs = list(self.aux_variables)
        out = [None] * len(vs)
        if self.cap is not None:
            index = {id(v): i for i, v in enumerate(self.variables)}
            from_taps = self.cap.gradient_of(self.aux)
            for j, v in enumerate(vs):
                i = index.get(id(v))
                if i is not None and from_taps[i] is not None:
                    out[j] = from_taps[i]
            if self.cap.all_covered and all(g is not None for g in out):
                return out
        missing = [j for j, g in enumerate(out) if g is None]
        tape, aux = self.plain()[0], self.plain()[3]
        rest = _zeros(tape.gradient(aux, [vs[j] for j in missing]), [vs[j] for j in missing])
        for j, g in zip(missing, rest):
            out[j] = g
        return out

    def norms(self, chunk_size) -> tf.Tensor:
        """``[T]`` per-step gradient norms (taps for covered variables, chunked for the rest)."""
        if self.cap is None:
            return per_step_lib.per_step_norms(self._logp_fn, self.variables, *self.inputs,
                                               chunk_size=chunk_size, use_taps=False,
                                               sequence_length=self.sequence_length)
        total = self.cap.norms_squared(self.num_steps, keep=True)
        missing = [v for v, ok in zip(self.variables, self.cap.covered) if not ok]
        if missing:
            total = total + tf.square(per_step_lib.per_step_norms(
                self._logp_fn, missing, *self.inputs, chunk_size=chunk_size, use_taps=False))
        return tf.sqrt(total)

    def per_step_grads(self, chunk_size) -> list[tf.Tensor]:
        """``[T, *shape]`` per variable."""
        if self.cap is None:
            return per_step_lib.per_step_grads(self._logp_fn, self.variables, *self.inputs,
                                               chunk_size=chunk_size, use_taps=False,
                                               sequence_length=self.sequence_length)
        rows = self.cap.per_step_grads(self.num_steps)
        missing = [i for i, r in enumerate(rows) if r is None]
        if missing:
            rest = per_step_lib.per_step_grads(self._logp_fn, [self.variables[i] for i in missing],
                                               *self.inputs, chunk_size=chunk_size,
                                               use_taps=False)
            for i, g in zip(missing, rest):
                rows[i] = g
        return rows

    def _logp_fn(self, *args):
        return taps.split_output(self.fn(*args))[0]


def run(
    transform: GradientTransform,
    state: Any,
    log_prob_fn: Callable[..., Any],
    variables: Sequence[tf.Variable],
    inputs: Sequence[Any],
    context: dict[str, Any] | None = None,
    *,
    aux_loss: Callable[[tf.Tensor, dict], tf.Tensor] | None = None,
    aux_variables: Sequence[tf.Variable] | None = None,
    path: str = "auto",
    chunk_size: int | None = None,
    use_taps: bool = True,
    sequence_length: int | None = None,
    fold_aux: bool = False,
) -> EngineOutput:
    """Aggregated, transformed policy gradients (ascent direction) for one batch.

    Args:
      transform: the transform (usually a ``chain``) to run; it must aggregate the step axis.
      state: its state (from ``transform.init(variables)`` or the previous call).
      log_prob_fn: ``log_prob_fn(*inputs) -> [T]`` per-step objective, row t from row t; or
        ``-> ([T], extras)`` with a dict of other tensors from the same forward pass (e.g.
        ``{"entropy": [T]}``) that ``aux_loss`` and the caller can use.
      variables: the policy variables.
      inputs: per-step inputs for ``log_prob_fn``, each ``[T, ...]``.
      context: per-step ``[T]`` tensors for the transforms (``advantages``, ``returns``, ...).
        ``context["log_probs"]`` is set to the current log-probabilities of this pass.
      aux_loss: optional ``aux_loss(log_probs, extras) -> []`` loss differentiated from the same
        forward pass (with respect to ``aux_variables``, default ``variables``).
      path: ``"auto"`` (cheapest exact), or force ``"fused"`` / ``"full"`` (tests, benchmarks).
      chunk_size: rows per block when per-step gradients or norms are computed generically.
      use_taps: let per-step gradients and norms of tapped layers come from one batched pass
        (:mod:`pgrad.core.taps`); ``False`` uses the generic vectorised path for every variable.
      sequence_length: ``L`` for a recurrent ``log_prob_fn``: the rows are env-major sequences
        of ``L`` steps, row ``t`` of one depending on its rows ``0..t``. The fused path stays
        one backward pass through time; per-step gradients and norms are taken through each
        row's prefix (:func:`pgrad.core.per_step.sequence_grads`); no taps.
      fold_aux: take the policy gradient and ``aux_loss``'s from one backward pass where that is
        exact: a fused chain that is its weighted sum alone (nothing after the aggregation,
        :attr:`~pgrad.transforms.base.FusedForm.weighted_sum_only`), no per-step norms, and
        an ``aux_loss``. ``grads`` is then ``sum_t c_t grad log pi_t - grad aux_loss`` (the
        ascent direction of the combined objective) per variable; ``aux_grads`` is zero for the
        aux variables among ``variables`` (folded in) and ``grad aux_loss`` for the others;
        ``metrics`` has ``aux_folded`` = 1 and no ``grad_norm`` (the policy gradient's own norm
        needs its own backward pass). Otherwise (or ``False``) the two stay apart.

    Returns:
      An :class:`EngineOutput`.
    """
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}; got {path!r}.")
    variables = list(variables)
    inputs = tuple(tf.nest.map_structure(tf.convert_to_tensor, tuple(inputs)))
    ctx = {k: v for k, v in (context or {}).items() if v is not None}
    form = transform.fused_form()
    if path == "fused" and form is None:
        raise ValueError(
            f"chain {transform.name!r} cannot run fused: a per-step transform needs the full "
            "per-step gradients (or the chain does not aggregate)."
        )
    fused = form is not None and path != "full"
    fused_form = form if fused else None  # narrowed for compute: the form whenever fused
    num_steps = per_step_lib.num_steps(inputs)
    needs_rows = not fused
    needs_norms = fused_form is not None and fused_form.needs_norms
    record = bool(use_taps and variables and taps.enabled() and (needs_rows or needs_norms)
                  and not sequence_length)
    fwd = _Pass(log_prob_fn, variables, inputs, num_steps, aux_loss,
                variables if aux_variables is None else aux_variables, record, sequence_length)
    log_probs = tf.stop_gradient(fwd.log_probs)
    ctx["log_probs"] = log_probs
    metrics: dict[str, tf.Tensor] = {}
    folded = folds_aux(transform, path, aux_loss is not None) and fold_aux and fwd.cap is None

    def compute(pass_: _Pass, aux_grads):
        norm_mean = tf.constant(0.0)
        if folded:
            assert fused_form is not None
            grads, new_state = fused_form.run(pass_.folded_sum, None, state,
                                              num_steps=num_steps, **ctx)
            aux_grads = pass_.folded_aux_gradients()
        elif fused_form is not None:
            norms = pass_.norms(chunk_size) if needs_norms else None
            if norms is not None:
                norm_mean = tf.reduce_mean(norms)
            grads, new_state = fused_form.run(pass_.weighted_sum, norms, state,
                                              num_steps=num_steps, **ctx)
        else:
            rows = pass_.per_step_grads(chunk_size)
            grads, new_state = transform.update(rows, state, **ctx)
        if aux_grads is None:
            aux_grads = pass_.aux_gradients() or []
        return [tf.convert_to_tensor(g) for g in grads], new_state, aux_grads, norm_mean

    if fwd.cap is not None and fwd.cap.rows_ok is not True:
        # Unknown T: whether the taps' rows were the steps is only known at run time. The
        # fallback branch runs its own plain pass, so no tape crosses into it.
        fast_aux = fwd.aux_gradients() or []
        grads, new_state, aux_grads, norm_mean = tf.cond(
            fwd.cap.rows_ok, lambda: compute(fwd, fast_aux),
            lambda: compute(_Pass(log_prob_fn, variables, inputs, num_steps, aux_loss,
                                  fwd.aux_variables, record=False), None))
    else:
        grads, new_state, aux_grads, norm_mean = compute(fwd, None)
    if needs_norms:
        metrics["step_norm_mean"] = norm_mean
    aux_grads = list(aux_grads) if aux_loss is not None else None
    _check_final(transform, grads, variables)
    if folded:
        metrics["aux_folded"] = tf.constant(1.0)
    else:
        metrics["grad_norm"] = global_norm(grads)
    metrics["path_fused"] = tf.constant(1.0 if fused else 0.0)
    metrics.update(transform.metrics(new_state))
    return EngineOutput(grads, new_state, metrics, log_probs,
                        {k: tf.stop_gradient(v) for k, v in fwd.extras.items()}, aux_grads)


def folds_aux(transform: GradientTransform, path: str = "auto", has_aux: bool = True) -> bool:
    """Whether :func:`run` with ``fold_aux=True`` takes the policy gradient and the aux loss's
    from one backward pass (known before tracing: callers size their metrics by it)."""
    form = transform.fused_form()
    return (has_aux and path != "full" and form is not None and form.weighted_sum_only
            and not form.needs_norms)


def policy_gradients(
    transform: GradientTransform,
    state: Any,
    log_prob_fn: Callable[..., Any],
    variables: Sequence[tf.Variable],
    inputs: Sequence[Any],
    context: dict[str, Any] | None = None,
    *,
    path: str = "auto",
    chunk_size: int | None = None,
    use_taps: bool = True,
) -> tuple[list[tf.Tensor], Any, dict[str, tf.Tensor]]:
    """:func:`run`, returning ``(grads, new_state, metrics)``.

    ``metrics`` holds ``grad_norm`` of the result, ``path_fused`` (1/0), ``step_norm_mean`` when
    per-step norms were computed, and what the transforms report (``<name>/<field>``).
    """
    out = run(transform, state, log_prob_fn, variables, inputs, context, path=path,
              chunk_size=chunk_size, use_taps=use_taps)
    return out.grads, out.state, out.metrics
