"""Evaluation on agent rows: one episode of each of ``B`` copies of a game, the team's return.

:func:`team_episodes` steps agent rows (:class:`~pgrad.rl.multiagent.rows.AgentRowsVectorEnv`
or :class:`~pgrad.rl.multiagent.central.StateRowsVectorEnv`, with their
:class:`~pgrad.rl.multiagent.statistics.AgentEpisodeStatistics`) of ``episodes`` copies, copy
``b`` reset with seed ``seed + b``, until each copy's first episode has ended, and reports

* ``return_mean`` / ``return_std``: over the episodes, of the team return (the mean over the
  game's agents of each agent's return in the episode, as in training's ``episodes.csv``);
* ``length_mean``: the games' lengths in steps; ``agent_return_mean``: each agent's own mean.

:func:`match_results` plays one game of each copy of a two-player game with one player in a
given seat and another in the other, and reports the first's win, draw and loss rates (the
self-play evaluation: :mod:`pgrad.rl.multiagent.self_play`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["match_results", "team_episodes"]


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


def match_results(learner: Callable[[np.ndarray, np.ndarray | None], np.ndarray],
                  opponent: Callable[[np.ndarray, np.ndarray | None], np.ndarray], rows: Any,
                  seat: int, seed: int = 0, max_steps: int = 100_000) -> dict[str, Any]:
    """One game of each copy of a two-player game's ``rows``: the learner in ``seat``, the
    opponent in the other; the learner's win, draw and loss rates.

    A game's result is the sign of the learner's return in it (PettingZoo's classic games give
    +1 to the winner and -1 to the loser, 0 to both at a draw).

    Args:
      learner, opponent: ``(observations [N, D], action masks [N, k] or None) -> actions [N]``,
        called on the rows of the seat each plays (of every copy, live or not).
      rows: agent rows of a game of two agents wrapped in their ``AgentEpisodeStatistics``.
      seat: the learner's: 0 (``possible_agents[0]``, the first to move in PettingZoo's classic
        games) or 1.
      seed: copy ``b`` resets with ``seed + b``.
      max_steps: steps of the game before giving up.

    Returns:
      ``{"win", "draw", "loss", "games"}``: the fractions of the ``B`` games, and ``B``.

    Raises:
      ValueError: a game of other than two agents, a seat other than 0 or 1; RuntimeError:
        some game did not end within ``max_steps``.
    """
    env = rows.unwrapped
    n, B = env.n_agents, env.num_games
    if n != 2:
        raise ValueError(f"env {env.name!r}: matches are played by two agents; it has {n}.")
    if seat not in (0, 1):
        raise ValueError(f"seat must be 0 or 1; got {seat!r}.")
    mine = 2 * np.arange(B) + int(seat)  # [B] the learner's rows
    theirs = mine + 1 - 2 * int(seat)
    obs, info = rows.reset(seed=int(seed))
    result = np.full(B, np.nan)
    for _ in range(int(max_steps)):
        masks = info.get("action_mask")
        actions = np.zeros(2 * B, np.int64)
        for who, at in ((learner, mine), (opponent, theirs)):
            actions[at] = np.asarray(who(obs[at], None if masks is None else masks[at]))
        obs, _, _, _, info = rows.step(actions)
        ended = info.get("_team_episode")
        if ended is not None:
            games = np.flatnonzero(ended[::2] & np.isnan(result))  # first games only
            result[games] = info["team_episode"]["agent_r"][mine[games]]
        if not np.isnan(result).any():
            break
    else:
        raise RuntimeError(f"env {env.name!r}: {int(np.isnan(result).sum())} of {B} games did "
                           f"not end within {max_steps} steps.")
    return {"win": float(np.mean(result > 0)), "draw": float(np.mean(result == 0)),
            "loss": float(np.mean(result < 0)), "games": B}
