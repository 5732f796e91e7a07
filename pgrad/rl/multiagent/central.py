"""Agent rows whose observation carries the copy's global state: the input of a central critic.

:class:`StateRowsVectorEnv` is :class:`pgrad.rl.multiagent.rows.AgentRowsVectorEnv` with
``global_state=True`` and each row's observation widened to

    ``[own observation (d) | agent one-hot (n, with agent_id) | the copy's state (S)]``

so the rollout, the compaction of dead rows and the update carry the state beside the
observation without a field of their own. A MAPPO agent's actor reads the first ``d (+ n)``
columns, its critic the state (and, as it chooses, the rest): columns :attr:`own_columns` and
:attr:`state_columns`.

The state is the game's ``state()`` (or, for a game without one, its agents' flat observations
end to end, as :class:`~pgrad.rl.multiagent.rows.AgentRowsVectorEnv` gives it). A done row's
final observation (``info["final_obs"]``) carries the state *at the end of its episode*: taken
from the game before the rows reset it, so a truncated episode's value bootstraps from the
state it ended in, not from the next episode's first state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from pgrad.rl.multiagent.rows import AgentRowsVectorEnv

__all__ = ["StateRowsVectorEnv"]


class _KeepsFinalState:
    """A game seen through the rows, which remembers its state when its episode ends (before
    the rows reset it). Everything else is the game's own."""

    def __init__(self, game: Any):
        self._game = game
        #: ``[S]`` float32: the state after the step that ended the last episode (None: the
        #: game has no ``state()``).
        self.final_state: np.ndarray | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._game, name)

    def step(self, actions: dict) -> tuple:
        out = self._game.step(actions)
        if not self._game.agents:
            try:
                self.final_state = np.asarray(self._game.state(), np.float32).reshape(-1)
            except (AttributeError, NotImplementedError):
                self.final_state = None
        return out


def _state_size(game: Any, n: int, obs_dim: int) -> int:
    """``S``: the size of the game's ``state_space`` (or of ``state()`` after a reset), else
    the joint observation's ``n d``."""
    space = getattr(game, "state_space", None)
    if isinstance(space, gym.spaces.Box):
        return int(np.prod(space.shape))
    try:
        return int(np.asarray(game.state()).size)
    except Exception:  # no state() before a reset, or none at all: the joint observation
        return n * obs_dim


class StateRowsVectorEnv(AgentRowsVectorEnv):
    """Agent rows that observe ``[own observation | one-hot | state]`` (module docstring).

    Args: as :class:`~pgrad.rl.multiagent.rows.AgentRowsVectorEnv` (``global_state`` is
      always on).

    Raises:
      as :class:`~pgrad.rl.multiagent.rows.AgentRowsVectorEnv`; ValueError: the game's
      ``state()`` changes size from the size its ``state_space`` announced.
    """

    def __init__(self, env_fn: Callable[[], Any] | Any, num_envs: int = 1, *,
                 agent_id: bool = False, name: str | None = None):
        super().__init__(env_fn, num_envs, agent_id=agent_id, global_state=True, name=name)
        self.games = [_KeepsFinalState(g) for g in self.games]
        n = self.n_agents
        #: ``d (+ n)``: the columns of the agent's own observation (and one-hot).
        own: Any = self.single_observation_space  # the rows' Box
        self.own_dim = int(own.shape[0])
        self.state_dim = _state_size(self.games[0]._game, n, self.obs_dim)
        inf = np.full(self.state_dim, np.inf, np.float32)
        self.single_observation_space = gym.spaces.Box(
            np.concatenate([own.low, -inf]), np.concatenate([own.high, inf]), dtype=np.float32)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space,
                                                              self.num_envs)

    @property
    def own_columns(self) -> np.ndarray:
        """``[d (+ n)]`` int: the columns of a row's own observation (and agent one-hot)."""
        return np.arange(self.own_dim)

    @property
    def state_columns(self) -> np.ndarray:
        """``[S]`` int: the columns of the copy's state."""
        return np.arange(self.own_dim, self.own_dim + self.state_dim)

    def _check_state(self, where: str) -> np.ndarray:
        state = self._state
        if state is None or state.shape[1] != self.state_dim:
            got = None if state is None else state.shape[1]
            raise ValueError(f"env {self.name!r} at {where}: the state has {got} values; its "
                             f"state_space announced {self.state_dim}.")
        return state

    def reset(self, *, seed: int | None = None, options: dict | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        """As the rows' reset; observations ``[n B, d (+ n) + S]``."""
        obs, info = super().reset(seed=seed, options=options)
        return np.concatenate([obs, self._check_state("reset")], axis=1), info

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                          dict[str, Any]]:
        """As the rows' step; observations, and each done row's final observation, carry the
        state (at the end of the episode for the rows of a copy that reset)."""
        obs, rewards, term, trunc, info = super().step(actions)
        state = self._check_state(f"step {self._steps}")
        if "final_obs" in info:
            n = self.n_agents
            final, done = info["final_obs"], info["_final_obs"]
            ended = info["env_done"]
            for r in np.flatnonzero(done):
                game = self.games[r // n]
                if ended[r] and game.final_state is not None:
                    last_state = game.final_state
                elif ended[r]:  # no state(): the joint observation at the end, as the rows do
                    rows = range((r // n) * n, (r // n + 1) * n)
                    last_state = np.concatenate([
                        final[q][: self.obs_dim] if done[q] else np.zeros(self.obs_dim)
                        for q in rows]).astype(np.float32)
                else:  # the agent left; its copy goes on: the state after this step
                    last_state = state[r]
                final[r] = np.concatenate([final[r], last_state]).astype(np.float32)
        return np.concatenate([obs, state], axis=1), rewards, term, trunc, info
