"""Proximal policy optimisation (PPO, Schulman et al. 2017) as a preset of the actor-critic agent.

Not a copy of an algorithm: the actor-critic agent with ``epochs`` passes over each rollout in
shuffled minibatches, advantages standardised per minibatch, optional value clipping and
``target_kl`` early stop -- and the chain ``chain(clip_ratio("clip_range"), mean_steps())``,
whose per-step scale ``A_t r_t 1[not clipped]`` is exactly the gradient of the clipped surrogate
and runs on the engine's fused path from the current log-probabilities of its forward pass.
Defaults are Stable-Baselines3's (per-env settings: ``configs/ppo.yaml``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tensorflow as tf

import pgrad
from agents.base import ActorCriticAgent, linear_decay
from agents.config import ActorCriticConfig, help_text


@dataclass
class PPOConfig(ActorCriticConfig):
    """PPO hyperparameters (every field of the actor-critic agent; PPO's defaults)."""

    num_envs: int = field(default=1, metadata=help_text("parallel environments in the vector env"))
    n_steps: int = field(default=2048, metadata=help_text(
        "with rollout 'steps': rollout length per env between updates"))
    gae_lambda: float = field(default=0.95, metadata=help_text(
        "GAE lambda in [0, 1]; 1 = n-step / Monte-Carlo returns, 0 = one-step TD"))
    normalize_advantage: bool = field(default=True, metadata=help_text(
        "standardise advantages over each minibatch (mean 0, std 1) before the chain sees them"))
    optimizer: str = field(default="adam", metadata=help_text("'rmsprop', 'adam' or 'sgd'"))
    learning_rate: float = field(default=3e-4, metadata=help_text("optimizer learning rate"))
    optimizer_eps: float = field(default=1e-5, metadata=help_text(
        "epsilon of Adam (outside the square root, as PyTorch's)"))
    epochs: int = field(default=10, metadata=help_text("passes over each rollout"))
    minibatch_size: int = field(default=64, metadata=help_text(
        "steps per minibatch, shuffled each epoch; 0 = the whole rollout in one update"))
    clip_range: float = field(default=0.2, metadata=help_text(
        "PPO's clip range epsilon of the probability ratio"))
    clip_decay_steps: int = field(default=0, metadata=help_text(
        "decay the clip range linearly to 0 over this many env steps; 0 = constant"))

    def validate(self) -> None:
        super().validate()
        if not 0 < self.clip_range < 1:
            raise ValueError(f"clip_range must be in (0, 1); got {self.clip_range}")
        if int(self.clip_decay_steps) < 0:
            raise ValueError(f"clip_decay_steps must be >= 0; got {self.clip_decay_steps}")


class PPO(ActorCriticAgent):
    """PPO: the actor-critic agent with PPO's options and the clipped-ratio chain."""

    Config = PPOConfig
    name = "ppo"

    def default_transform(self) -> pgrad.GradientTransform:
        return pgrad.chain(pgrad.clip_ratio("clip_range"), pgrad.mean_steps(), name=self.name)

    def context_scalars(self, env_steps: tf.Tensor) -> dict[str, tf.Tensor]:
        # Floor the decayed range: a ratio clip of exactly 0 would freeze the policy.
        clip = linear_decay(self.cfg.clip_range, self.cfg.clip_decay_steps, env_steps)
        return {"clip_range": tf.maximum(clip, 1e-3)}

    def report_clip_range(self, scalars):
        return scalars["clip_range"]
