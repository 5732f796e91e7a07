"""Self-play for ``ippo`` on two-player games (``self_play=True``): the pool, the rollout and the
evaluation against a random player and a fixed earlier policy.

:class:`SelfPlay` is the part an :class:`~agents.learners.multiagent.IPPO` agent holds when its
config says ``self_play``. It gives the agent a
:class:`~pgrad.rl.multiagent.self_play.SelfPlayCollector` (the learner in one seat, the opponent
drawn per game from the latest policy and a :class:`~pgrad.rl.multiagent.self_play.SnapshotPool`
of past ones; an MLP or an encoded policy such as ``encoder="board_cnn"``) and keeps, in the
checkpoint:

* ``pool``: up to ``pool_size`` snapshots, one added every ``snapshot_interval`` updates
  (from update 0, the initial policy), taken before the rollout that follows that update;
* ``anchor``: the fixed earlier policy evaluation plays against, the initial policy until update
  ``anchor_update``, then that update's.

:meth:`SelfPlay.evaluate` plays ``episodes`` games for each of {uniform random legal player,
anchor (and the tactical player, in the games it knows)} x {learner first, learner second} and
reports the learner's win/draw/loss rates.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np

from pgrad.rl.multiagent.evaluate import match_results
from pgrad.rl.multiagent.opponents import SnapshotPlayer, random_legal
from pgrad.rl.multiagent.self_play import SelfPlayCollector, SnapshotPool
from pgrad.rl.multiagent.tactics import LineGame, tactics_player

__all__ = ["SelfPlay"]

#: The evaluation's opponents: a uniform random legal player, the fixed earlier policy (and, in
#: the games it knows, the one-move-deep tactical player of pgrad.rl.multiagent.tactics).
OPPONENTS = ("random", "anchor")
TACTICS = "tactics"
SEATS = ("first", "second")


class SelfPlay:
    """The self-play part of an ``ippo`` agent (module docstring).

    Args:
      agent: the IPPO agent, built (its network, mirror and rows collector exist); its
        collector is replaced by a :class:`SelfPlayCollector` over the same rows.

    Snapshots are the acting copy's flat policy weights (``agent.mirror.flat_numpy()``): the
    numpy mirror's for an MLP, the policy variables of the compiled actor for a network with an
    encoder (``encoder="board_cnn"``); :class:`SnapshotPlayer` acts either.

    Raises:
      ValueError: the game has other than two agents, or actions other than ``Discrete``; the
        policy is recurrent, or its encoder keeps non-trainable state (a snapshot holds the
        trainable weights).
    """

    def __init__(self, agent: Any):
        name = agent.env_name
        if not isinstance(agent.action_space, gym.spaces.Discrete):
            raise ValueError(f"self_play plays board games of Discrete moves; env {name!r} "
                             f"acts in {agent.action_space}.")
        self.player = SnapshotPlayer(agent.net)
        old = agent.collector
        collector = SelfPlayCollector(old.envs, old.name, self.player, old.obs_norm,
                                      old.reward_norm)
        collector.env_steps = old.env_steps
        agent.collector = collector
        collector.reset(seed=agent.seed)
        #: The tactical player's board, where it knows the game (it then plays in training
        #: with tactics_prob > 0, and in evaluation); a game it does not know is refused with
        #: tactics_prob > 0.
        self.tactics: LineGame | None = None
        try:
            self.tactics = collector.tactics_game()
        except ValueError:
            if float(agent.cfg.tactics_prob) > 0:
                raise
        size = self.player.size
        self.pool = SnapshotPool(agent.cfg.pool_size, size, "self_play_pool")
        self.anchor = SnapshotPool(1, size, "self_play_anchor")
        self.anchor.add(agent.mirror.flat_numpy(), 0)

    def trackables(self) -> dict[str, Any]:
        """The pool's and the anchor's variables (for the agent's checkpoint)."""
        return {**self.pool.trackables(), **self.anchor.trackables()}

    def collect(self, agent: Any, policy_fn: Any, updates: int) -> tuple[Any, list]:
        """The rollout of update ``updates + 1``: snapshots taken first where due, then new
        games against opponents from the pool (:meth:`SelfPlayCollector.collect_games`)."""
        cfg = agent.cfg
        if updates % int(cfg.snapshot_interval) == 0 and self.pool.last_update() != updates:
            self.pool.add(agent.mirror.flat_numpy(), updates)
        if updates == int(cfg.anchor_update) and self.anchor.last_update() != updates:
            self.anchor.add(agent.mirror.flat_numpy(), updates)
        weights, _ = self.pool.snapshots()
        return agent.collector.collect_games(policy_fn, int(cfg.n_steps), [agent.seed, updates],
                                             weights, float(cfg.latest_prob),
                                             float(cfg.random_prob), float(cfg.tactics_prob))

    def evaluate(self, agent: Any, episodes: int, deterministic: bool, seed: int,
                 build_rows: Any) -> dict[str, Any]:
        """The learner's results against each opponent in each seat.

        Args:
          agent: the agent (acts greedily with ``deterministic``, else samples).
          episodes: games per opponent and seat (copies of the game).
          deterministic: the learner's actions; the anchor always samples from its policy (two
            greedy policies would play one game over and over), the random player draws
            uniformly among the legal moves.
          seed: copy ``b`` of every match resets with ``seed + b``; the opponents' generators
            follow from it.
          build_rows: ``(copies) -> agent rows`` of fresh copies of the game.

        Returns:
          ``{"games": {opponent: {seat: {"win", "draw", "loss", "games"}}, "anchor_update":
          u}, "win_rate_first", "win_rate_second", "draw_rate_first", "draw_rate_second",
          "loss_rate_first", "loss_rate_second"`` (against the random player),
          ``"anchor_win_rate_first"``, ``"anchor_win_rate_second"``}; in a game the tactical
          player knows, also ``games["tactics"]`` and ``"tactics_win_rate_first"``,
          ``"tactics_win_rate_second"``.
        """
        anchor_weights, anchor_updates = self.anchor.snapshots()
        n_actions = int(agent.action_space.n)

        def learner(obs: np.ndarray, masks: np.ndarray | None) -> np.ndarray:
            return agent.act(obs, deterministic, masks)

        games: dict[str, Any] = {}
        opponents = OPPONENTS + ((TACTICS,) if self.tactics is not None else ())
        for k, opponent in enumerate(opponents):
            games[opponent] = {}
            for seat, seat_name in enumerate(SEATS):
                rng = np.random.default_rng([int(seed), k, seat])
                if opponent == "random":
                    act = random_legal(rng, n_actions)
                elif opponent == TACTICS:
                    assert self.tactics is not None
                    act = tactics_player(rng, self.tactics)
                else:
                    def act(obs, masks, rng=rng):
                        return self.player.act(anchor_weights[0], obs, masks, rng)
                rows = build_rows(int(episodes))
                try:
                    games[opponent][seat_name] = match_results(learner, act, rows, seat,
                                                               int(seed))
                finally:
                    rows.close()
        games["anchor_update"] = int(anchor_updates[0])
        out: dict[str, Any] = {"games": games}
        for seat_name in SEATS:
            for what in ("win", "draw", "loss"):
                out[f"{what}_rate_{seat_name}"] = games["random"][seat_name][what]
            out[f"anchor_win_rate_{seat_name}"] = games["anchor"][seat_name]["win"]
            if TACTICS in games:
                out[f"tactics_win_rate_{seat_name}"] = games[TACTICS][seat_name]["win"]
        return out


def evaluation_rows(agent: Any) -> Any:
    """``(copies) -> agent rows`` of fresh copies of the agent's game (for :meth:`SelfPlay.
    evaluate`)."""
    from pgrad.rl.multiagent.games import game_source

    game, _, _ = game_source(agent.env_id, agent.name)
    return lambda copies: agent._build_rows(game, dataclasses.replace(agent.cfg,
                                                                      num_envs=int(copies)))
