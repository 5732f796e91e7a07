"""Advantage actor-critic (A2C): n-step rollouts over parallel envs, GAE(lambda) advantages.

A preset of the actor-critic agent: one update per rollout on the whole batch, the chain
``chain(weight_by("advantages"), mean_steps())``, value and entropy terms added after it.
Defaults are Stable-Baselines3 / rl-zoo's CartPole settings, adjusted where measured to help
(16 envs and learning rate 1.4e-3 instead of 8 and 7e-4; see docs/agents.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.catalog.declare import Algorithm
from agents.config import ActorCriticConfig, preset


@dataclass
class A2CConfig(ActorCriticConfig):
    """A2C hyperparameters (every field of the actor-critic agent; A2C's defaults)."""

    # 16 envs x 5 steps (SB3/rl-zoo: 8 x 5) with twice SB3's learning rate: half as many updates
    # per env step -- each update has a fixed cost -- and, measured on CartPole seeds 0-9, fewer
    # env steps to solve, too (docs/agents.md).
    num_envs: int = preset("num_envs", 16)
    learning_rate: float = preset("learning_rate", 1.4e-3)


ALGORITHMS = (Algorithm("a2c", "A2C", A2CConfig,
                        summary="advantage actor-critic: n-step rollouts, GAE, one update each"),)
