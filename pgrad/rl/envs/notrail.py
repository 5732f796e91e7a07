"""MinAtar Breakout without its motion cue: an image task that needs memory.

MinAtar observations are one ``10 x 10 x C`` frame, not a stack. Breakout's frame carries a
``trail`` channel (minatar/environments/breakout.py: ``channels = {'paddle': 0, 'ball': 1,
'trail': 2, 'brick': 3}``; ``state()`` sets the trail plane at the ball's previous position), and
that plane is what makes the ball's direction visible. ``MinAtar/Breakout-NoTrail-v1`` is
``MinAtar/Breakout-v1`` (same dynamics, sticky actions, minimal action set) with that plane
dropped: ``10 x 10 x 3`` bool, channels paddle, ball, brick. A policy that sees one frame
cannot tell which way the ball moves; a recurrent one (``recurrent="lstm"``) can infer it from
the frames it has seen.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

#: id -> (base id, name of the channel to drop in the game's ``channels`` table)
IDS = {"MinAtar/Breakout-NoTrail-v1": ("MinAtar/Breakout-v1", "trail")}


class DropChannel(gym.ObservationWrapper):
    """Removes plane ``channel`` from channel-last ``[H, W, C]`` observations: ``[H, W, C - 1]``,
    the dtype kept."""

    def __init__(self, env: gym.Env, channel: int):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 3:
            raise ValueError(f"DropChannel drops a plane of [H, W, C] Box observations; got "
                             f"{space}.")
        if not 0 <= channel < space.shape[2]:
            raise ValueError(f"DropChannel: channel {channel} is not in [0, {space.shape[2]}) "
                             f"of {space}.")
        self.keep = np.array([c for c in range(space.shape[2]) if c != channel])
        self.observation_space = gym.spaces.Box(space.low[..., self.keep],
                                                space.high[..., self.keep], dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[..., self.keep]


def channel_index(env: gym.Env, name: str) -> int:
    """Index of the plane ``name`` in a MinAtar env's frames, read from the game's own table
    (``Environment.env.channels``), not assumed."""
    game = env.unwrapped.game.env  # type: ignore[attr-defined]
    return int(game.channels[name])


def make(base: str, channel: str, **kwargs: Any) -> gym.Env:
    """The base MinAtar env (kwargs such as ``sticky_action_prob`` go to it) without ``channel``."""
    from pgrad.rl.envs.ids import ensure_registered

    ensure_registered(base)
    env = gym.make(base, **kwargs)
    return DropChannel(env, channel_index(env, channel))


def register() -> None:
    """Registers :data:`IDS` with Gymnasium (once)."""
    for env_id, (base, channel) in IDS.items():
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=f"{__name__}:make",
                         kwargs={"base": base, "channel": channel})
