"""A deliberately slow CartPole for measuring rollout scaling: every step busy-waits 1 ms.

Importing the module registers ``SlowCartPole-v1``; name it ``pgrad_app.slow_env:SlowCartPole-v1``
so that Ray workers import the module too. Busy-waiting, not sleeping: the env costs CPU as a
real simulator does, and two of them on one core do not overlap.
"""

from __future__ import annotations

import time

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

STEP_SECONDS = 1e-3
ENV_ID = "SlowCartPole-v1"


class SlowCartPole(CartPoleEnv):
    """CartPole-v1 whose ``step`` spins for :data:`STEP_SECONDS` first."""

    def step(self, action):
        end = time.perf_counter() + STEP_SECONDS
        while time.perf_counter() < end:
            pass
        return super().step(action)


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=SlowCartPole, max_episode_steps=500,
                 reward_threshold=475.0)
