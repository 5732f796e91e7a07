"""How a connect-four learner plays tactically against the random player: at each of its moves,
was an immediate win on the board (did it take one?), and if not, did the opponent threaten one
(did it block?).

    .venv/bin/python docs/multiagent/c4_tactics.py RUN_OR_SAVED_AGENT --games 300

The learner moves greedily in ``--games`` games per seat (the first game of each copy, reset
with ``--seed`` + the copy), the random player uniformly among the legal moves. Prints one JSON
object: per seat, the learner's moves, how many had a winning move on the board and how many of
those it missed, how many had none but faced the opponent's winning move and how many of those
it left open, and the seat's win and loss rates.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

import agents
from agents.learners.self_play import evaluation_rows
from pgrad.rl.multiagent.opponents import random_legal

ENV = "pettingzoo.classic.connect_four_v3:env"
ROWS, COLS = 6, 7
LINES = ((0, 1), (1, 0), (1, 1), (1, -1))


def landing_row(board: np.ndarray, col: int) -> int | None:
    """The row a piece dropped in ``col`` lands on (row 5 is the bottom), or None: full."""
    empty = np.flatnonzero(board[:, col] == 0)
    return int(empty[-1]) if len(empty) else None


def four_in_a_row(board: np.ndarray, piece: int) -> bool:
    mine = board == piece
    for r in range(ROWS):
        for c in range(COLS):
            for dr, dc in LINES:
                cells = [(r + dr * k, c + dc * k) for k in range(4)]
                if all(0 <= y < ROWS and 0 <= x < COLS and mine[y, x] for y, x in cells):
                    return True
    return False


def winning_columns(board: np.ndarray, piece: int) -> list[int]:
    """The columns where ``piece`` completes four in a row with its next move."""
    out = []
    for col in range(COLS):
        row = landing_row(board, col)
        if row is not None:
            after = board.copy()
            after[row, col] = piece
            if four_in_a_row(after, piece):
                out.append(col)
    return out


def board_of(row_obs: np.ndarray) -> np.ndarray:
    """``[6, 7]``: 1 the mover's pieces, 2 the opponent's (PettingZoo's planes, in the row's
    first 84 columns)."""
    planes = np.asarray(row_obs[: ROWS * COLS * 2]).reshape(ROWS, COLS, 2)
    return (planes[..., 0] + 2 * planes[..., 1]).astype(int)


def seat_tactics(agent, games: int, seat: int, seed: int) -> dict:
    counts = dict(moves=0, win_on_board=0, win_missed=0, block_needed=0, block_missed=0)
    rows = evaluation_rows(agent)(games)
    opponent = random_legal(np.random.default_rng([seed, seat]), COLS)
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
                board, move = board_of(obs[mine[b]]), int(actions[mine[b]])
                counts["moves"] += 1
                wins, threats = winning_columns(board, 1), winning_columns(board, 2)
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
    args = parser.parse_args()
    agent = agents.load(args.run, env_id=ENV)
    try:
        print(json.dumps({seat: seat_tactics(agent, args.games, k, args.seed)
                          for k, seat in enumerate(("first", "second"))}, indent=1))
    finally:
        agent.close()


if __name__ == "__main__":
    main()
