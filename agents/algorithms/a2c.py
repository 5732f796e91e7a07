"""Advantage actor-critic (A2C): n-step rollouts over parallel envs, GAE(lambda) advantages.

A preset of the actor-critic agent: one update per rollout on the whole batch, the chain
``chain(weight_by("advantages"), mean_steps())``, value and entropy terms added after it.
Defaults are Stable-Baselines3 / rl-zoo's CartPole settings, adjusted where measured to help
(16 envs and learning rate 1.4e-3 instead of 8 and 7e-4; see docs/agents.md).
"""

from __future__ import annotations

from agents.base import ActorCriticAgent
from agents.catalog.configs import A2CConfig


class A2C(ActorCriticAgent):
    """Advantage actor-critic. See ``agents/__init__.py`` for the interface."""

    Config = A2CConfig
    name = "a2c"
