"""Self-play with ippo's board CNN (``encoder="board_cnn"``) on tic-tac-toe: a snapshot of the
CNN policy acts exactly as the live network with the same weights (greedy and sampled), never
reads or changes the live weights, masks illegal moves; a short run trains and resumes exactly;
settings where the board CNN cannot apply are refused in one line."""

from __future__ import annotations

import numpy as np
import pytest
from test_self_play import assert_resume_equals_uninterrupted

import agents
from pgrad.rl import multiagent
from pgrad.rl.acting.sampling import sample_numpy
from pgrad.rl.multiagent.board import BoardCNN
from pgrad.rl.multiagent.opponents import random_legal

tictactoe_v3 = pytest.importorskip("pettingzoo.classic.tictactoe_v3")

TTT = "pettingzoo.classic.tictactoe_v3:env"
TINY = dict(num_envs=4, n_steps=16, epochs=2, num_minibatches=2, hidden=(16,),
            snapshot_interval=2, pool_size=3, anchor_update=3, encoder="board_cnn",
            board_filters=(8, 8))


def make(**hp):
    return agents.make("ippo", TTT, seed=0, self_play=True, **{**TINY, **hp})


@pytest.fixture(scope="module")
def cnn():
    """``(agent, observations [16, 18] a few moves into 8 games, their masks)``."""
    agent = make()
    rows = multiagent.make_agent_rows(tictactoe_v3.env, 8)
    obs, info = rows.reset(seed=3)
    rng = np.random.default_rng(0)
    for _ in range(3):
        obs, _, _, _, info = rows.step(random_legal(rng, 9)(obs, info["action_mask"]))
    rows.close()
    yield agent, obs, info["action_mask"]
    agent.close()


def test_the_policy_is_the_board_cnn(cnn):
    agent = cnn[0]
    assert isinstance(agent.net.encoder.own, BoardCNN)
    assert agent.net.encoder.own.shape == (3, 3, 2)
    assert agent.self_play.player.mirror is None  # acted through the network, not numpy
    assert agent.self_play.player.size == agent.mirror.flat_numpy().size


def test_a_snapshot_acts_as_the_live_network_with_its_weights(cnn):
    """Taken from the live weights: the same parameters (bit for bit), the same greedy moves,
    the same sampled moves from the same generator. After the live network trains on, the
    snapshot still acts as before, and the live weights are untouched by its calls."""
    agent, obs, masks = cnn
    player = agent.self_play.player
    flat = agent.mirror.flat_numpy()
    live, _ = agent.mirror.forward(obs)
    np.testing.assert_array_equal(player.params(flat, obs), live)
    greedy = player.act(flat, obs, masks, None, deterministic=True)
    np.testing.assert_array_equal(greedy, agent.act(obs, True, masks))
    sampled = player.act(flat, obs, masks, np.random.default_rng(7))
    mine = sample_numpy(agent.net.head, live, None, np.random.default_rng(7),
                        action_mask=masks)[0]
    np.testing.assert_array_equal(sampled, mine)
    assert masks[np.arange(len(obs)), greedy].all() and masks[np.arange(len(obs)), sampled].all()

    agent.step()  # the live network moves on
    trained = agent.mirror.flat_numpy()
    assert not np.array_equal(trained, flat)
    assert not np.array_equal(agent.mirror.forward(obs)[0], live)
    np.testing.assert_array_equal(player.params(flat, obs), live)  # the old policy still
    np.testing.assert_array_equal(agent.mirror.flat_numpy(), trained)  # live weights untouched
    np.testing.assert_array_equal(player.params(trained, obs), agent.mirror.forward(obs)[0])


def test_a_snapshot_never_plays_an_illegal_move(cnn):
    """A snapshot whose output layer prefers one move by 50 logits: where that move is illegal
    it samples and picks only legal moves; where legal, it picks it."""
    agent, obs, masks = cnn
    net, player = agent.net, agent.self_play.player
    flat = agent.mirror.flat_numpy().copy()
    at = 0
    favourite = int(np.flatnonzero(~masks.all(0))[0])  # a move some rows may not play
    for v in net.policy_variables:
        size = int(np.prod(v.shape))
        if v is net.actor.layers[-1].kernel:
            flat[at: at + size] = 0.0
        if v is net.actor.layers[-1].bias:
            flat[at + favourite] = 50.0
        at += size
    many = np.repeat(obs, 50, axis=0)
    many_masks = np.repeat(masks, 50, axis=0)
    for deterministic in (True, False):
        moves = player.act(flat, many, many_masks, np.random.default_rng(1), deterministic)
        assert many_masks[np.arange(len(many)), moves].all()
        legal = many_masks[:, favourite]
        assert legal.any() and (~legal).any()
        assert (moves[legal] == favourite).all() and (moves[~legal] != favourite).all()


def test_a_cnn_self_play_run_trains_and_resumes_exactly(tmp_path):
    """As an MLP's (test_self_play.py): the CNN's weights, the optimizer's state, the pool and
    the anchor of the saved agent's own 4 updates; the pool holds the CNN policy's weights."""

    def check(whole, resumed):
        assert isinstance(resumed.net.encoder.own, BoardCNN)
        pool = whole.trackables()["self_play_pool_weights"]
        assert pool.shape[1] == whole.self_play.player.size

    assert_resume_equals_uninterrupted(make(), tmp_path, check)


@pytest.mark.parametrize("algo, env, hp, match", [
    ("ippo", "mpe2.simple_spread_v3:parallel_env", {"self_play": False},
     r"encoder 'board_cnn' reads a board, a 3-D Box \(H, W, C\) in the observation; env "
     r"'[\w.:]+' observes Box"),
    ("mappo", TTT, {"self_play": False}, "mappo builds its own actor and critic MLPs"),
    ("ippo", TTT, {"board_filters": (8, 0)}, "board_filters must be 1 to 1024 channels"),
])
def test_where_the_board_cnn_cannot_apply_is_one_line(algo, env, hp, match):
    if env.startswith("mpe2"):
        pytest.importorskip("mpe2")
    with pytest.raises(ValueError, match=match) as caught:
        agents.make(algo, env, seed=0, **{**TINY, "self_play": True, **hp})
    assert "\n" not in str(caught.value)


def test_a_critic_with_its_own_cnn_leaves_the_snapshot_to_the_actors():
    """share_encoder=False: actor and critic each have a BoardCNN; a snapshot holds the actor's
    (the policy variables) and acts as the live network."""
    agent = make(share_encoder=False)
    try:
        actor, critic = agent.net.encoder.own, agent.net.critic_encoder.own
        assert isinstance(critic, BoardCNN) and critic is not actor
        critic_ids = {id(v) for v in critic.trainable_variables}
        assert not critic_ids & {id(v) for v in agent.net.policy_variables}
        rows = multiagent.make_agent_rows(tictactoe_v3.env, 3)
        obs, info = rows.reset(seed=1)
        rows.close()
        player, flat = agent.self_play.player, agent.mirror.flat_numpy()
        np.testing.assert_array_equal(player.params(flat, obs), agent.mirror.forward(obs)[0])
        agent.step()
        assert agent.self_play.pool.last_update() == 0
    finally:
        agent.close()
