"""The board CNN of agent rows (:mod:`pgrad.rl.multiagent.board`): every board cell of a row
lands where the game's own (H, W, C) observation has it, the network equals convolutions on the
unflattened observation, and a space without a board is refused in one line."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from pgrad.rl import multiagent
from pgrad.rl.multiagent.board import BoardCNN, board_columns

classic = pytest.importorskip("pettingzoo.classic")


def _positions(game_module, moves: int, seed: int):
    """``(rows [2 P, D] of agent rows with agent_id, the game's own observations [2 P, H, W, C]
    of the same agents, the rows env)``: P positions of one copy, both agents' rows at each,
    after 0 .. moves - 1 random legal moves played on the rows and on a plain AEC game."""
    rows = multiagent.make_agent_rows(game_module.env, 1, agent_id=True)
    plain = game_module.env()
    plain.reset(seed=0)
    obs, info = rows.reset(seed=0)
    rng = np.random.default_rng(seed)
    got, want = [], []
    env = rows.unwrapped
    for _ in range(moves):
        for i, agent in enumerate(env.possible_agents):
            got.append(obs[i])
            want.append(plain.observe(agent)["observation"])
        mover = int(np.flatnonzero(info["live"])[0])
        assert env.possible_agents[mover] == plain.agent_selection
        move = int(rng.choice(np.flatnonzero(info["action_mask"][mover])))
        actions = np.zeros(2, np.int64)
        actions[mover] = move
        obs, _, term, trunc, info = rows.step(actions)
        plain.step(move)
        assert not (term.any() or trunc.any())  # stopped before a game can end
    plain.close()
    return np.stack(got), np.stack(want).astype(np.float32), rows


@pytest.mark.parametrize("game, shape, moves", [("connect_four_v3", (6, 7, 2), 6),
                                                ("tictactoe_v3", (3, 3, 2), 4)])
def test_each_cell_of_a_row_is_where_the_game_observes_it(game, shape, moves):
    module = getattr(classic, game)
    got, want, rows = _positions(module, moves, seed=1)
    try:
        env = rows.unwrapped
        found, board, others = board_columns(env.obs_space, got.shape[1])
        assert found == shape
        size = int(np.prod(shape))
        np.testing.assert_array_equal(board, np.arange(size))
        np.testing.assert_array_equal(others, [size, size + 1])  # the agent one-hot
        cnn = BoardCNN(found, board, others, (4,), (), seed=0)
        boards = cnn.boards(tf.constant(got)).numpy()
        assert want.any(axis=(1, 2, 3)).sum() >= 2 * moves - 2  # pieces on the boards
        np.testing.assert_array_equal(boards, want)
    finally:
        rows.close()


def test_the_network_is_convolutions_on_the_unflattened_board():
    """BoardCNN on the rows equals its own layers applied to the game's (6, 7, 2) observations,
    with the agent one-hot beside the flat conv features."""
    got, want, rows = _positions(classic.connect_four_v3, 6, seed=2)
    rows.close()
    shape, board, others = board_columns(rows.unwrapped.obs_space, got.shape[1])
    cnn = BoardCNN(shape, board, others, (8, 8), (16,), "tanh", seed=3)
    out = cnn(tf.constant(got)).numpy()
    h = tf.constant(want)
    for conv in cnn.convs:
        h = conv(h)
    onehot = got[:, -2:]
    np.testing.assert_array_equal(onehot, np.tile(np.eye(2, dtype=np.float32), (6, 1)))
    expected = cnn.mlp(tf.concat([tf.reshape(h, [len(want), -1]), onehot], axis=1)).numpy()
    assert out.shape == (12, 16)
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)


def test_board_columns_of_a_dict_observation_follow_gymnasiums_flatten():
    space = gym.spaces.Dict({"a": gym.spaces.Box(0, 1, (3,)),
                             "board": gym.spaces.Box(0, 1, (3, 4, 2)),
                             "turn": gym.spaces.Discrete(2)})
    sample = space.sample()
    flat = gym.spaces.flatten(space, sample)
    row = np.append(flat, [0.0, 1.0])  # an agent one-hot after it
    shape, board, others = board_columns(space, len(row))
    assert shape == (3, 4, 2)
    np.testing.assert_array_equal(row[board].reshape(shape), sample["board"])
    np.testing.assert_array_equal(others, [0, 1, 2, 27, 28, 29, 30])
    x = tf.constant(row[None], tf.float32)
    np.testing.assert_array_equal(BoardCNN(shape, board, others).boards(x).numpy()[0],
                                  sample["board"].astype(np.float32))


def test_an_observation_without_a_board_is_refused_in_one_line():
    with pytest.raises(ValueError, match="encoder 'board_cnn' reads a board, a 3-D Box") as e:
        board_columns(gym.spaces.Box(0, 1, (18,)), 18, "env 'flat'")
    assert "\n" not in str(e.value) and "env 'flat'" in str(e.value)
