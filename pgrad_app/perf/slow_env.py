"""Deliberately slow CartPoles for measuring rollout scaling: every step takes 1 ms more.

Importing the module registers ``SlowCartPole-v1`` (its step busy-waits 1 ms: CPU-bound, as a
simulator; two on one core do not overlap) and ``SleepyCartPole-v1`` (its step sleeps 1 ms:
latency-bound, as an env waiting on another process, a server or a robot). Name them
``pgrad_app.perf.slow_env:SlowCartPole-v1`` so that Ray workers import the module too.
"""

from __future__ import annotations

import time

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

STEP_SECONDS = 1e-3
ENV_ID = "SlowCartPole-v1"
SLEEPY_ENV_ID = "SleepyCartPole-v1"


class SlowCartPole(CartPoleEnv):
    """CartPole-v1 whose ``step`` spins for :data:`STEP_SECONDS` first."""

    def step(self, action):
        end = time.perf_counter() + STEP_SECONDS
        while time.perf_counter() < end:
            pass
        return super().step(action)


class SleepyCartPole(CartPoleEnv):
    """CartPole-v1 whose ``step`` sleeps for :data:`STEP_SECONDS` first (no CPU)."""

    def step(self, action):
        time.sleep(STEP_SECONDS)
        return super().step(action)


for _id, _cls in ((ENV_ID, SlowCartPole), (SLEEPY_ENV_ID, SleepyCartPole)):
    if _id not in gym.registry:
        gym.register(_id, entry_point=_cls, max_episode_steps=500, reward_threshold=475.0)
