"""Per-token terms of the GRPO-family objectives, each a per-step scale with its loss beside it.

The context contract for sequences (the engine's context is flat over rows ``[T]``; a row is
one token of one completion, padding rows allowed):

* ``log_probs`` ``[T]`` -- log pi_theta of each token under the current policy (the engine's own
  forward pass puts it there);
* ``behaviour_log_probs`` ``[T]`` -- log pi_old, the policy that sampled the completions (fixed
  over the iterations on one batch: the same key PPO's ``clip_ratio`` reads);
* ``ref_log_probs`` ``[T]`` -- log pi_ref of the frozen reference policy (KL terms only);
* ``advantages`` ``[T]`` -- the advantage of the row's completion on each of its tokens;
* ``completion_mask`` ``[T]`` -- 1 for a completion token, 0 for padding (default: all 1);
* ``sequence_ids`` ``[T]`` int -- the completion ``i`` in ``[0, N)`` each row belongs to (read by
  sequence-level ratios and per-completion normalisers);
* ``num_sequences`` ``[]`` int -- ``N`` (default ``max(sequence_ids) + 1``; pass it when a
  completion may have no rows).

:func:`pgrad.rl.advantages.groups.token_context` builds these from ``[N, L]`` tensors. Padding
rows must hold finite numbers (they are masked out).

Each term is a :class:`TokenTerm`: a per-token loss ``l_t`` (``loss(**context) -> [T]``, as TRL
writes it) and its per-step scale ``c_t``. A chain ``chain(term, normaliser)`` with a normaliser
of weights ``w_t m_t`` (:mod:`pgrad.transforms.sequence`; ``w`` constant over each completion)
minimises ``L = sum_t w_t m_t l_t``. The scale is derived by hand so that
``sum_t w_t m_t c_t grad log pi_t = -grad L``: for a token-level term ``c_t = -dl_t/dlog pi_t``;
for a sequence-level one (``l_t = l_i`` for every token of completion ``i``, a function of
``x_i = mean_t m_t log(pi_t / pi_old_t)``) ``c_t = -dl_i/dx_i`` on each of ``i``'s tokens, since
the ``|o_i|`` tokens' weights cancel the mean's ``1 / |o_i|``. Every such gradient is a scalar
per token times ``grad log pi_t``, so the engine runs these chains on its fused path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import tensorflow as tf

from pgrad.transforms.base import (
    GradientTransform,
    StepScale,
    context_value,
    empty_init,
    reports,
    step_scale_update,
)

#: Where a ratio lives: per token, per completion from the mean log-ratio of its tokens
#: (GSPO), or per completion from their sum (pi(o) / pi_old(o), TRL's RLOO trainer).
LEVELS = ("token", "sequence", "sequence_sum")


@dataclass(frozen=True, kw_only=True)
class TokenTerm(StepScale):
    """A per-step scale that is the gradient of a per-token loss (see the module docstring).

    Attributes:
      loss: ``loss(**context) -> [T]`` the per-token loss ``l_t``, differentiable in
        ``context["log_probs"]``.
      formula: the loss in words, for :func:`pgrad.transforms.sequence.describe`.
      parts: the terms an :func:`add_terms` sums (its state is the tuple of theirs).
    """

    loss: Callable[..., tf.Tensor]
    formula: str = ""
    parts: tuple[TokenTerm, ...] = ()

    def metrics(self, state: Any) -> dict[str, tf.Tensor]:
        if not self.parts:
            return super().metrics(state)
        out: dict[str, tf.Tensor] = {}
        for part, s in zip(self.parts, state):
            out.update(part.metrics(s))
        return out


def token_term(scale: Callable[..., tuple[tf.Tensor, Any]], loss: Callable[..., tf.Tensor],
               init: Callable[[Sequence[Any]], Any] = empty_init, *, name: str,
               formula: str = "") -> TokenTerm:
    """A :class:`TokenTerm` from its scale ``scale(norms, state, *, num_steps, **ctx) -> (c,
    state)`` and its per-token loss ``loss(**ctx) -> [T]``."""
    return TokenTerm(init, step_scale_update(scale, name, False), name=name,
                     step_axis="per_step", scale=scale, loss=loss, formula=formula)


# ---------------------------------------------------------------------------------------------
# Context helpers (public: a user's own term reads the context the same way).
# ---------------------------------------------------------------------------------------------


def completion_mask(ctx: dict, like: tf.Tensor) -> tf.Tensor:
    """``[T]`` float mask: ``ctx["completion_mask"]``, or ones shaped like ``like``."""
    m = ctx.get("completion_mask")
    return tf.ones_like(like) if m is None else tf.cast(m, tf.float32)


def sequence_ids(ctx: dict, who: str) -> tuple[tf.Tensor, tf.Tensor]:
    """``(ids [T] int32, N [] int32)`` from ``sequence_ids`` and ``num_sequences``."""
    if ctx.get("sequence_ids") is None:
        context_value(ctx, "sequence_ids", who)  # raises, naming the keys present
    ids = tf.cast(ctx["sequence_ids"], tf.int32)
    n = ctx.get("num_sequences")
    n = tf.reduce_max(ids) + 1 if n is None else tf.cast(n, tf.int32)
    return ids, n


def per_sequence_sum(x: tf.Tensor, ctx: dict, who: str) -> tf.Tensor:
    """``[T]``: on each row, the sum of ``x * mask`` over its completion's rows."""
    ids, n = sequence_ids(ctx, who)
    m = completion_mask(ctx, x)
    return tf.gather(tf.math.unsorted_segment_sum(x * m, ids, n), ids)


def per_sequence_mean(x: tf.Tensor, ctx: dict, who: str) -> tf.Tensor:
    """``[T]``: on each row, the mean of ``x`` over its completion's tokens (mask-weighted,
    ``sum / max(|o_i|, 1)`` as TRL)."""
    count = per_sequence_sum(tf.ones_like(x), ctx, who)
    return per_sequence_sum(x, ctx, who) / tf.maximum(count, 1.0)


def param(value: float | str, ctx: dict, who: str) -> tf.Tensor | float:
    """A hyperparameter: a number, or the name of a context key holding it (a schedule)."""
    return context_value(ctx, value, who) if isinstance(value, str) else value


def _check_level(level: str, who: str) -> None:
    if level not in LEVELS:
        raise ValueError(f"{who}: level must be one of {LEVELS}; got {level!r}.")


def log_ratio(ctx: dict, level: str, behaviour_key: str, who: str) -> tf.Tensor:
    """``[T]`` log importance weight of each row: per token, or its completion's (mean or sum)."""
    current = context_value(ctx, "log_probs", who)
    m = completion_mask(ctx, current)
    lr = tf.where(m > 0, current - context_value(ctx, behaviour_key, who), 0.0)  # [T]
    if level == "sequence":
        return per_sequence_mean(lr, ctx, who)
    if level == "sequence_sum":
        return per_sequence_sum(lr, ctx, who)
    return lr


def _masked_mean(x: tf.Tensor, m: tf.Tensor) -> tf.Tensor:
    return tf.reduce_sum(x * m) / tf.maximum(tf.reduce_sum(m), 1.0)


def _level_factor(ctx: dict, level: str, like: tf.Tensor, who: str) -> tf.Tensor | float:
    """Sum over i's tokens of ``d x_i / d log pi_t``: ``|o_i|`` at ``"sequence_sum"``, else 1."""
    return per_sequence_sum(tf.ones_like(like), ctx, who) if level == "sequence_sum" else 1.0


# ---------------------------------------------------------------------------------------------
# The terms.
# ---------------------------------------------------------------------------------------------


@reports("clip_low", "clip_high", "clip_fraction", "ratio_mean")
class ClippedRatioState(NamedTuple):
    """Last update's statistics of :func:`clipped_ratio`, means over the batch's tokens."""

    clip_low: tf.Tensor  # [] rho < 1 - eps where A < 0
    clip_high: tf.Tensor  # [] rho > 1 + eps_high where A > 0
    clip_fraction: tf.Tensor  # [] either
    ratio_mean: tf.Tensor  # [] mean rho


def clipped_ratio(epsilon: float | str = 0.2, epsilon_high: float | str | None = None, *,
                  delta: float | None = None, level: str = "token", key: str = "advantages",
                  behaviour_key: str = "behaviour_log_probs") -> TokenTerm:
    """PPO's clipped surrogate with two clip ranges (DAPO's clip-higher), per token or sequence.

    Per-token loss ``l_t = -min(rho A, clip(rho, 1 - eps, 1 + eps_high) A)`` with
    ``rho = exp(x)``: ``x_t = log(pi_t / pi_old_t)`` at ``level="token"`` (GRPO), the completion's
    mean log-ratio at ``"sequence"`` (GSPO), its sum at ``"sequence_sum"``. With ``delta``
    the unclipped branch is ``min(rho, delta) A`` (INTELLECT-2's two-sided clip).

    Scale: ``A rho 1[unclipped branch active and rho <= delta]`` (times ``|o_i|`` for
    ``"sequence_sum"``): the gradient of ``min(rho A, clip(rho) A)`` where the clip is inactive
    or the unclipped branch is the smaller, else 0.

    Args:
      epsilon: lower clip range (a number or a context key).
      epsilon_high: upper clip range (default ``epsilon``).
      delta: optional cap on the unclipped ratio.
      level: ``"token"``, ``"sequence"`` or ``"sequence_sum"``.
      key: context key of the per-token advantages.
      behaviour_key: context key of log pi_old.
    """
    who = "clipped_ratio"
    _check_level(level, who)
    high = epsilon if epsilon_high is None else epsilon_high
    for v in (epsilon, high):
        if not isinstance(v, str) and not v > 0:
            raise ValueError(f"{who}: epsilon and epsilon_high must be > 0; got {v}.")
    if delta is not None and not delta > 1:
        raise ValueError(f"{who}: delta must be > 1 (it caps the ratio); got {delta}.")

    def branches(ctx):
        adv = context_value(ctx, key, who)  # [T]
        ratio = tf.exp(log_ratio(ctx, level, behaviour_key, who))  # [T]
        lo, hi = 1.0 - param(epsilon, ctx, who), 1.0 + param(high, ctx, who)
        capped = ratio if delta is None else tf.minimum(ratio, delta)
        return adv, ratio, capped * adv, tf.clip_by_value(ratio, lo, hi) * adv, lo, hi

    def loss(**ctx):
        _, _, unclipped, clipped, _, _ = branches(ctx)
        return -tf.minimum(unclipped, clipped)  # [T]

    def init(variables):
        del variables
        return ClippedRatioState(*[tf.constant(0.0)] * 4)

    def scale(norms, state, *, num_steps, **ctx):
        adv, ratio, unclipped, clipped, lo, hi = branches(ctx)
        active = unclipped <= clipped  # tf.minimum's choice on ties; equal inside the range
        if delta is not None:
            active = tf.logical_and(active, ratio <= delta)
        m = completion_mask(ctx, ratio)
        low = tf.cast(tf.logical_and(ratio < lo, adv < 0), tf.float32)
        high_ = tf.cast(tf.logical_and(ratio > hi, adv > 0), tf.float32)
        stats = ClippedRatioState(_masked_mean(low, m), _masked_mean(high_, m),
                                  _masked_mean(tf.maximum(low, high_), m), _masked_mean(ratio, m))
        c = adv * ratio * tf.cast(active, tf.float32) * _level_factor(ctx, level, ratio, who)
        return c, stats

    name = f"clipped_ratio({epsilon}, {high}" + (f", delta={delta}" if delta else "") + (
        f", level={level!r})" if level != "token" else ")")
    rho = "rho_t" if level == "token" else "rho_i"
    first = rho if delta is None else f"min({rho}, {delta})"
    return token_term(scale, loss, init, name=name,
                      formula=f"-min({first} A, clip({rho}, 1 - {epsilon}, 1 + {high}) A)")


@reports("clip_fraction")
class CispoState(NamedTuple):
    """Last update's statistics of :func:`cispo_weight`."""

    clip_fraction: tf.Tensor  # [] mean over tokens of rho > epsilon_max where A > 0


def cispo_weight(epsilon_max: float | str, *, level: str = "token", key: str = "advantages",
                 behaviour_key: str = "behaviour_log_probs") -> TokenTerm:
    """CISPO (MiniMax-M1): the clipped importance weight, detached, times ``A log pi``.

    Per-token loss ``l_t = -sg(min(rho, eps_max)) A log pi_t``; scale ``min(rho, eps_max) A``.
    Unlike the clipped surrogate, no token loses its gradient: only its weight is capped.
    ``rho`` as in :func:`clipped_ratio` (``level``); TRL's cap is its ``epsilon_high``.
    """
    who = "cispo_weight"
    _check_level(level, who)
    if not isinstance(epsilon_max, str) and not epsilon_max > 0:
        raise ValueError(f"{who}: epsilon_max must be > 0; got {epsilon_max}.")

    def weights(ctx):
        ratio = tf.exp(log_ratio(ctx, level, behaviour_key, who))
        cap = param(epsilon_max, ctx, who)
        return ratio, tf.stop_gradient(tf.minimum(ratio, cap)), cap

    def loss(**ctx):
        _, w, _ = weights(ctx)
        logp = context_value(ctx, "log_probs", who)
        logp = tf.where(completion_mask(ctx, logp) > 0, logp, 0.0)
        return -w * context_value(ctx, key, who) * logp  # [T]

    def scale(norms, state, *, num_steps, **ctx):
        ratio, w, cap = weights(ctx)
        adv = context_value(ctx, key, who)
        capped = tf.cast(tf.logical_and(ratio > cap, adv > 0), tf.float32)
        return w * adv, CispoState(_masked_mean(capped, completion_mask(ctx, ratio)))

    def init(variables):
        del variables
        return CispoState(tf.constant(0.0))

    name = f"cispo_weight({epsilon_max}" + (f", level={level!r})" if level != "token" else ")")
    rho = "rho_t" if level == "token" else "rho_i"
    return token_term(scale, loss, init, name=name,
                      formula=f"-sg(min({rho}, {epsilon_max})) A log pi_t")


@reports("kl")
class KLState(NamedTuple):
    """Last update's statistics of :func:`kl_k3`."""

    kl: tf.Tensor  # [] mean over tokens of the k3 estimate of KL(pi || pi_ref)


def kl_k3(beta: float | str, *, importance_corrected: bool = True, level: str = "token",
          behaviour_key: str = "behaviour_log_probs", ref_key: str = "ref_log_probs"
          ) -> TokenTerm:
    """A KL penalty to a frozen reference policy, Schulman's k3 estimator, weighted by ``beta``.

    ``k3_t = pi_ref/pi - log(pi_ref/pi) - 1 >= 0``, an unbiased estimate of KL(pi || pi_ref) on
    tokens sampled from pi. Per-token loss ``l_t = beta k3_t``, or with ``importance_corrected``
    (TRL's ``use_bias_correction_kl``, its default) ``beta k3_t rho`` with ``rho`` the importance
    weight of ``level`` (DeepSeek-V3.2: unbiased on tokens sampled from pi_old).

    Scale (``d = log pi_ref - log pi``): ``-beta (1 - e^d)``; corrected at token level
    ``beta rho_t d_t``; corrected at sequence level ``-beta rho_i (1 - e^(d_t) + mean_i k3)``
    (``sum_i k3`` for ``"sequence_sum"``): the ratio's own gradient spreads the completion's
    KL over its tokens.
    """
    who = "kl_k3"
    _check_level(level, who)
    if not isinstance(beta, str) and not beta >= 0:
        raise ValueError(f"{who}: beta must be >= 0; got {beta}.")

    def parts(ctx):
        logp = context_value(ctx, "log_probs", who)
        m = completion_mask(ctx, logp)
        d = tf.where(m > 0, context_value(ctx, ref_key, who) - logp, 0.0)  # [T]
        k3 = tf.exp(d) - d - 1.0
        ratio = tf.exp(log_ratio(ctx, level, behaviour_key, who)) if importance_corrected else 1.0
        return param(beta, ctx, who), d, k3, ratio, m

    def loss(**ctx):
        b, _, k3, ratio, _ = parts(ctx)
        return b * k3 * ratio  # [T]

    def scale(norms, state, *, num_steps, **ctx):
        b, d, k3, ratio, m = parts(ctx)
        if not importance_corrected:
            c = -b * (1.0 - tf.exp(d))
        elif level == "token":
            c = b * ratio * d  # -(d/dlog pi) of k3 * rho = rho d
        else:
            spread = per_sequence_sum(k3, ctx, who)
            if level == "sequence":
                spread = per_sequence_mean(k3, ctx, who)
            c = -b * ratio * (1.0 - tf.exp(d) + spread)
        return c, KLState(_masked_mean(k3, m))

    def init(variables):
        del variables
        return KLState(tf.constant(0.0))

    corr = "" if importance_corrected else ", importance_corrected=False"
    lvl = f", level={level!r}" if level != "token" and importance_corrected else ""
    return token_term(scale, loss, init, name=f"kl_k3({beta}{corr}{lvl})",
                      formula=f"{beta} (pi_ref/pi - log(pi_ref/pi) - 1)"
                      + ((" rho_t" if level == "token" else " rho_i") if importance_corrected
                         else ""))


def add_terms(*terms: TokenTerm) -> TokenTerm:
    """The sum of per-token terms: loss ``sum_k l_k``, scale ``sum_k c_k`` (e.g. a surrogate
    plus a KL penalty). Its state is the tuple of the terms' states; it reports their metrics."""
    if not terms:
        raise ValueError("add_terms: needs at least one term.")
    for t in terms:
        if not isinstance(t, TokenTerm):
            kind = type(t).__name__ if isinstance(t, GradientTransform) else repr(t)
            raise TypeError(f"add_terms: takes TokenTerms (clipped_ratio, kl_k3, ...); got {kind}.")
    if len(terms) == 1:
        return terms[0]

    def loss(**ctx):
        return tf.add_n([t.loss(**ctx) for t in terms])

    def scale(norms, states, *, num_steps, **ctx):
        total = tf.constant(0.0)  # [T] once a term is added
        new: list[Any] = []
        for t, s in zip(terms, states):
            c, s = t.scale(norms, s, num_steps=num_steps, **ctx)
            total = total + tf.cast(c, tf.float32)
            new.append(s)
        return total, tuple(new)

    def init(variables):
        return tuple(t.init(variables) for t in terms)

    return TokenTerm(init, step_scale_update(scale, "add_terms", False),
                     name=" + ".join(t.name for t in terms), step_axis="per_step", scale=scale,
                     loss=loss, formula=" + ".join(t.formula for t in terms), parts=terms)


__all__ = [
    "LEVELS", "ClippedRatioState", "CispoState", "KLState", "TokenTerm", "add_terms",
    "cispo_weight", "clipped_ratio", "completion_mask", "kl_k3", "log_ratio", "param",
    "per_sequence_mean", "per_sequence_sum", "sequence_ids", "token_term",
]
