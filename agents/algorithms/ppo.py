"""Proximal policy optimisation (PPO, Schulman et al. 2017) as a preset of the actor-critic agent.

Not a copy of an algorithm: the actor-critic agent with ``epochs`` passes over each rollout in
shuffled minibatches, advantages standardised per minibatch, optional value clipping and
``target_kl`` early stop -- and the chain ``chain(clip_ratio("clip_range"), mean_steps())``,
whose per-step scale ``A_t r_t 1[not clipped]`` is exactly the gradient of the clipped surrogate
and runs on the engine's fused path from the current log-probabilities of its forward pass.
Defaults are Stable-Baselines3's (per-env settings: ``pgrad_app/config/hyperparams/ppo.yaml``).
"""

from __future__ import annotations

import pgrad
from agents.base import ActorCriticAgent
from agents.catalog.configs import PPOConfig


class PPO(ActorCriticAgent):
    """PPO: the actor-critic agent with PPO's options and the clipped-ratio chain."""

    Config = PPOConfig
    name = "ppo"

    def default_transform(self) -> pgrad.GradientTransform:
        # The clip range reaches the chain through the context, evaluated each update from its
        # schedule (agents/schedules.py); the chain reports PPO's surrogate and approx_kl.
        return pgrad.chain(pgrad.clip_ratio("clip_range"), pgrad.mean_steps(), name=self.name)
