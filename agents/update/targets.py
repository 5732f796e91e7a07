"""The update's targets part: a ``[T, B]`` rollout's values -> advantages and critic targets.

Every target rule has one signature, so the compiled update calls whichever it is given::

    advantages, returns, extra = targets(rewards, terminated, truncated, values, next_values,
                                         behaviour_log_probs, learner_log_probs)

``values``/``next_values`` are ``V(o_t)``/``V(o_{t+1})`` ``[T, B]``; ``behaviour_log_probs``
``[T, B]`` ``log mu(a_t | o_t)`` of the policy that acted; ``learner_log_probs`` a function
``() -> [T, B]`` ``log pi(a_t | o_t)`` under the learner's current weights, called only by a rule
that needs it (traced once, so on-policy updates never compute it). ``extra`` is what the rule
adds to the update's batch (the chain's context), fixed over its epochs.

* :class:`GAETargets`: GAE(lambda) (the on-policy agents), bootstrapped at truncations, never at
  terminations; ``returns = advantages + values``.
* :class:`VTraceTargets`: V-trace (IMPALA/APPO, :func:`pgrad.vtrace`), whose target policy is the
  learner's; ``extra`` carries those log-probs as ``proximal_log_probs`` (APPO's decoupled clip).
* :class:`GroupTargets`: group-relative advantages of whole completions (the GRPO family, on
  group rollouts: ``rollout="groups"``); ``extra`` carries the sequence context
  (``sequence_ids``, ``completion_mask``) the chain's per-sequence terms read.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

import pgrad

#: The chain's context key of the learner's log-probs at the start of an update (V-trace's target
#: policy ``pi_prox``; APPO's decoupled clip reads it).
PROXIMAL_KEY = "proximal_log_probs"


class GAETargets:
    """GAE(lambda) advantages and ``advantages + values`` critic targets.

    Args:
      gamma: the discount; gae_lambda: GAE's lambda (1: Monte Carlo returns minus the baseline).
    """

    #: The weights that acted are the weights that learn (values from acting are exact).
    on_policy = True

    def __init__(self, gamma: float, gae_lambda: float):
        self.gamma, self.gae_lambda = gamma, gae_lambda

    def __call__(self, rewards: tf.Tensor, terminated: tf.Tensor, truncated: tf.Tensor,
                 values: tf.Tensor, next_values: tf.Tensor,
                 behaviour_log_probs: tf.Tensor | None = None,
                 learner_log_probs: Callable[[], tf.Tensor] | None = None
                 ) -> tuple[tf.Tensor, tf.Tensor, dict]:
        advantages = pgrad.gae(rewards, values, next_values, terminated, truncated,
                               self.gamma, self.gae_lambda)
        return advantages, advantages + tf.cast(values, advantages.dtype), {}


class VTraceTargets:
    """V-trace targets ``v_s`` for the critic and ``q_s - V(x_s)`` advantages
    (``q_s = r_s + gamma v_{s+1}``), with truncated importance weights of the learner's policy
    over the behaviour policy (Espeholt et al. 2018).

    Args:
      gamma, gae_lambda: the discount and V-trace's lambda.
      rho_bar, c_bar, pg_rho_bar: the truncation levels of the value targets, the traces and the
        policy-gradient weights.
    """

    #: Actors act on lagged weights: the learner recomputes values and log-probs.
    on_policy = False

    def __init__(self, gamma: float, gae_lambda: float, rho_bar: float, c_bar: float,
                 pg_rho_bar: float):
        self.gamma, self.gae_lambda = gamma, gae_lambda
        self.rho_bar, self.c_bar, self.pg_rho_bar = rho_bar, c_bar, pg_rho_bar

    def __call__(self, rewards: tf.Tensor, terminated: tf.Tensor, truncated: tf.Tensor,
                 values: tf.Tensor, next_values: tf.Tensor,
                 behaviour_log_probs: tf.Tensor | None = None,
                 learner_log_probs: Callable[[], tf.Tensor] | tf.Tensor | None = None
                 ) -> tuple[tf.Tensor, tf.Tensor, dict]:
        if behaviour_log_probs is None or learner_log_probs is None:
            raise ValueError("V-trace targets need the behaviour and the learner's log-probs.")
        target = learner_log_probs() if callable(learner_log_probs) else learner_log_probs
        out = pgrad.vtrace(rewards, values, next_values, terminated, truncated,
                           behaviour_log_probs, target, self.gamma, rho_bar=self.rho_bar,
                           c_bar=self.c_bar, pg_rho_bar=self.pg_rho_bar, lambda_=self.gae_lambda)
        return out.q_estimates - tf.cast(values, tf.float32), out.vs, {PROXIMAL_KEY: target}


class GroupTargets:
    """The GRPO family's targets on a group rollout (``[T, B]``, env ``b``'s first episode is
    completion ``b``; envs ``g G .. g G + G - 1`` share a prompt).

    Each completion's reward is the sum of its episode's rewards ``R_b``; its advantage is
    :func:`pgrad.rl.advantages.groups.group_advantages` of ``R`` (``kind="grpo"``: ``(R_b -
    mean_g R) / (std_g R + eps)``, the std as ``scale_rewards`` says) or
    :func:`~pgrad.rl.advantages.groups.rloo_advantages` (``kind="rloo"``: ``R_b`` minus the mean
    of the other ``G - 1``), on every one of its tokens; rows after the episode ended get 0
    (the rollout's mask drops them). ``returns`` is ``R_b`` on each token (no critic reads it).

    Args:
      group_size: ``G``.
      kind: ``"grpo"`` or ``"rloo"``.
      scale_rewards: with ``"grpo"``: ``"group"``, ``"batch"`` or ``"none"`` (TRL's).
      normalize: with ``"rloo"``: standardise the advantages over the batch (TRL's
        ``normalize_advantages``).
      supervision: with ``"grpo"``: ``"outcome"`` (the above) or ``"process"``: each token's
        reward normalised within its group's tokens and summed from that token on
        (:func:`pgrad.rl.advantages.groups.process_advantages`; for envs that pay rewards as
        they accrue, e.g. a token task's ``dense_rewards``).
      gamma, process_baseline: with ``"process"``: the discount of the rewards-to-go and the
        baseline (``"steps"`` or ``"position"``) of ``process_advantages``.
    """

    on_policy = True

    def __init__(self, group_size: int, kind: str = "grpo", scale_rewards: str = "group",
                 normalize: bool = False, supervision: str = "outcome", gamma: float = 1.0,
                 process_baseline: str = "steps"):
        if kind not in ("grpo", "rloo"):
            raise ValueError(f"GroupTargets: kind must be 'grpo' or 'rloo'; got {kind!r}.")
        if supervision not in ("outcome", "process") or (kind, supervision) == ("rloo",
                                                                                 "process"):
            raise ValueError(f"GroupTargets: supervision must be 'outcome' (or 'process' with "
                             f"kind 'grpo'); got {supervision!r} with {kind!r}.")
        self.group_size, self.kind = int(group_size), kind
        self.scale_rewards, self.normalize = scale_rewards, normalize
        self.supervision = supervision
        self.gamma, self.process_baseline = float(gamma), process_baseline

    def __call__(self, rewards: tf.Tensor, terminated: tf.Tensor, truncated: tf.Tensor,
                 values: tf.Tensor, next_values: tf.Tensor,
                 behaviour_log_probs: tf.Tensor | None = None,
                 learner_log_probs: Callable[[], tf.Tensor] | None = None
                 ) -> tuple[tf.Tensor, tf.Tensor, dict]:
        from pgrad.rl.advantages.groups import (
            group_advantages,
            process_advantages,
            rloo_advantages,
        )

        rewards = tf.cast(rewards, tf.float32)
        done = tf.cast(tf.maximum(tf.cast(terminated, tf.float32),
                                  tf.cast(truncated, tf.float32)), tf.float32)
        live = tf.cast(tf.equal(tf.cumsum(done, axis=0, exclusive=True), 0.0), tf.float32)
        total = tf.reduce_sum(rewards * live, axis=0)  # [B] R_b
        if self.supervision == "process":
            per_token = process_advantages(rewards, live, self.group_size, self.scale_rewards,
                                           gamma=self.gamma, baseline=self.process_baseline)
        else:
            if self.kind == "grpo":
                adv = group_advantages(total, self.group_size, self.scale_rewards)
            else:
                adv = rloo_advantages(total, self.group_size, self.normalize)
            per_token = live * adv[None]
        ids = tf.broadcast_to(tf.range(tf.shape(rewards)[1])[None], tf.shape(rewards))  # [T, B]
        return per_token, live * total[None], {"sequence_ids": ids, "completion_mask": live}
