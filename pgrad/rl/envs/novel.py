"""Velocity-masked classic-control tasks, as rl-baselines3-zoo registers them.

``CartPoleNoVel-v1`` is CartPole-v1 with the cart and pole velocities set to 0 in every
observation, ``PendulumNoVel-v1`` Pendulum-v1 with the angular velocity set to 0 (the zoo's
``MaskVelocityWrapper``: the shape stays; same episode limits, 500 and 200 steps). A policy that
sees one observation at a time cannot tell which way the pole moves; a recurrent one
(``recurrent="lstm"``) can infer it from the positions it has seen.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

#: id -> (base id, observation indices that are velocities, episode limit)
IDS = {"CartPoleNoVel-v1": ("CartPole-v1", (1, 3), 500),
       "PendulumNoVel-v1": ("Pendulum-v1", (2,), 200)}


class MaskVelocity(gym.ObservationWrapper):
    """Zeroes the observation entries ``indices`` (the velocities)."""

    def __init__(self, env: gym.Env, indices: Sequence[int]):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box):
            raise ValueError(f"MaskVelocity masks entries of a Box observation; got {space}.")
        self.mask = np.ones(space.shape, space.dtype)
        self.mask[list(indices)] = 0

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation * self.mask


def make(base: str, indices: Sequence[int], **kwargs: Any) -> gym.Env:
    """The base env (unwrapped of its own time limit: the registration adds it) masked."""
    return MaskVelocity(gym.make(base, **kwargs).unwrapped, indices)


def register() -> None:
    """Registers :data:`IDS` with Gymnasium (once)."""
    for env_id, (base, indices, limit) in IDS.items():
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=f"{__name__}:make", max_episode_steps=limit,
                         kwargs={"base": base, "indices": indices})
