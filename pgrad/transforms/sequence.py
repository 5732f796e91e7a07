"""The GRPO family as chains: per-token terms, then a normaliser that aggregates the tokens.

A GRPO-family loss is ``L = sum_t w_t m_t l_t``: a per-token loss ``l_t``
(:mod:`pgrad.transforms.sequence_terms`: the clipped ratio, CISPO's detached weight, a KL
penalty, or their sum) aggregated with weights ``w_t`` that are constant over each completion
(``m_t`` the completion mask). The normalisers here are those weights, as aggregating per-step
scales (TRL's ``loss_type`` names; ``w_t`` for a token of completion ``i``):

* :func:`mean_over_sequences` (``grpo``): ``1 / (N |o_i|)``, the mean over each completion's
  tokens, then over the ``N`` completions;
* :func:`mean_over_tokens` (``bnpo``): ``1 / sum_i |o_i|``, the mean over the batch's tokens;
* :func:`sum_over_max_length` (``dr_grpo``): ``1 / (N L_max)``, a constant (Dr. GRPO);
* :func:`mean_over_global_tokens` (``dapo``, ``cispo``): ``1 / num_items_in_batch``, every
  token of the generation batch (this batch's when the context has no count).

So ``chain(term, normaliser)`` has gradient ``-grad L`` (ascent), a scalar per token times
``grad log pi_t``: the engine's fused path, one backward pass. :func:`grpo_chain` builds the
chain for a TRL ``loss_type``; :func:`sequence_loss` evaluates ``L`` itself (the number TRL
reports, and a reference for tests); :func:`describe` prints a chain as its formula. The
context keys are listed in :mod:`pgrad.transforms.sequence_terms`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from pgrad.transforms.base import GradientTransform, StepScale, empty_init, step_scale_update
from pgrad.transforms.chain import Chain, chain, flatten
from pgrad.transforms.sequence_terms import (
    TokenTerm,
    add_terms,
    cispo_weight,
    clipped_ratio,
    completion_mask,
    kl_k3,
    per_sequence_sum,
    sequence_ids,
)

#: TRL's ``loss_type`` values :func:`grpo_chain` builds (``gspo`` is TRL's ``grpo`` with
#: ``importance_sampling_level="sequence"``; ``rloo`` is ``RLOOTrainer``'s loss).
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "gspo", "rloo")


@dataclass(frozen=True, kw_only=True)
class SequenceNormalizer(StepScale):
    """An aggregating per-step scale whose weights ``w_t m_t`` define a loss over tokens.

    Attributes:
      weights: ``weights(**context) -> [T]``, the per-row weight ``w_t m_t`` (also its scale).
      formula: the aggregation in words, for :func:`describe`.
    """

    weights: Callable[..., tf.Tensor]
    formula: str = ""


def sequence_normalizer(weights: Callable[..., tf.Tensor], *, name: str,
                        formula: str = "") -> SequenceNormalizer:
    """A :class:`SequenceNormalizer` from ``weights(**context) -> [T]`` (zero on padding)."""

    def scale(norms, state, *, num_steps, **ctx):
        return weights(**ctx), state

    return SequenceNormalizer(empty_init, step_scale_update(scale, name, False, aggregates=True),
                              name=name, step_axis="aggregates", scale=scale, weights=weights,
                              formula=formula)


def _mask(ctx: dict) -> tf.Tensor:
    """``[T]`` completion mask (ones shaped like ``log_probs`` when the context has none)."""
    return completion_mask(ctx, tf.cast(ctx["log_probs"], tf.float32))


def mean_over_sequences() -> SequenceNormalizer:
    """GRPO's aggregation: each completion's token mean, averaged over the ``N`` completions."""
    who = "mean_over_sequences"

    def weights(**ctx):
        m = _mask(ctx)
        _, n = sequence_ids(ctx, who)
        length = tf.maximum(per_sequence_sum(tf.ones_like(m), ctx, who), 1.0)  # [T] |o_i|
        return m / (length * tf.cast(n, tf.float32))

    return sequence_normalizer(weights, name=who, formula="mean_i 1/|o_i| sum_t l_t")


def mean_over_tokens() -> SequenceNormalizer:
    """BNPO's aggregation: the mean over every token of the batch."""

    def weights(**ctx):
        m = _mask(ctx)
        return m / tf.maximum(tf.reduce_sum(m), 1.0)

    return sequence_normalizer(weights, name="mean_over_tokens",
                               formula="sum_i,t l_t / sum_i |o_i|")


def sum_over_max_length(max_completion_length: int) -> SequenceNormalizer:
    """Dr. GRPO's aggregation: the sum over tokens divided by ``N * max_completion_length``."""
    who = "sum_over_max_length"
    if isinstance(max_completion_length, bool) or not isinstance(max_completion_length, int) \
            or max_completion_length < 1:
        raise ValueError(f"{who}: max_completion_length must be a positive int; got "
                         f"{max_completion_length!r}.")

    def weights(**ctx):
        _, n = sequence_ids(ctx, who)
        return _mask(ctx) / (tf.cast(n, tf.float32) * float(max_completion_length))

    return sequence_normalizer(weights, name=f"{who}({max_completion_length})",
                               formula=f"sum_i,t l_t / (N * {max_completion_length})")


def mean_over_global_tokens(key: str = "num_items_in_batch") -> SequenceNormalizer:
    """DAPO's aggregation: the sum over tokens divided by the token count of the whole batch.

    ``context[key]`` is that count (TRL's ``num_items_in_batch``, every completion token of the
    generation batch, when the loss is taken on slices of it); absent, the count of this batch's
    tokens (then equal to :func:`mean_over_tokens`).
    """

    def weights(**ctx):
        m = _mask(ctx)
        total = ctx.get(key)
        total = tf.reduce_sum(m) if total is None else tf.cast(total, tf.float32)
        return m / tf.maximum(total, 1.0)

    return sequence_normalizer(weights, name=f"mean_over_global_tokens({key!r})",
                               formula=f"sum_i,t l_t / {key}")


def grpo_chain(loss_type: str, *, epsilon: float | str = 0.2,
               epsilon_high: float | str | None = None, beta: float | str = 0.0,
               importance_sampling_level: str | None = None, delta: float | None = None,
               use_bias_correction_kl: bool = True, max_completion_length: int | None = None,
               num_items_key: str = "num_items_in_batch") -> Chain:
    """The chain of TRL's ``GRPOTrainer`` loss for ``loss_type`` (arguments as ``GRPOConfig``).

    ``term = clipped_ratio(epsilon, epsilon_high, delta, level)`` (``cispo``:
    ``cispo_weight(epsilon_high)``, TRL's ``epsilon_high`` defaulting to ``epsilon``), plus
    ``kl_k3(beta)`` when ``beta > 0``; then the normaliser of ``loss_type`` (see the module
    docstring). ``gspo`` is ``grpo`` at ``importance_sampling_level="sequence"``. ``rloo`` is
    TRL's ``RLOOTrainer`` loss: the clipped ratio of whole completions,
    ``pi(o_i) / pi_old(o_i)`` (``level="sequence_sum"``), averaged over completions; its KL
    penalty lives in the rewards, so ``beta`` must be 0 here.

    Args:
      loss_type: one of :data:`LOSS_TYPES`.
      epsilon, epsilon_high: clip ranges (numbers or context keys).
      beta: KL coefficient; 0 leaves the KL term out (no ``ref_log_probs`` needed).
      importance_sampling_level: ``"token"`` or ``"sequence"`` (default: ``"sequence"`` for
        ``gspo``, else ``"token"``).
      delta: optional cap on the unclipped ratio (INTELLECT-2).
      use_bias_correction_kl: weight the KL term by the importance ratio (TRL's default).
      max_completion_length: ``L_max``, needed by ``dr_grpo``.
      num_items_key: context key of the whole batch's token count (``dapo``, ``cispo``).

    Raises:
      ValueError: an unknown ``loss_type`` or level, ``dr_grpo`` without
        ``max_completion_length``, or ``rloo`` with ``beta``.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"grpo_chain: loss_type must be one of {LOSS_TYPES}; got {loss_type!r}.")
    if loss_type == "rloo":
        if isinstance(beta, str) or beta != 0.0:
            raise ValueError("grpo_chain: 'rloo' takes its KL penalty in the rewards; beta must "
                             "be 0 (or add kl_k3 to the chain yourself).")
        high = epsilon if epsilon_high is None else epsilon_high
        return chain(clipped_ratio(epsilon, high, delta=delta, level="sequence_sum"),
                     mean_over_sequences(),
                     name=f"grpo_chain('rloo', epsilon={epsilon}, epsilon_high={high})")
    level = importance_sampling_level or ("sequence" if loss_type == "gspo" else "token")
    if level not in ("token", "sequence"):
        raise ValueError(f"grpo_chain: importance_sampling_level must be 'token' or 'sequence'; "
                         f"got {level!r}.")
    high = epsilon if epsilon_high is None else epsilon_high
    if loss_type == "cispo":
        term: TokenTerm = cispo_weight(high, level=level)
    else:
        term = clipped_ratio(epsilon, high, delta=delta, level=level)
    if isinstance(beta, str) or beta != 0.0:
        term = add_terms(term, kl_k3(beta, importance_corrected=use_bias_correction_kl,
                                     level=level))
    if loss_type in ("grpo", "gspo"):
        norm = mean_over_sequences()
    elif loss_type == "bnpo":
        norm = mean_over_tokens()
    elif loss_type == "dr_grpo":
        if max_completion_length is None:
            raise ValueError("grpo_chain: 'dr_grpo' divides by max_completion_length; pass it.")
        norm = sum_over_max_length(max_completion_length)
    else:
        norm = mean_over_global_tokens(num_items_key)
    args = [f"{loss_type!r}", f"epsilon={epsilon}", f"epsilon_high={high}", f"beta={beta}"]
    if level != ("sequence" if loss_type == "gspo" else "token"):
        args.append(f"importance_sampling_level={level!r}")
    return chain(term, norm, name=f"grpo_chain({', '.join(args)})")


def _split(transform: GradientTransform, who: str) -> tuple[TokenTerm, SequenceNormalizer]:
    leaves = flatten(transform)
    if (len(leaves) < 2 or not isinstance(leaves[0], TokenTerm)
            or not isinstance(leaves[1], SequenceNormalizer)):
        names = [t.name for t in leaves]
        raise ValueError(f"{who}: needs a chain that starts with one TokenTerm (add_terms for "
                         f"several) and then a SequenceNormalizer; got {names}.")
    return leaves[0], leaves[1]


def sequence_loss(transform: GradientTransform, **context: Any) -> tf.Tensor:
    """The loss ``L = sum_t w_t m_t l_t`` a sequence chain minimises (``[]``).

    ``context`` as for the chain, with ``log_probs`` the current log-probabilities: under a
    ``tf.GradientTape`` watching them (or the variables that made them), ``-grad L`` is what
    the chain computes. Transforms after the normaliser (global-norm clipping, ...) change the
    step, not the loss, and are ignored.
    """
    term, norm = _split(transform, "sequence_loss")
    per_token = term.loss(**context)  # [T]
    return tf.reduce_sum(norm.weights(**context) * per_token)


def describe(transform: GradientTransform) -> str:
    """A chain as its formula: its name, its leaves, the per-token loss and the aggregation."""
    leaves = flatten(transform)
    lines = [transform.name, f"  = chain({', '.join(t.name for t in leaves)})"]
    for t in leaves:
        if isinstance(t, TokenTerm) and t.formula:
            lines.append(f"  l_t = {t.formula}")
        elif isinstance(t, SequenceNormalizer) and t.formula:
            lines.append(f"  L   = {t.formula}")
    return "\n".join(lines)


__all__ = [
    "LOSS_TYPES", "SequenceNormalizer", "describe", "grpo_chain", "mean_over_global_tokens",
    "mean_over_sequences", "mean_over_tokens", "sequence_loss", "sequence_normalizer",
    "sum_over_max_length",
]
