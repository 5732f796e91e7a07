"""How a connect-four learner plays tactically against the random (or the tactical) player: at
each of its moves, was an immediate win on the board (did it take one?), and if not, did the
opponent threaten one (did it block?).

    .venv/bin/python docs/multiagent/c4_tactics.py RUN_OR_SAVED_AGENT --games 300

The learner moves greedily in ``--games`` games per seat (the first game of each copy, reset
with ``--seed`` + the copy), the random player uniformly among the legal moves (with
``--opponent tactics``: the one-move-deep player of ``pgrad.rl.multiagent.tactics``). Prints
one JSON object: per seat, the learner's moves, how many had a winning move on the board and
how many of those it missed, how many had none but faced the opponent's winning move and how
many of those it left open, and the seat's win and loss rates.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

import agents
from agents.learners.self_play import evaluation_rows
from pgrad.rl.multiagent.opponents import random_legal
from pgrad.rl.multiagent.tactics import LINE_GAMES, tactics_player

ENV = "pettingzoo.classic.connect_four_v3:env"
GAME = LINE_GAMES["connect_four_v3"]
COLS = GAME.cols


def seat_tactics(agent, games: int, seat: int, seed: int, against: str = "random") -> dict:
    counts = dict(moves=0, win_on_board=0, win_missed=0, block_needed=0, block_missed=0)
    rows = evaluation_rows(agent)(games)
    rng = np.random.default_rng([seed, seat])
    opponent = random_legal(rng, COLS) if against == "random" else tactics_player(rng, GAME)
    mine = 2 * np.arange(games) + seat
    theirs = mine + 1 - 2 * seat
    result = np.full(games, np.nan)
    try:
        obs, info = rows.reset(seed=seed)
        while np.isnan(result).any():
            masks, live = info["action_mask"], info["live"]
            actions = np.zeros(2 * games, np.int64)
            actions[mine] = agent.act(obs[mine], True, masks[mine])
            actions[theirs] = opponent(obs[theirs], masks[theirs])
            for b in np.flatnonzero(np.isnan(result) & live[mine]):  # the learner's turn
                board, move = GAME.board(obs[mine[b]]), int(actions[mine[b]])
                counts["moves"] += 1
                legal = masks[mine[b]]
                wins = GAME.winning_moves(board, 1, legal).tolist()
                threats = GAME.winning_moves(board, 2, legal).tolist()
                if wins:
                    counts["win_on_board"] += 1
                    counts["win_missed"] += move not in wins
                elif threats:
                    counts["block_needed"] += 1
                    counts["block_missed"] += move not in threats
            obs, _, _, _, info = rows.step(actions)
            ended = info.get("_team_episode")
            if ended is not None:  # first games only
                done = np.flatnonzero(ended[::2] & np.isnan(result))
                result[done] = info["team_episode"]["agent_r"][mine[done]]
    finally:
        rows.close()
    return {**counts, "win": float(np.mean(result > 0)), "loss": float(np.mean(result < 0)),
            "games": games}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a run directory or a saved agent (best/ too)")
    parser.add_argument("--games", type=int, default=300)
    parser.add_argument("--seed", type=int, default=99_000)
    parser.add_argument("--opponent", choices=("random", "tactics"), default="random",
                        help="the uniform random legal player, or the one-move-deep tactical "
                             "player (pgrad.rl.multiagent.tactics)")
    args = parser.parse_args()
    agent = agents.load(args.run, env_id=ENV)
    try:
        print(json.dumps({seat: seat_tactics(agent, args.games, k, args.seed, args.opponent)
                          for k, seat in enumerate(("first", "second"))}, indent=1))
    finally:
        agent.close()


if __name__ == "__main__":
    main()
