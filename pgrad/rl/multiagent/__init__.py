"""Many agents: PettingZoo games as rows of the batch the engine already takes.

``n_agents x B`` rows, one per agent and copy of the game (:mod:`.rows`), a live mask for the
steps an agent acts in (:mod:`.compact`, :mod:`.collector`), one policy over all rows.

Usage, with ``agents`` (the layer above, which this package never imports)::

    from mpe2 import simple_spread_v3
    from pgrad.rl import multiagent

    envs = multiagent.make_agent_rows(simple_spread_v3.parallel_env, num_envs=8)
    agent = multiagent.use_agent_rows(agents.make("ppo", envs, seed=0))
    agent.learn(100_000)  # env steps: steps of the game, all 8 copies
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pgrad.rl.multiagent.collector import RowsCollector, is_agent_rows, use_agent_rows
from pgrad.rl.multiagent.compact import compact_plan, compact_rows
from pgrad.rl.multiagent.pettingzoo_env import (
    TurnBasedParallelEnv,
    acting_agents,
    as_parallel,
    is_pettingzoo,
    shared_spaces,
)
from pgrad.rl.multiagent.rows import AgentRowsVectorEnv
from pgrad.rl.multiagent.statistics import AgentEpisodeStatistics

__all__ = ["AgentEpisodeStatistics", "AgentRowsVectorEnv", "RowsCollector",
           "TurnBasedParallelEnv", "acting_agents", "as_parallel", "compact_plan",
           "compact_rows", "is_agent_rows", "is_pettingzoo", "make_agent_rows", "shared_spaces",
           "use_agent_rows"]


def make_agent_rows(env_fn: Callable[[], Any] | Any, num_envs: int = 1, *,
                    agent_id: bool = False, global_state: bool = False,
                    name: str | None = None) -> AgentEpisodeStatistics:
    """``num_envs`` copies of a PettingZoo game as agent rows with their episode statistics:
    the vector env to give ``agents.make`` (see :class:`AgentRowsVectorEnv` for the
    arguments)."""
    return AgentEpisodeStatistics(AgentRowsVectorEnv(
        env_fn, num_envs, agent_id=agent_id, global_state=global_state, name=name))
