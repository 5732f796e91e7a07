"""A small PettingZoo ParallelEnv whose agents leave one after another, for the agent-row tests.

``LeavingGame``: agents ``a0..a{n-1}``; agent ``i`` is in the episode for ``i + 2`` steps (the
last one ends the episode; ``truncate=True`` ends the last agent by truncation instead). Each
agent observes ``[step, i, its last action, a random draw]``; its reward at step ``t`` (1-based)
for action ``a`` is ``a + 10 i + 0.1 t`` -- every value says whose and when. With
``mask=True`` observations are PettingZoo's ``{"observation", "action_mask"}`` dicts and action
``t % 3`` is illegal at step ``t``. ``bad`` makes it misbehave at its second step (see
:meth:`LeavingGame.step`).
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.utils.env import ParallelEnv


class LeavingGame(ParallelEnv):
    metadata = {"name": "leaving_game", "is_parallelizable": True}

    def __init__(self, n: int = 3, mask: bool = False, truncate: bool = False,
                 bad: str | None = None):
        self.possible_agents = [f"a{i}" for i in range(n)]
        self.mask, self.truncate, self.bad = mask, truncate, bad
        self._obs = gym.spaces.Box(-1e3, 1e3, (4,), np.float32)
        self._act = gym.spaces.Discrete(3)
        self.t = 0
        self.episodes = 0  # resets so far
        self.last = {}
        self.agents = []
        self.rng = np.random.default_rng()
        self.sent: list[tuple[str, int, bool]] = []  # (agent, action, legal) as received

    def observation_space(self, agent):
        if self.bad == "space_change" and self.episodes >= 2 and agent == "a1":
            return gym.spaces.Box(-1e3, 1e3, (5,), np.float32)
        if self.mask:
            return gym.spaces.Dict({"observation": self._obs,
                                    "action_mask": gym.spaces.MultiBinary(3)})
        return self._obs

    def action_space(self, agent):
        return self._act

    def legal(self) -> np.ndarray:
        m = np.ones(3, np.int8)
        m[(self.t + 1) % 3] = 0  # the next step's illegal action
        return m

    def _one(self, agent):
        i = self.possible_agents.index(agent)
        x = np.array([self.t, i, self.last.get(agent, -1), self.rng.random()], np.float32)
        if not self.mask:
            return x
        m = self.legal()
        if self.bad == "mask_shape" and self.t >= 1:
            m = np.ones(4, np.int8)
        if self.bad == "mask_all_false" and self.t >= 1 and agent == "a1":
            m = np.zeros(3, np.int8)
        return {"observation": x, "action_mask": m}

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.episodes += 1
        self.t = 0
        self.last = {}
        self.agents = list(self.possible_agents)
        return {a: self._one(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        """Misbehaves at step 2 when ``bad`` says: ``missing_reward`` (no reward for a1),
        ``nan_reward`` (a1's is NaN), ``unknown_agent`` (an agent ``zz`` appears),
        ``space_change`` (a1's observation space changes from the second episode on)."""
        self.t += 1
        for agent, a in actions.items():  # action t % 3 is the illegal one now
            self.sent.append((agent, int(a), not self.mask or int(a) != self.t % 3))
        rewards = {a: float(actions[a]) + 10 * self.possible_agents.index(a) + 0.1 * self.t
                   for a in self.agents}
        self.last.update({a: int(x) for a, x in actions.items()})
        terms, truncs = {}, {}
        for a in self.agents:
            ends = self.t >= self.possible_agents.index(a) + 2
            final = a == self.possible_agents[-1]
            terms[a] = ends and not (final and self.truncate)
            truncs[a] = ends and final and self.truncate
        if self.bad == "missing_reward" and self.t == 2:
            rewards.pop("a1", None)
        if self.bad == "nan_reward" and self.t == 2:
            rewards["a1"] = float("nan")
        obs = {a: self._one(a) for a in self.agents}
        infos = {a: {} for a in self.agents}
        self.agents = [a for a in self.agents if not (terms[a] or truncs[a])]
        if self.bad == "unknown_agent" and self.t == 2:
            self.agents.append("zz")
        return obs, rewards, terms, truncs, infos


@pytest.fixture
def leaving_game():
    """``leaving_game(**kwargs)`` -> a factory of :class:`LeavingGame`."""
    return lambda **kwargs: functools.partial(LeavingGame, **kwargs)
