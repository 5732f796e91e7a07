"""How a connect-four learner plays tactically against the random (or the tactical) player: at
each of its moves, was an immediate win on the board (did it take one?), and if not, did the
opponent threaten one (did it block?).

    .venv/bin/python docs/multiagent/c4_tactics.py RUN_OR_SAVED_AGENT --games 300

The learner moves greedily in ``--games`` games per seat (the first game of each copy, reset
with ``--seed`` + the copy), the random player uniformly among the legal moves (with
``--opponent tactics``: the one-move-deep player of ``pgrad.rl.multiagent.tactics``). Prints
one JSON object: per seat, the learner's moves, how many had a winning move on the board and
how many of those it missed, how many had none but faced the opponent's winning move and how
many of those it left open, and the seat's win and loss rates. With ``--samples N`` it also
samples the policy N times in each such position and reports the mean probability it gives the
winning moves (``p_win``) and the blocking ones (``p_block``), beside what a uniform choice
among the legal moves would give the block (``p_block_uniform``). Wins and blocks are also
counted apart where the one winning (or threatened) move tops a column of three
(``*_vertical``): the pattern a stacking player meets most.
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


def _sampled(agent, obs: np.ndarray, legal: np.ndarray, moves: list, samples: int) -> float:
    """The fraction of ``samples`` sampled actions of the policy at ``obs`` that are in
    ``moves``."""
    acted = agent.act(np.repeat(obs[None], samples, 0), False, np.repeat(legal[None], samples, 0))
    return float(np.isin(np.asarray(acted), moves).mean())


def _tops_a_column(board: np.ndarray, moves: list, piece: int) -> bool:
    """Whether ``moves`` is one move whose landing cell sits on three of ``piece`` in its
    column."""
    if len(moves) != 1:
        return False
    r = GAME.cell(board, moves[0])[0]
    return r + 3 < GAME.rows and bool((board[r + 1: r + 4, moves[0]] == piece).all())


def seat_tactics(agent, games: int, seat: int, seed: int, against: str = "random",
                 samples: int = 0) -> dict:
    counts = dict(moves=0, win_on_board=0, win_missed=0, block_needed=0, block_missed=0,
                  win_vertical=0, win_vertical_missed=0, block_vertical=0,
                  block_vertical_missed=0)
    p_win, p_block, p_uniform = [], [], []
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
                    if _tops_a_column(board, wins, 1):
                        counts["win_vertical"] += 1
                        counts["win_vertical_missed"] += move not in wins
                    if samples:
                        p_win.append(_sampled(agent, obs[mine[b]], legal, wins, samples))
                elif threats:
                    counts["block_needed"] += 1
                    counts["block_missed"] += move not in threats
                    if _tops_a_column(board, threats, 2):
                        counts["block_vertical"] += 1
                        counts["block_vertical_missed"] += move not in threats
                    if samples:
                        p_block.append(_sampled(agent, obs[mine[b]], legal, threats, samples))
                        p_uniform.append(len(threats) / legal.sum())
            obs, _, _, _, info = rows.step(actions)
            ended = info.get("_team_episode")
            if ended is not None:  # first games only
                done = np.flatnonzero(ended[::2] & np.isnan(result))
                result[done] = info["team_episode"]["agent_r"][mine[done]]
    finally:
        rows.close()
    sampled = {} if not samples else {
        "p_win": float(np.mean(p_win)) if p_win else None,
        "p_block": float(np.mean(p_block)) if p_block else None,
        "p_block_uniform": float(np.mean(p_uniform)) if p_uniform else None}
    return {**counts, **sampled, "win": float(np.mean(result > 0)),
            "loss": float(np.mean(result < 0)), "games": games}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a run directory or a saved agent (best/ too)")
    parser.add_argument("--games", type=int, default=300)
    parser.add_argument("--seed", type=int, default=99_000)
    parser.add_argument("--opponent", choices=("random", "tactics"), default="random",
                        help="the uniform random legal player, or the one-move-deep tactical "
                             "player (pgrad.rl.multiagent.tactics)")
    parser.add_argument("--samples", type=int, default=0,
                        help="sample the policy this many times where a win or a block is on "
                             "the board, and report the mean probabilities (default: 0, no)")
    args = parser.parse_args()
    agent = agents.load(args.run, env_id=ENV)
    try:
        print(json.dumps({seat: seat_tactics(agent, args.games, k, args.seed, args.opponent,
                                             args.samples)
                          for k, seat in enumerate(("first", "second"))}, indent=1))
    finally:
        agent.close()


if __name__ == "__main__":
    main()
