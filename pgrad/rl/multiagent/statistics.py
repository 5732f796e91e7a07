"""Episode statistics of agent rows: each agent's episodes, and each game's team return.

:class:`AgentEpisodeStatistics` is Gymnasium's ``RecordEpisodeStatistics`` for
:class:`pgrad.rl.multiagent.rows.AgentRowsVectorEnv` (so :func:`pgrad.rl.envs.vector.make_vec_env`
keeps it rather than wrapping the rows again), with the counts an agent's episode needs:

* ``info["episode"]`` (``"r"``, ``"l"``, ``"t"``, ``[n B]``) with ``info["_episode"]`` at the rows
  whose agent's episode ended in the step: the agent's return (every reward it received,
  including those that came while it waited for its turn) and its length in the steps it acted.
  The rollout reports one episode per agent (``episodes.csv``: one row per agent), so the mean
  return over them is the team return (below).
* ``info["team_episode"]`` with ``info["_team_episode"]`` at the rows of the copies whose game
  ended: ``"r"`` the team return (the mean over the game's agents of each agent's return),
  ``"agent_r"`` the row's agent's own return in that game and ``"l"`` the game's length in
  env steps, on each of the game's rows.

Each agent's return goes to :attr:`return_queue` when its episode ends, each game's team return
to :attr:`team_return_queue`.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["AgentEpisodeStatistics"]


class AgentEpisodeStatistics(gym.wrappers.vector.RecordEpisodeStatistics):
    """Records each agent's episodes and each game's team return (see the module docstring).

    Args:
      env: the agent rows (``info["live"]`` at each observation, ``info["env_done"]`` where a
        copy's game ended).
      buffer_length: the length of the return / length / team-return queues.
    """

    def __init__(self, env: gym.vector.VectorEnv, buffer_length: int = 100):
        super().__init__(env, buffer_length)
        self.n_agents = int(env.metadata["agent_rows"])
        self.team_return_queue: deque = deque(maxlen=buffer_length)
        R = self.num_envs
        self._live = np.zeros(R, bool)
        self._game_returns = np.zeros(R)
        self._game_lengths = np.zeros(R, int)

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        R = self.num_envs
        self.episode_start_times = np.full(R, time.perf_counter())
        self.episode_returns = np.zeros(R)
        self.episode_lengths = np.zeros(R, int)
        self._game_returns = np.zeros(R)
        self._game_lengths = np.zeros(R, int)
        self._live = np.asarray(info["live"], bool).copy()
        return obs, info

    def step(self, actions: Any):
        obs, rewards, term, trunc, info = self.env.step(actions)
        self.episode_returns += rewards
        self.episode_lengths += self._live  # an agent's length: the steps it acted in
        self._game_returns += rewards
        self._game_lengths += 1
        self._live = np.asarray(info["live"], bool).copy()
        done = np.logical_or(term, trunc)
        if done.any():
            now = time.perf_counter()
            elapsed = np.round(now - self.episode_start_times, 6)
            info["episode"] = {"r": np.where(done, self.episode_returns, 0.0),
                               "l": np.where(done, self.episode_lengths, 0),
                               "t": np.where(done, elapsed, 0.0)}
            info["_episode"] = done
            for i in np.flatnonzero(done):
                self.return_queue.append(self.episode_returns[i])
                self.length_queue.append(self.episode_lengths[i])
                self.time_queue.append(elapsed[i])
            self.episode_count += int(done.sum())
            self.episode_returns[done] = 0.0
            self.episode_lengths[done] = 0
            self.episode_start_times[done] = now
        ended = info.get("env_done")
        if ended is not None and ended.any():
            n = self.n_agents
            team = self._game_returns.reshape(-1, n).mean(axis=1).repeat(n)  # [n B]
            info["team_episode"] = {"r": np.where(ended, team, 0.0),
                                    "agent_r": np.where(ended, self._game_returns, 0.0),
                                    "l": np.where(ended, self._game_lengths, 0)}
            info["_team_episode"] = ended
            self.team_return_queue.extend(team[ended][::n].tolist())
            self._game_returns[ended] = 0.0
            self._game_lengths[ended] = 0
        return obs, rewards, term, trunc, info
