"""A cooperative game where credit assignment matters: ``n`` agents, one team reward.

At every step each agent sees a private cue ``c_i``, one of ``k`` (one-hot), and the fraction of
the episode gone, ``t / episode_steps``, and picks an action ``u_i`` among ``k``. Every agent
receives the same team reward, the fraction of agents whose action matched their cue:

    ``r_t = (1 / n) sum_i 1[u_i = c_i]``

Cues are drawn anew each step; an episode lasts ``episode_steps`` steps (then every agent is
truncated). The optimum is ``u_i = c_i`` for all, a team reward of 1 per step; a uniform random
team gets ``1 / k``.

Why credit matters here: agent ``i``'s own choice moves the team reward by ``1 / n``, while the
other ``n - 1`` agents' random choices move it by about ``sqrt((n - 1) p (1 - p)) / n``. A
baseline that sees only the state -- IPPO's ``V(o_i)``, MAPPO's ``V(s)`` (``s``: every cue) --
cannot remove that noise from agent ``i``'s advantage; COMA's counterfactual baseline, which
holds the others' actions at theirs, can (:mod:`pgrad.transforms.counterfactual`). The game's
``state()`` is every cue, one-hot, end to end, and the fraction of the episode gone (``n k + 1``).

Train on it as on any PettingZoo game::

    pgrad-train --algo mappo --env pgrad.rl.multiagent.cue_game:parallel_env --set credit=coma
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo.utils.env import ParallelEnv

__all__ = ["CueGame", "crowd_env", "parallel_env"]


class CueGame(ParallelEnv):
    """The cue-matching team game (module docstring).

    Args:
      n_agents: ``n`` >= 2.
      n_actions: ``k`` >= 2 (cues and actions).
      episode_steps: steps per episode (>= 1).
    """

    metadata = {"name": "cue_game_v0", "render_modes": [], "is_parallelizable": True}

    def __init__(self, n_agents: int = 8, n_actions: int = 4, episode_steps: int = 5):
        if int(n_agents) < 2 or int(n_actions) < 2 or int(episode_steps) < 1:
            raise ValueError(f"CueGame needs n_agents >= 2, n_actions >= 2 and episode_steps >= "
                             f"1; got {n_agents}, {n_actions}, {episode_steps}.")
        self.n, self.k, self.episode_steps = int(n_agents), int(n_actions), int(episode_steps)
        self.possible_agents = [f"agent_{i}" for i in range(self.n)]
        self.agents: list[str] = []
        self._obs_space = gym.spaces.Box(0.0, 1.0, (self.k + 1,), np.float32)
        self._act_space = gym.spaces.Discrete(self.k)
        self.state_space = gym.spaces.Box(0.0, 1.0, (self.n * self.k + 1,), np.float32)
        self.rng = np.random.default_rng()
        self.cues = np.zeros(self.n, np.int64)
        self.t = 0

    def observation_space(self, agent: Any) -> gym.Space:
        return self._obs_space

    def action_space(self, agent: Any) -> gym.Space:
        return self._act_space

    def _draw(self) -> dict[str, np.ndarray]:
        self.cues = self.rng.integers(self.k, size=self.n)
        eye = np.eye(self.k, dtype=np.float32)
        gone = np.float32(self.t / self.episode_steps)
        return {a: np.append(eye[c], gone) for a, c in zip(self.possible_agents, self.cues)}

    def state(self) -> np.ndarray:
        """``[n k + 1]`` every agent's cue, one-hot, end to end, then ``t / episode_steps``."""
        cues = np.eye(self.k, dtype=np.float32)[self.cues].reshape(-1)
        return np.append(cues, np.float32(self.t / self.episode_steps))

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        self.agents = list(self.possible_agents)
        return self._draw(), {a: {} for a in self.agents}

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        """All agents act; each receives the team reward (module docstring)."""
        if set(actions) != set(self.agents):
            raise ValueError(f"CueGame.step needs one action per agent {self.agents}; got "
                             f"{sorted(actions)}.")
        chosen = np.array([int(actions[a]) for a in self.possible_agents])
        reward = float(np.mean(chosen == self.cues))
        self.t += 1
        done = self.t >= self.episode_steps
        agents = self.agents
        obs = self._draw()  # the final observation, where the episode ends
        rewards = {a: reward for a in agents}
        terms = {a: False for a in agents}
        truncs = {a: done for a in agents}
        infos: dict[str, dict] = {a: {} for a in agents}
        if done:
            self.agents = []
        return obs, rewards, terms, truncs, infos


def parallel_env(n_agents: int = 8, n_actions: int = 4, episode_steps: int = 5) -> CueGame:
    """A :class:`CueGame` (the factory ``pgrad-train --env
    pgrad.rl.multiagent.cue_game:parallel_env`` calls)."""
    return CueGame(n_agents, n_actions, episode_steps)


def crowd_env() -> CueGame:
    """A :class:`CueGame` of 24 agents (4 actions, 5 steps): ``--env
    pgrad.rl.multiagent.cue_game:crowd_env``."""
    return CueGame(24, 4, 5)
