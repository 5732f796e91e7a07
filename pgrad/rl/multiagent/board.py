"""A small CNN over the board of a board game's agent rows (``ippo``'s ``encoder="board_cnn"``).

An agent row (:class:`~pgrad.rl.multiagent.rows.AgentRowsVectorEnv`) is the agent's observation
flattened in C order (Gymnasium's ``flatten``: a ``Box`` reshaped to ``[-1]``, a ``Dict`` /
``Tuple`` its entries in the space's order), then, with ``agent_id``, the agent's one-hot. A
board game observes a 3-D ``Box`` ``(H, W, C)`` (connect four ``(6, 7, 2)``, tic-tac-toe
``(3, 3, 2)``: the mover's pieces, the opponent's). :func:`board_columns` finds where that board
sits in the row; :class:`BoardCNN` reshapes those columns back to ``[N, H, W, C]``, applies
3x3 ``'same'`` convolutions (ReLU), flattens them, puts every other column of the row (the
agent one-hot, any other observation entry) beside them and ends in an MLP of ``hidden``.
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf

from pgrad.rl.models.dense import mlp

__all__ = ["BOARD_CNN", "BoardCNN", "board_columns"]

#: The ``encoder`` setting of ``ippo`` that selects :class:`BoardCNN`.
BOARD_CNN = "board_cnn"


def _find_board(space: gym.Space, start: int) -> tuple[tuple[int, int, int], int] | None:
    """``((H, W, C), column of its first cell)`` of the first 3-D Box in ``space`` flattened
    from column ``start``, or None."""
    if isinstance(space, gym.spaces.Box):
        if len(space.shape) != 3:
            return None
        h, w, c = (int(s) for s in space.shape)
        return (h, w, c), start
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        subs = space.spaces.values() if isinstance(space, gym.spaces.Dict) else space.spaces
        for sub in subs:  # gym.spaces.flatten's order
            found = _find_board(sub, start)
            if found is not None:
                return found
            start += int(gym.spaces.flatdim(sub))
    return None


def board_columns(space: gym.Space, row_dim: int, where: str = "the env"
                  ) -> tuple[tuple[int, int, int], np.ndarray, np.ndarray]:
    """Where the board sits in a row of ``row_dim`` columns whose first columns flatten
    ``space`` (an agent's observation, its action mask left out).

    Returns:
      ``((H, W, C), board [H W C] column indices in C order, others [K] every other column)``.

    Raises:
      ValueError: ``space`` has no 3-D ``Box``, or its board does not fit in the row.
    """
    found = _find_board(space, 0)
    if found is None:
        raise ValueError(f"encoder {BOARD_CNN!r} reads a board, a 3-D Box (H, W, C) in the "
                         f"observation; {where} observes {space}; use encoder='mlp'")
    shape, start = found
    size = int(np.prod(shape))
    if start + size > int(row_dim):
        raise ValueError(f"encoder {BOARD_CNN!r}: the board {shape} at column {start} does not "
                         f"fit in rows of {row_dim} columns ({where})")
    board = np.arange(start, start + size)
    others = np.setdiff1d(np.arange(int(row_dim)), board)
    return shape, board, others


class BoardCNN(keras.layers.Layer):
    """``[N, D]`` rows -> ``[N, hidden[-1]]`` (or the flat conv features without ``hidden``).

    Args:
      shape: the board ``(H, W, C)``.
      board: ``[H W C]`` the row's columns of the board, in C order.
      others: ``[K]`` the other columns, put beside the conv features.
      filters: the output channels of each 3x3 ``'same'`` ReLU convolution.
      hidden, activation: the MLP after them (:func:`pgrad.rl.models.dense.mlp`).
      seed: initialiser seed; ortho_init: orthogonal initialisation (gain sqrt 2 for the
        convolutions, as pgrad's image CNNs), else PyTorch's default.
    """

    def __init__(self, shape: Sequence[int], board: np.ndarray, others: np.ndarray,
                 filters: Sequence[int] = (64, 64), hidden: Sequence[int] = (128,),
                 activation: str = "relu", seed: int = 0, ortho_init: bool = True,
                 name: str = "board_cnn"):
        super().__init__(name=name)
        self.shape = tuple(int(s) for s in shape)
        if len(self.shape) != 3 or len(board) != int(np.prod(self.shape)):
            raise ValueError(f"{name}: {len(board)} board columns for a board of shape "
                             f"{self.shape}")
        self.board = [int(c) for c in board]
        self.others = [int(c) for c in others]
        self._contiguous = self.board == list(range(self.board[0], self.board[0] + len(board)))
        self.convs = []
        for i, f in enumerate(filters):
            init = (keras.initializers.Orthogonal(np.sqrt(2.0), seed=seed + i) if ortho_init
                    else keras.initializers.VarianceScaling(1 / 3, "fan_in", "uniform",
                                                            seed=seed + i))
            self.convs.append(keras.layers.Conv2D(int(f), 3, padding="same", activation="relu",
                                                  kernel_initializer=init,
                                                  name=f"{name}_conv{i}"))
        h, w, _ = self.shape
        width = h * w * (int(filters[-1]) if filters else self.shape[2]) + len(self.others)
        hidden = tuple(int(x) for x in hidden)
        self.mlp = (mlp(width, hidden, None, activation, name=f"{name}_mlp", seed=seed + 100,
                        ortho_init=ortho_init) if hidden else None)

    def boards(self, x: tf.Tensor) -> tf.Tensor:
        """``[N, D]`` rows -> ``[N, H, W, C]`` their boards."""
        if self._contiguous:
            cells = x[:, self.board[0]: self.board[0] + len(self.board)]
        else:
            cells = tf.gather(x, self.board, axis=1)
        return tf.reshape(cells, [-1, *self.shape])

    def call(self, x: tf.Tensor) -> tf.Tensor:
        h = self.boards(x)
        for conv in self.convs:
            h = conv(h)
        h = tf.reshape(h, [tf.shape(h)[0], -1])  # [N, H W F]
        if self.others:  # the agent one-hot, any other observation entry: beside the board
            h = tf.concat([h, tf.gather(x, self.others, axis=1)], axis=1)
        return h if self.mlp is None else self.mlp(h)
