"""Adversarial acting during training (``adversarial_epsilon > 0``): every observation the policy
acts on is first attacked by FGSM against the *current* policy (:func:`pgrad.fgsm`, lowering
``log pi(a* | o)`` of its greedy action). ``epsilon`` is in raw observation units (the flattened
observation the env returns). With ``normalize_obs`` the attack runs on the normalised
observation with the per-feature radius ``epsilon / std`` (the same as attacking the raw one:
normalising is a positive per-feature scaling, so the gradient signs agree; then clipped to
``+-clip_obs`` as the normaliser does). The trajectory stores the perturbed observation the
policy acted on, so the stored log-probabilities are those of the stored observations. The
critic's ``V(o_t)`` sees the same perturbed ``o_t``; ``V(o_{t+1})`` for bootstrapping sees the
clean following observation (no action was taken on it yet). With it off nothing here runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import tensorflow as tf

import pgrad

if TYPE_CHECKING:
    from agents.protocol import Agent
    from pgrad.rl.collection.rollout import Trajectory


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
