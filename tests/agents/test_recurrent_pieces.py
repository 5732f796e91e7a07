"""Recurrent PPO on fixed-length pieces (``sequence_length``): the pieces' stored states are the
states acting carried, so the pieces' log-probs and values are the whole sequences' at the first
epoch; pieces of the whole rollout are today's update; per-step gradients of a minibatch of
pieces are the jacobian's; bad lengths are one clear line."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import agents
import pgrad
from agents.update.compiled import piece_states
from agents.update.minibatch import firsts
from pgrad.core import per_step

SHARED = dict(num_envs=2, n_steps=8, hidden=(8,), lstm_units=8, optimizer="adam",
              optimizer_eps=1e-7, learning_rate=3e-3, gamma=0.97, gae_lambda=0.9, vf_coef=0.5,
              ent_coef=0.01, max_grad_norm=0.5, normalize_advantage=False)


def test_piece_states_picks_the_state_before_each_pieces_first_step():
    """By hand: T = 6, L = 2 (pieces at steps 0, 2, 4), one env, S = 1."""
    state0 = tf.constant([[-1.0]])
    after = tf.reshape(tf.range(6, dtype=tf.float32), [6, 1, 1])  # state after step t is t
    got = piece_states(state0, after, 2).numpy().ravel()
    np.testing.assert_array_equal(got, [-1, -1, 1, 1, 3, 3])
    np.testing.assert_array_equal(piece_states(state0, after, 6).numpy().ravel(), [-1] * 6)


def _rollout(agent, T):
    """A rollout of ``T`` steps from the state the agent carries, recording the acting state
    before every step; returns (traj, start0, state0 [B, S], acting states [T, B, S])."""
    state0, start0 = agent.rollout_state, agent.collector.episode_start.copy()
    policy_fn, seen = agent.acting_fn(np.random.default_rng(0)), []

    def recording(obs, action_mask=None):
        seen.append(agent.rollout_state.copy())  # before the step's reset (as sb3-contrib's)
        return policy_fn(obs, action_mask)

    traj, _ = agent.collector.collect(recording, T)
    return traj, start0, state0, np.stack(seen)


def _env_major(x):  # [T, B, ...] -> [B T, ...]
    return tf.constant(np.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:]))


def test_pieces_from_their_stored_states_are_the_whole_sequences():
    """Pieces of 8 steps of a 40-step rollout with episode ends inside: their first states (the
    update's, from the weights that acted) are the states acting carried, and their per-step
    log-probs and values equal the whole sequences' and the rollout's own log-probs."""
    agent = agents.make("ppo", "CartPole-v1", seed=1, recurrent="lstm", epochs=2,
                        minibatch_size=16, **SHARED)
    _rollout(agent, 5)  # a state to start from
    net, T, L = agent.net, 40, 8
    traj, start0, state0, acting = _rollout(agent, T)
    assert np.abs(state0).max() > 0
    done = np.maximum(traj.terminated, traj.truncated)
    assert done.any()  # an episode ended inside the rollout (CartPole's near-random policy)
    starts = _env_major(np.concatenate([start0[None], done[:-1]]).astype(np.float32))
    obs, B = _env_major(traj.observations), agent.cfg.num_envs
    after = net.actor_states(obs, starts, tf.constant(state0), T)  # [B T, S]
    rows = piece_states(tf.constant(state0),
                        tf.transpose(tf.reshape(after, [B, T, -1]), [1, 0, 2]), L)  # [T, B, S]
    np.testing.assert_allclose(rows.numpy()[::L], acting[::L], atol=1e-5)

    pieces = net.params_sequence(obs, starts, firsts(_env_major(rows.numpy()), L), L)
    whole = net.params_sequence(obs, starts, tf.constant(state0), T)
    actions = _env_major(traj.actions)
    lp_pieces = net.head.distribution(pieces).log_prob(actions).numpy()
    np.testing.assert_allclose(lp_pieces, net.head.distribution(whole).log_prob(actions).numpy(),
                               atol=1e-5)
    np.testing.assert_allclose(lp_pieces, _env_major(traj.log_probs).numpy(), atol=1e-5)
    # the critic's pieces, from the states of its own pass over the rollout
    critic0 = tf.constant(np.random.default_rng(3).standard_normal(
        (B, net.state_sizes[1])).astype(np.float32))
    values, states = net.value_sequence(obs, starts, critic0, T)
    crows = piece_states(critic0, tf.transpose(tf.reshape(states, [B, T, -1]), [1, 0, 2]), L)
    piece_values, _ = net.value_sequence(obs, starts, firsts(_env_major(crows.numpy()), L), L)
    np.testing.assert_allclose(piece_values.numpy(), values.numpy(), atol=1e-5)
    agent.close()


def test_pieces_of_the_whole_rollout_are_todays_update():
    """sequence_length = n_steps takes the pieces' path (states gathered from the actor's pass)
    and gives today's whole-sequence update, 1 epoch over the whole batch, two updates."""
    kw = dict(recurrent="lstm", epochs=1, minibatch_size=0, **SHARED)
    today = agents.make("ppo", "CartPole-v1", seed=4, **kw)
    pieces = agents.make("ppo", "CartPole-v1", seed=4, sequence_length=8, **kw)
    for _ in range(2):
        today.step(), pieces.step()
        for a, b in zip(today.net.variables, pieces.net.variables):
            np.testing.assert_allclose(b.numpy(), a.numpy(), atol=2e-6)
    today.close()
    pieces.close()


def test_shuffled_pieces_see_the_rollouts_log_probs():
    """Pieces of 2 steps (4 per env sequence), minibatches of two, two epochs, a learning rate
    of 1e-10 (Adam moves each weight by about that per step):
    every minibatch's current log-probs are the behaviour ones (approx-kl 0), all 16 minibatch
    steps run, and the update traces once."""
    kw = dict(SHARED, learning_rate=1e-10, recurrent="lstm", epochs=2, minibatch_size=4)
    agent = agents.make("ppo", "CartPole-v1", seed=4, sequence_length=2, **kw)
    for _ in range(2):
        metrics = agent.step()["metrics"]
        assert metrics["approx_kl"] == pytest.approx(0.0, abs=1e-6)
        assert metrics["minibatch_updates"] == 2 * 16 / 4
    assert agent.updater.tracing_count() == 1
    agent.close()


def test_per_step_grads_of_a_minibatch_of_pieces_are_the_jacobian():
    """Two 4-step pieces of different envs, from their stored states, an episode start inside
    one: the engine's rows (and the fused weighted sum) equal tape.jacobian's."""
    agent = agents.make("a2c", "CartPole-v1", seed=2, recurrent="gru", **SHARED)
    net, L = agent.net, 4
    rng = np.random.default_rng(5)
    obs = tf.constant(rng.standard_normal((2 * L, 4)).astype(np.float32))
    starts = np.zeros(2 * L, np.float32)
    starts[2] = 1.0
    state0 = rng.standard_normal((2, net.state_sizes[0])).astype(np.float32)
    rows0 = tf.constant(np.repeat(state0, L, axis=0))
    actions = tf.constant(rng.integers(0, 2, 2 * L).astype(np.int64))
    variables = net.policy_variables

    def fn(o, s, s0, a):
        params = net.params_sequence(o, s, firsts(s0, L), L)
        return net.head.distribution(params).log_prob(a)

    args = (obs, tf.constant(starts), rows0, actions)
    with tf.GradientTape(persistent=True) as tape:
        out = fn(*args)
    want = [j.numpy() for j in tape.jacobian(out, variables, experimental_use_pfor=False)]
    got = per_step.per_step_grads(fn, variables, *args, sequence_length=L)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g.numpy(), w, atol=1e-5)
    assert np.abs(want[0][L + 1]).max() > 0  # a second piece's row depends on its prefix
    adv = np.linspace(-1, 1, 2 * L).astype(np.float32)
    chain = pgrad.chain(pgrad.weight_by("advantages"), pgrad.sum_steps())
    fused = pgrad.run_engine(chain, chain.init(variables), fn, variables, args,
                             {"advantages": tf.constant(adv)}, path="fused", sequence_length=L)
    for g, w in zip(fused.grads, want):
        np.testing.assert_allclose(g.numpy(), np.tensordot(adv, w, 1), atol=1e-5)
    agent.close()


@pytest.mark.parametrize("kw, match", [
    (dict(recurrent="lstm", sequence_length=3, minibatch_size=0),
     "sequence_length must divide n_steps = 8"),
    (dict(recurrent="lstm", sequence_length=16, minibatch_size=0),
     "sequence_length must divide n_steps = 8"),
    (dict(recurrent="lstm", sequence_length=4, minibatch_size=6, num_envs=3),
     "minibatches are pieces of 4 steps, so minibatch_size must be a multiple of "
     "sequence_length = 4; got 6"),
    (dict(sequence_length=4, minibatch_size=0), "sequence_length applies to recurrent"),
])
def test_lengths_the_pieces_cannot_take(kw, match):
    with pytest.raises(ValueError, match=match) as err:
        agents.make("ppo", "CartPole-v1", **(dict(n_steps=8, num_envs=2) | kw))
    assert "\n" not in str(err.value)
