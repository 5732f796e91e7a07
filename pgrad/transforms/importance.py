"""Off-policy correction as a per-step scale: truncated importance weights (V-trace, IMPALA).

Steps sampled by a behaviour policy mu are reweighted towards the current policy pi by
``min(rho_bar, pi(a_t | s_t) / mu(a_t | s_t))``, a scalar per step: the engine runs it on the
fused path from the current log-probabilities of its own forward pass.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from pgrad.transforms.base import StepScale, context_value, per_step_scale, reports


@reports("rho_mean", "truncated_fraction")
class ImportanceState(NamedTuple):
    """Last update's importance-weight statistics of ``importance_weight`` (reported as metrics)."""

    rho_mean: tf.Tensor  # [] mean of rho_t before truncation (1 in expectation under mu)
    truncated_fraction: tf.Tensor  # [] fraction of steps with rho_t > rho_bar


def importance_weight(
    rho_bar: float | None = 1.0,
    *,
    behaviour_key: str = "behaviour_log_probs",
    target_key: str = "log_probs",
) -> StepScale:
    """Scales step ``t`` by the truncated importance weight ``min(rho_bar, rho_t)``.

    ``rho_t = exp(log pi_t - log mu_t)`` with ``log pi_t`` the *current* log-probabilities the
    engine puts in ``context["log_probs"]`` and ``log mu_t = context[behaviour_key]`` those of the
    policy that acted. The weight is a constant of the update (no gradient flows through it),
    so ``chain(importance_weight(1.0), weight_by("advantages"), mean_steps())`` with
    ``advantages = vtrace(...).q_estimates - values`` is IMPALA's policy gradient
    ``mean_t min(1, rho_t) (q_t - V(x_t)) grad log pi_t``, in one backward pass.

    With ``target_key`` another policy's log-probabilities take the current ones' place: e.g.
    ``"proximal_log_probs"`` (the learner's policy at the start of the update, which the
    off-policy agents put in the context) gives ``min(rho_bar, pi_prox / mu)``, a fixed factor
    over the update's epochs: the weight of the decoupled PPO objective (Hilton et al. 2021;
    APPO's ``clip_against="learner"``).

    Args:
      rho_bar: truncation threshold (IMPALA's pg_rho_bar); ``None`` or ``float("inf")`` for
        plain, untruncated importance sampling.
      behaviour_key: context key of the behaviour policy's log-probabilities.
      target_key: context key of the log-probabilities of the policy weighted towards
        (default: the current ones, which the engine puts there).

    Its :class:`ImportanceState` reports ``rho_mean`` (of the untruncated ratios) and
    ``truncated_fraction`` (``rho_t > rho_bar``).

    Raises:
      ValueError: if ``rho_bar`` is not > 0.
    """
    if rho_bar is not None and not rho_bar > 0:
        raise ValueError(f"importance_weight: rho_bar must be > 0 (or None); got {rho_bar}.")
    bar = float("inf") if rho_bar is None else float(rho_bar)
    who = "importance_weight"

    def init(variables):
        del variables
        return ImportanceState(tf.constant(0.0), tf.constant(0.0))

    def factors(norms, state, *, num_steps, **ctx):
        log_rho = context_value(ctx, target_key, who) - context_value(ctx, behaviour_key, who)
        rho = tf.exp(log_rho)  # [T]
        truncated = tf.cast(rho > bar, tf.float32)  # [T]
        stats = ImportanceState(tf.reduce_mean(rho), tf.reduce_mean(truncated))
        return tf.minimum(rho, bar), stats

    return per_step_scale(factors, init, name=who)


__all__ = ["ImportanceState", "importance_weight"]
