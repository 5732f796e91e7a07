"""A frozen reference policy for the GRPO family's KL term (TRL's ``beta`` and ``ref_model``).

TRL keeps the model it started from as ``ref_model`` and adds ``beta * KL(pi || pi_ref)``
per token (the k3 estimator, :func:`pgrad.transforms.sequence_terms.kl_k3`), reading
``ref_per_token_logps`` computed once per generation batch. Here:

* :class:`ReferencePolicy` is a copy of the agent's policy network taken when the agent is
  built (its starting weights), saved and restored with the agent's checkpoints, and never
  trained. With ``sync_steps`` it follows the policy as TR-DPO's soft update (TRL's
  ``sync_ref_model``): every ``sync_steps`` updates, ``ref <- alpha policy + (1 - alpha) ref``.
* :class:`ReferenceTargets` wraps a targets part (:mod:`agents.update.targets`): it adds the
  reference's ``[T, B]`` log-probs of the batch's actions to the chain's context as
  ``ref_log_probs``, once per update (fixed over its epochs, as TRL's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

#: The chain's context key of the reference policy's log-probs (``kl_k3`` reads it).
REF_KEY = "ref_log_probs"


class ReferencePolicy:
    """A frozen copy of an agent's policy network.

    Args:
      sync_steps: 0 = frozen for good; else every ``sync_steps`` updates the reference moves
        to ``alpha * policy + (1 - alpha) * reference`` (TRL's ``ref_model_sync_steps``).
      alpha: that mix (TRL's ``ref_model_mixup_alpha``).
    """

    def __init__(self, sync_steps: int = 0, alpha: float = 0.6):
        self.sync_steps, self.alpha = int(sync_steps), float(alpha)
        self.net: Any = None
        self._policy: list[tf.Variable] = []

    def bind(self, net: Any, make_network: Callable[[], Any]) -> None:
        """Builds the copy of the policy network ``net`` (``make_network()``: a network of the
        same architecture) with its current weights."""
        self.net = make_network()
        self._policy = list(net.policy_variables)
        for ref, own in zip(self.net.policy_variables, self._policy, strict=True):
            ref.assign(own)

    def trackables(self) -> dict[str, Any]:
        """What a checkpoint saves of it (the agent adds these to its own)."""
        return {f"reference_{k}": v for k, v in self.net.modules().items()}

    def after_update(self, updates: int) -> None:
        """The soft update, when ``updates`` (made so far) is a multiple of ``sync_steps``."""
        if self.sync_steps and updates % self.sync_steps == 0:
            for ref, own in zip(self.net.policy_variables, self._policy):
                ref.assign(self.alpha * own + (1.0 - self.alpha) * ref)


class ReferenceTargets:
    """A targets part plus the reference policy's log-probs in the chain's context.

    Args:
      inner: the targets part whose advantages and returns these are
        (e.g. :class:`agents.update.targets.GroupTargets`).
      reference: the :class:`ReferencePolicy`.
    """

    def __init__(self, inner: Any, reference: ReferencePolicy):
        self.inner, self.reference = inner, reference
        self.on_policy = inner.on_policy

    def bind(self, net: Any, make_network: Callable[[], Any]) -> None:
        self.reference.bind(net, make_network)

    def trackables(self) -> dict[str, Any]:
        return self.reference.trackables()

    def after_update(self, updates: int) -> None:
        self.reference.after_update(updates)

    def __call__(self, rewards: tf.Tensor, terminated: tf.Tensor, truncated: tf.Tensor,
                 values: tf.Tensor, next_values: tf.Tensor,
                 behaviour_log_probs: tf.Tensor | None = None,
                 learner_log_probs: Callable[..., tf.Tensor] | None = None
                 ) -> tuple[tf.Tensor, tf.Tensor, dict]:
        advantages, returns, extra = self.inner(rewards, terminated, truncated, values,
                                                next_values, behaviour_log_probs,
                                                learner_log_probs)
        of = getattr(learner_log_probs, "of", None)
        if of is None:
            raise ValueError("ReferenceTargets: the update must hand the targets a "
                             "learner_log_probs with .of(net) (agents.update.compiled)")
        live = extra.get("completion_mask")
        extra = {**extra, REF_KEY: tf.stop_gradient(of(self.reference.net, live))}
        return advantages, returns, extra


class RolloutLogProbs:
    """``[T, B]`` log-probs of a rollout's actions: ``()`` under the learner's current weights
    (V-trace's target policy), ``.of(net, live)`` under another network of the same
    architecture (the reference policy).

    Args:
      log_prob_only: ``(obs [M, ...], actions) -> [M]`` of the learner.
      head: the action head (``distribution(params, mask)``).
      obs, actions, action_mask: the rollout's time-major rows ``[T B, ...]`` (``t B + b``);
        ``action_mask`` may be None.
      T, B: the rollout's shape.
    """

    def __init__(self, log_prob_only: Callable, head: Any, obs: Any, actions: tf.Tensor,
                 action_mask: tf.Tensor | None, T: Any, B: Any):
        self.log_prob_only, self.head = log_prob_only, head
        self.obs, self.actions, self.action_mask = obs, actions, action_mask
        self.T, self.B = T, B

    def __call__(self) -> tf.Tensor:
        acts = self.actions if self.action_mask is None else (self.actions, self.action_mask)
        return tf.reshape(self.log_prob_only(self.obs, acts), [self.T, self.B])

    def of(self, net: Any, live: tf.Tensor | None = None) -> tf.Tensor:
        """``[T, B]`` under ``net``; with ``live`` ``[T, B]`` only its rows are computed (0
        elsewhere) and a token policy reads them in one causal pass per completion
        (:mod:`pgrad.rl.models.token_rows`)."""
        from pgrad.rl.models import token_rows

        rows = tf.range(self.T * self.B)
        if live is not None:
            rows = tf.boolean_mask(rows, tf.reshape(live, [-1]) > 0)
        obs = tf.nest.map_structure(lambda x: tf.gather(x, rows), self.obs)
        actions = tf.gather(self.actions, rows)
        mask = None if self.action_mask is None else tf.gather(self.action_mask, rows)
        if mask is None and token_rows.is_token_policy(net):
            from pgrad.rl.models.token_encoder import policy_logits_fn

            logits = token_rows.row_logits(policy_logits_fn(net), obs, actions,
                                           rows % self.B)[0]  # completion b is column b
        else:
            logits = net.params(obs)
        log_probs = self.head.distribution(logits, mask).log_prob(actions)
        return tf.reshape(tf.scatter_nd(rows[:, None], log_probs, [self.T * self.B]),
                          [self.T, self.B])
