"""A one-move-deep tactical player for k-in-a-row board games (PettingZoo's connect four and
tic-tac-toe): it takes a winning move when the board has one, else blocks the opponent's, else
moves uniformly among the legal moves.

It is the opponent self-play mixes in with ``tactics_prob`` (:mod:`pgrad.rl.multiagent.
self_play`): against the random player an open three goes unpunished most of the time, so a
learner trained on the random player and itself leaves most needed blocks open; this player
wins on every open four at once.

It reads the board from the observation rows of :class:`~pgrad.rl.multiagent.rows.
AgentRowsVectorEnv`: PettingZoo's planes ``[rows, cols, 2]`` flattened in the row's first
``rows * cols * 2`` columns, plane 0 the mover's pieces, plane 1 the opponent's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pgrad.rl.multiagent.opponents import Act, random_legal

__all__ = ["LineGame", "LINE_GAMES", "line_game", "tactics_player"]

#: The four directions a line runs in: along a row, along a column, both diagonals.
_DIRECTIONS = ((0, 1), (1, 0), (1, 1), (1, -1))


@dataclass(frozen=True)
class LineGame:
    """A k-in-a-row board.

    Args:
      rows, cols: the board's shape as the observation's planes hold it.
      k: pieces in a line that win.
      gravity: an action names a column and the piece lands on its lowest empty cell (row
        ``rows - 1`` is the bottom), as in connect four; else an action names the cell
        ``(a // cols, a % cols)``, as in tic-tac-toe.
    """

    rows: int
    cols: int
    k: int
    gravity: bool

    @property
    def n_actions(self) -> int:
        return self.cols if self.gravity else self.rows * self.cols

    def board(self, row_obs: np.ndarray) -> np.ndarray:
        """``[rows, cols]`` int: 1 the mover's pieces, 2 the opponent's, 0 empty."""
        planes = np.asarray(row_obs[: self.rows * self.cols * 2]).reshape(self.rows, self.cols, 2)
        return (planes[..., 0] > 0.5) + 2 * (planes[..., 1] > 0.5)

    def cell(self, board: np.ndarray, action: int) -> tuple[int, int] | None:
        """Where ``action`` puts a piece on ``board``, or None where it cannot."""
        if self.gravity:
            empty = np.flatnonzero(board[:, action] == 0)
            return (int(empty[-1]), int(action)) if len(empty) else None
        r, c = divmod(int(action), self.cols)
        return (r, c) if board[r, c] == 0 else None

    def completes(self, board: np.ndarray, cell: tuple[int, int], piece: int) -> bool:
        """Whether ``piece`` placed at ``cell`` makes ``k`` in a line through it."""
        r, c = cell
        for dr, dc in _DIRECTIONS:
            run = 1
            for sign in (1, -1):
                y, x = r + sign * dr, c + sign * dc
                while 0 <= y < self.rows and 0 <= x < self.cols and board[y, x] == piece:
                    run, y, x = run + 1, y + sign * dr, x + sign * dc
            if run >= self.k:
                return True
        return False

    def winning_moves(self, board: np.ndarray, piece: int, legal: np.ndarray) -> np.ndarray:
        """The legal actions with which ``piece`` (1 the mover, 2 the opponent) would complete a
        line at once."""
        out = []
        for a in np.flatnonzero(legal):
            cell = self.cell(board, int(a))
            if cell is not None and self.completes(board, cell, piece):
                out.append(int(a))
        return np.asarray(out, np.int64)


#: The games the tactical player knows, by PettingZoo's ``metadata["name"]``.
LINE_GAMES = {
    "connect_four_v3": LineGame(rows=6, cols=7, k=4, gravity=True),
    "tictactoe_v3": LineGame(rows=3, cols=3, k=3, gravity=False),
}


def line_game(name: str, obs_dim: int, n_actions: int) -> LineGame:
    """The :class:`LineGame` of the game called ``name`` whose rows have ``obs_dim`` columns
    (at least the planes) and ``n_actions`` actions.

    Raises:
      ValueError: the game is not one of :data:`LINE_GAMES`, or its rows do not hold its board.
    """
    game = LINE_GAMES.get(str(name))
    if game is None:
        raise ValueError(f"the tactics opponent plays {', '.join(sorted(LINE_GAMES))}; game "
                         f"{name!r} is none of them: set tactics_prob=0.")
    planes = game.rows * game.cols * 2
    if int(obs_dim) < planes or int(n_actions) != game.n_actions:
        raise ValueError(f"game {name!r}: the tactics opponent reads a [{game.rows}, {game.cols}"
                         f", 2] board and {game.n_actions} actions; the rows have {obs_dim} "
                         f"columns and {n_actions} actions.")
    return game


def tactics_player(rng: np.random.Generator, game: LineGame) -> Act:
    """The one-move-deep player of ``game`` (module docstring): per row, a winning move if
    there is one, else a move that takes the opponent's winning cell, else a uniform legal
    move; ties are broken uniformly by ``rng``.

    Acts on observations ``[N, D]`` and action masks ``[N, A]`` bool (None: every action
    whose cell is free is legal); returns actions ``[N]`` int64.
    """
    fallback = random_legal(rng, game.n_actions)

    def act(obs: np.ndarray, action_mask: np.ndarray | None) -> np.ndarray:
        obs = np.asarray(obs)
        N = len(obs)
        boards = [game.board(o) for o in obs]
        if action_mask is None:
            legal = np.array([[game.cell(b, a) is not None for a in range(game.n_actions)]
                              for b in boards], bool).reshape(N, game.n_actions)
        else:
            legal = np.asarray(action_mask, bool)
        actions = fallback(obs, legal)  # [N]; drawn for every row, so the draws do not depend
        for n, board in enumerate(boards):  # on which rows have a tactic
            for piece in (1, 2):  # win first, else block
                moves = game.winning_moves(board, piece, legal[n])
                if len(moves):
                    actions[n] = moves[rng.integers(len(moves))]
                    break
        return actions

    return act
