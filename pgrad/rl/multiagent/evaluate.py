"""Evaluation on agent rows: one episode of each of ``B`` copies of a game, the team's return.

:func:`team_episodes` steps agent rows (:class:`~pgrad.rl.multiagent.rows.AgentRowsVectorEnv`
or :class:`~pgrad.rl.multiagent.central.StateRowsVectorEnv`, with their
:class:`~pgrad.rl.multiagent.statistics.AgentEpisodeStatistics`) of ``episodes`` copies, copy
``b`` reset with seed ``seed + b``, until each copy's first episode has ended, and reports

* ``return_mean`` / ``return_std``: over the episodes, of the team return (the mean over the
  game's agents of each agent's return in the episode, as in training's ``episodes.csv``);
* ``length_mean``: the games' lengths in steps; ``agent_return_mean``: each agent's own mean.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["team_episodes"]


def team_episodes(act: Callable[[np.ndarray, np.ndarray | None], np.ndarray], rows: Any,
                  seed: int = 0, max_steps: int = 100_000) -> dict[str, Any]:
    """One episode of each copy of ``rows`` (module docstring).

    Args:
      act: ``(observations [n B, D], action masks [n B, k] or None) -> actions [n B, ...]``.
      rows: agent rows wrapped in their ``AgentEpisodeStatistics``; every copy plays one
        episode (the rows of a copy that ended go on acting in its next episode, unreported).
      seed: copy ``b`` resets with ``seed + b``.
      max_steps: steps of the game before giving up (a game that never ends).

    Returns:
      ``{"return_mean", "return_std", "length_mean", "episodes", "agent_return_mean"}``.

    Raises:
      RuntimeError: some copy's episode did not end within ``max_steps``.
    """
    env = rows.unwrapped
    n, B = env.n_agents, env.num_games
    obs, info = rows.reset(seed=int(seed))
    team = np.full(B, np.nan)
    own = np.full((B, n), np.nan)
    length = np.zeros(B)
    for _ in range(int(max_steps)):
        actions = act(obs, info.get("action_mask"))
        obs, _, _, _, info = rows.step(actions)
        ended = info.get("_team_episode")
        if ended is not None:
            games = np.flatnonzero(ended[::n] & np.isnan(team))  # first episodes only
            if games.size:
                stats = info["team_episode"]
                team[games] = stats["r"][games * n]
                length[games] = stats["l"][games * n]
                own[games] = stats["agent_r"].reshape(B, n)[games]
        if not np.isnan(team).any():
            break
    else:
        raise RuntimeError(f"env {env.name!r}: {int(np.isnan(team).sum())} of {B} episodes did "
                           f"not end within {max_steps} steps.")
    return {"return_mean": float(team.mean()), "return_std": float(team.std()),
            "length_mean": float(length.mean()), "episodes": B,
            "agent_return_mean": {str(a): float(own[:, i].mean())
                                  for i, a in enumerate(env.possible_agents)}}
