"""Opt-in extras of the agents' update loop: adversarial acting and per-step gradient diagnostics.

Both are switched on by :class:`agents.config.ActorCriticConfig` fields and called from
``ActorCriticAgent.step`` / ``_update``; with them off nothing here runs.

* ``adversarial_epsilon > 0`` -- every observation the policy acts on during training is first
  attacked by FGSM against the *current* policy (:func:`pgrad.fgsm`, lowering
  ``log pi(a* | o)`` of its greedy action). ``epsilon`` is in raw observation units (the flattened
  observation the env returns). With ``normalize_obs`` the attack runs on the normalised
  observation with the per-feature radius ``epsilon / std`` (the same as attacking the raw one:
  normalising is a positive per-feature scaling, so the gradient signs agree; then clipped to
  ``+-clip_obs`` as the normaliser does). The trajectory stores the perturbed observation the
  policy acted on, so the stored log-probabilities are those of the stored observations. The
  critic's ``V(o_t)`` sees the same perturbed ``o_t``; ``V(o_{t+1})`` for bootstrapping sees the
  clean following observation (no action was taken on it yet).
* ``diagnostics`` -- :func:`update_diagnostics` adds ``diag_*`` scalars (per-step norm
  quantiles, grad SNR, mean cosine, clip fraction, mean gradient norm) of ``A_t grad log pi_t``
  to the update's metrics, by the cheap path (:func:`pgrad.policy_diagnostics`: per-step norms
  from one batched pass, one JVP for the dot products; never ``[T, P]``), and returns the ``[N]``
  per-step norms for a TensorBoard histogram.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf

import pgrad
from pgrad.core.per_step import per_step_norms

if TYPE_CHECKING:
    from agents.protocol import Agent
    from pgrad.rl.rollout import Trajectory

DIAG_PREFIX = "diag_"
STEP_NORMS_KEY = "diag_step_norms"  # [N] array metric -> TensorBoard histogram only


def _epsilon_vector(agent, epsilon: float) -> np.ndarray:
    """``[obs_dim]`` radius in the space the policy sees (normalised units with normalize_obs)."""
    eps = np.full(agent.collector.obs_dim, float(epsilon), np.float32)
    norm = agent.obs_norm
    if norm is None:
        return eps
    return (eps / np.sqrt(norm.rms.var + norm.eps)).astype(np.float32)


class AdversarialActing:
    """Wraps an agent's numpy acting function so it acts on FGSM-perturbed observations.

    Args:
      agent: an :class:`agents.base.ActorCriticAgent` (its TensorFlow networks hold the current
        weights).
      epsilon: L-inf radius in raw observation units (> 0).
    """

    def __init__(self, agent: Agent, epsilon: float):
        self.agent, self.epsilon = agent, float(epsilon)
        net, head = agent.net, agent.head

        def tf_policy(obs):
            return head.distribution(net.params(obs))

        def attack(obs, eps):  # [B, obs_dim], [obs_dim] -> [B, obs_dim]
            return pgrad.fgsm(obs, tf_policy, eps)

        spec = [tf.TensorSpec([None, agent.collector.obs_dim], tf.float32),
                tf.TensorSpec([agent.collector.obs_dim], tf.float32)]
        self._attack = tf.function(attack, input_signature=spec)

    def wrap(self, policy_fn: Callable) -> tuple[Callable, list[np.ndarray]]:
        """``(acting fn, list that receives each perturbed [B, obs_dim] batch in order)``."""
        eps = tf.constant(_epsilon_vector(self.agent, self.epsilon))
        norm = self.agent.obs_norm
        perturbed: list[np.ndarray] = []

        def attacked(obs: np.ndarray, **kwargs):  # kwargs: the env's action_mask, if any
            adv = self._attack(tf.constant(obs, tf.float32), eps).numpy()
            if norm is not None:  # stay in the normaliser's range, as a raw attack would
                adv = np.clip(adv, -norm.clip, norm.clip)
            adv = adv.astype(np.float32)
            perturbed.append(adv)
            return policy_fn(adv, **kwargs)

        return attacked, perturbed


def replace_observations(traj: Trajectory, perturbed: list[np.ndarray]) -> Trajectory:
    """The trajectory with ``observations`` ``[T, B, obs_dim]`` replaced by the perturbed ones."""
    obs = np.stack(perturbed).astype(traj.observations.dtype)
    if obs.shape != traj.observations.shape:
        raise RuntimeError(f"adversarial acting recorded {obs.shape} observations for a "
                           f"{traj.observations.shape} trajectory.")
    obs.flags.writeable = False
    return traj._replace(observations=obs)


def update_diagnostics(
    log_prob_fn: Callable[[tf.Tensor, tf.Tensor], tf.Tensor],
    variables: list[Any],
    obs: tf.Tensor,
    actions: tf.Tensor,
    advantages: tf.Tensor,
    max_norm: float,
) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
    """Diagnostics of ``A_t grad log pi(a_t | o_t)`` for one update batch (inside tf.function).

    Args:
      log_prob_fn: ``(obs [N, d], actions [N, ...]) -> [N]``.
      variables: the policy variables.
      obs, actions, advantages: the update batch, ``[N, ...]``.
      max_norm: per-step threshold for ``diag_clip_fraction`` (what ``clip_per_step(max_norm)``
        would clip); ``<= 0`` leaves it out.

    Returns:
      ``({"diag_step_norm_min", ..., "diag_grad_snr", "diag_mean_cosine", "diag_mean_grad_norm"[,
      "diag_clip_fraction"]}, [N] weighted per-step norms |A_t| ||grad log pi_t||)``.
    """
    norms = per_step_norms(log_prob_fn, variables, obs, actions)  # [N] unweighted
    out = pgrad.policy_diagnostics(log_prob_fn, variables, (obs, actions), advantages,
                                   max_norm if max_norm > 0 else None, norms=norms)
    weighted = tf.abs(tf.cast(advantages, norms.dtype)) * norms
    return {DIAG_PREFIX + k: v for k, v in out.items()}, tf.cast(weighted, tf.float32)
