"""The rollout of agent rows: :class:`pgrad.rl.collection.rollout.Collector` plus the live mask.

:class:`RowsCollector` steps an :class:`~pgrad.rl.multiagent.rows.AgentRowsVectorEnv` as the
Collector steps any vector env, remembers which rows were live at each step, and returns each
rollout through :func:`pgrad.rl.multiagent.compact.compact_rows`: live steps first, dead ones
masked out of the update (``Trajectory.mask``). It counts env steps as steps of the game --
one step of all ``B`` copies is ``B`` env steps, however many agents act in it (BenchMARL's
frames) -- so ``learn(total_steps)`` and ``episodes.csv``'s ``step`` read in game steps.

:func:`use_agent_rows` gives an agent built on agent rows this collector.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pgrad.rl.collection.rollout import Collector, PolicyFn, Trajectory
from pgrad.rl.multiagent.compact import compact_rows

__all__ = ["RowsCollector", "is_agent_rows", "use_agent_rows"]


def is_agent_rows(envs: Any) -> bool:
    """Whether ``envs`` (a vector env, wrappers included) presents agent rows."""
    return bool(getattr(envs, "metadata", {}).get("agent_rows"))


class RowsCollector(Collector):
    """A :class:`pgrad.rl.collection.rollout.Collector` over agent rows (see the module docstring).

    Args: as :class:`pgrad.rl.collection.rollout.Collector`; ``envs`` must present agent rows
      (``metadata["agent_rows"]`` agents per copy, ``info["live"]`` at each observation).
    """

    def __init__(self, envs, name: str, obs_norm=None, reward_norm=None):
        if not is_agent_rows(envs):
            raise ValueError(f"RowsCollector needs agent rows (an AgentRowsVectorEnv); env "
                             f"{name!r} is a plain vector env.")
        super().__init__(envs, name, obs_norm, reward_norm)
        self.n_agents = int(envs.metadata["agent_rows"])
        self.num_games = self.num_envs // self.n_agents
        #: ``[n B]`` bool: the rows live at :attr:`current_obs`.
        self.live = np.ones(self.num_envs, bool)
        self._live_steps: list[np.ndarray] = []

    def reset(self, seed: int | Sequence[int] | None = None) -> None:
        super().reset(seed)
        rows: Any = self.envs.unwrapped  # the AgentRowsVectorEnv
        self.live = np.array(rows.live, dtype=np.bool_)

    def record_step(self, obs, acted: tuple, action_mask, stepped: tuple, where: int,
                    check: bool):
        """:meth:`pgrad.rl.collection.rollout.Collector.record_step`, keeping the live rows of the
        step and counting it as ``B`` env steps."""
        before = self.env_steps
        self._live_steps.append(self.live)
        self.live = np.array(stepped[4]["live"], dtype=np.bool_)
        pieces, episodes = super().record_step(obs, acted, action_mask, stepped, where, check)
        self.env_steps = before + self.num_games
        return pieces, [(self.env_steps, r, length) for _, r, length in episodes]

    def collect(self, policy_fn: PolicyFn, num_steps: int) -> tuple[Trajectory, list]:
        """``num_steps`` steps -> ``(Trajectory [num_steps, n B] with live steps first and
        ``mask`` 1.0 on them, episodes)`` (one episode per agent, see
        :mod:`pgrad.rl.multiagent.statistics`)."""
        self._live_steps = []
        traj, episodes = super().collect(policy_fn, num_steps)
        live = np.stack(self._live_steps[-num_steps:])  # [T, n B]
        self._live_steps = []
        return compact_rows(traj, live), episodes

    def collect_episodes(self, policy_fn: PolicyFn, min_steps: int,
                         max_vector_steps: int = 100_000) -> tuple[Trajectory, list]:
        raise ValueError(f"env {self.name!r} presents agent rows; whole-episode rollouts "
                         "(rollout='episodes', REINFORCE's default) are not supported on them "
                         "yet: use rollout='steps'.")


def use_agent_rows(agent: Any) -> Any:
    """Gives ``agent`` (built on an :class:`~pgrad.rl.multiagent.rows.AgentRowsVectorEnv`) a
    :class:`RowsCollector` over the same env, reset with the agent's seed; returns the agent.

    Raises:
      ValueError: the agent's env does not present agent rows; a recurrent policy (its state
        would follow the rewritten rows, not time).
    """
    old = agent.collector
    if getattr(getattr(agent, "net", None), "recurrent", False):
        raise ValueError("agent rows take feed-forward policies for now; a recurrent core's "
                         "state would run through the reordered rows.")
    new = RowsCollector(old.envs, old.name, old.obs_norm, old.reward_norm)
    new.env_steps = old.env_steps
    agent.collector = new
    new.reset(seed=agent.seed)
    return agent
