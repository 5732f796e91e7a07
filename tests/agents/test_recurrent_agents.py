"""Recurrent agents: PPO reduces to A2C on whole sequences, acting state equals the update's
state, predict carries state, and a save/load continues exactly."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import agents
import pgrad
import pgrad.rl.export.saved_model

SHARED = dict(num_envs=2, n_steps=8, hidden=(8,), lstm_units=8, optimizer="adam",
              optimizer_eps=1e-7, learning_rate=3e-3, gamma=0.97, gae_lambda=0.9, vf_coef=0.5,
              ent_coef=0.01, max_grad_norm=0.5, normalize_advantage=False)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_one_epoch_whole_batch_ppo_is_the_a2c_update(kind):
    """On the same sequences (same seed), PPO with 1 epoch over the whole batch and an infinite
    clip range is A2C's update: over three updates, the state carried between them."""
    a2c = agents.make("a2c", "CartPole-v1", seed=4, recurrent=kind, **SHARED)
    ppo = agents.make("ppo", "CartPole-v1", seed=4, recurrent=kind, epochs=1, minibatch_size=0,
                      **SHARED,
                      transform=pgrad.chain(pgrad.clip_ratio(float("inf")), pgrad.mean_steps()))
    for _ in range(3):
        info_a, info_p = a2c.step(), ppo.step()
        assert info_p["episodes"] == info_a["episodes"]
        for va, vp in zip(a2c.net.variables, ppo.net.variables):
            np.testing.assert_allclose(vp.numpy(), va.numpy(), atol=2e-6)
        assert info_p["metrics"]["approx_kl"] == pytest.approx(0.0, abs=1e-6)
    np.testing.assert_allclose(ppo.rollout_state, a2c.rollout_state, atol=1e-6)
    a2c.close()
    ppo.close()


def test_acting_state_is_the_state_the_update_recomputes():
    """The rollout's log-probabilities (numpy mirror, state carried and reset at episode
    ends) equal the networks' over the stored sequences from the stored initial state -- also
    for a rollout that starts from the previous one's state."""
    agent = agents.make("ppo", "CartPole-v1", seed=1, recurrent="lstm", epochs=2,
                        minibatch_size=16, **SHARED)
    agent.step()
    net, T = agent.net, 40  # long enough for episodes to end inside it
    state0, start0 = agent.rollout_state, agent.collector.episode_start.copy()
    assert np.abs(state0).max() > 0
    traj, _ = agent.collector.collect(agent.acting_fn(np.random.default_rng(0)), T)
    done = np.maximum(traj.terminated, traj.truncated)
    assert done.any()  # an episode ended inside the rollout (CartPole's random policy)
    starts = np.concatenate([start0[None], done[:-1]]).astype(np.float32)

    def seq(x):
        return tf.constant(np.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:]))

    params = net.params_sequence(seq(traj.observations), seq(starts), tf.constant(state0), T)
    log_probs = net.head.distribution(params).log_prob(seq(traj.actions))
    np.testing.assert_allclose(log_probs.numpy(), seq(traj.log_probs).numpy(), atol=1e-5)
    agent.close()


@pytest.mark.parametrize("recurrent", ["lstm", ""])
def test_gsde_holds_the_exploration_matrices_for_sde_sample_freq_steps(recurrent):
    """gSDE acting (as SB3's collect_rollouts): one [B, latent, A] matrix drawn at the rollout's
    start and every sde_sample_freq steps, action - mean = latent @ W for the W held, with or
    without a core; the stored log-probs are the update's (marginal) ones."""
    agent = agents.make("ppo", "Pendulum-v1", seed=2, recurrent=recurrent, use_sde=True,
                        sde_sample_freq=4, log_std_init=-1.0, epochs=1, minibatch_size=0,
                        **SHARED)
    drawn, mirror, T = [], agent.mirror, 10  # 10 steps: matrices at steps 0, 4, 8

    def record(n, rng):
        drawn.append(type(mirror).sde_noise(mirror, n, rng))
        return drawn[-1]

    mirror.sde_noise = record
    state0, start0 = agent.rollout_state, agent.collector.episode_start.copy()
    traj, _ = agent.collector.collect(agent.acting_fn(np.random.default_rng(0)), T)
    assert len(drawn) == 3 and all(w.shape == (2, 8, 1) for w in drawn)
    assert not np.allclose(drawn[0], drawn[1])

    def seq(x):  # [T, B, ...] -> [B * T, ...], the network's sequence order
        return tf.constant(np.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:]))

    if recurrent:
        starts = np.concatenate([start0[None], np.zeros((T - 1, 2))]).astype(np.float32)
        params = agent.net.params_sequence(seq(traj.observations), seq(starts),
                                           tf.constant(state0), T).numpy()
    else:
        params = agent.net.params(seq(traj.observations)).numpy()
    mean, latent = params[:, :1], params[:, 1:]  # [B * T, 1], [B * T, 8]
    held = np.stack([drawn[t // 4] for t in range(T)], 1).reshape(2 * T, 8, 1)  # [B * T, 8, 1]
    np.testing.assert_allclose(seq(traj.actions).numpy() - mean,
                               np.einsum("nl,nla->na", latent, held), atol=1e-4)
    log_probs = agent.head.distribution(tf.constant(params)).log_prob(seq(traj.actions))
    np.testing.assert_allclose(log_probs.numpy(), seq(traj.log_probs).numpy(), atol=1e-4)
    agent.close()


def test_predict_carries_state_and_resets_at_episode_start():
    agent = agents.make("a2c", "CartPole-v1", seed=0, recurrent="gru", **SHARED)
    obs = np.full(4, 0.05, np.float32)
    action, state = agent.predict(obs)
    assert state.shape == (8,) and action in (0, 1)
    _, again = agent.predict(obs, state)
    assert not np.allclose(again, state)  # the state moved on
    _, reset = agent.predict(obs, again, episode_start=True)
    np.testing.assert_allclose(reset, state, atol=1e-6)  # as from zeros
    batch = np.stack([obs, -obs])
    actions, states = agent.predict(batch, np.stack([state, state]), [True, False])
    assert actions.shape == (2,) and states.shape == (2, 8)
    np.testing.assert_allclose(states[0], state, atol=1e-6)
    with pytest.raises(ValueError, match="acts with its state"):
        agent.act(batch)
    feed_forward = agents.make("a2c", "CartPole-v1", seed=0, num_envs=2)
    action, none = feed_forward.predict(obs)
    assert none is None and action in (0, 1)
    agent.close()
    feed_forward.close()


def test_save_and_load_continue_exactly(tmp_path):
    """The rollout and critic states are checkpointed: a loaded agent's next update is the
    original's (the loaded one's envs restart their episodes, as for any agent: both are
    compared from a fresh reset)."""
    kw = dict(recurrent="lstm", epochs=2, minibatch_size=8, **SHARED)
    src = agents.make("ppo", "CartPole-v1", seed=3, **kw)
    src.step()
    src.step()
    src.save(tmp_path / "a")
    dst = agents.load(tmp_path / "a")
    np.testing.assert_array_equal(dst.state_var.numpy(), src.state_var.numpy())
    np.testing.assert_array_equal(dst.critic_state_var.numpy(), src.critic_state_var.numpy())
    exported = pgrad.rl.export.saved_model.ExportedPolicy(tmp_path / "a", src.observation_space,
                                              src.action_space)
    obs = np.random.default_rng(0).normal(0, 0.05, (2, 4)).astype(np.float32)
    want, state = dst.predict(obs, episode_start=[True, True])
    got, got_state = exported.act_with_state(obs, None, [True, True], deterministic=True)
    np.testing.assert_array_equal(got, want)  # the save's export acts as the loaded agent
    np.testing.assert_allclose(got_state, state, atol=1e-6)
    src.collector.reset(seed=9)
    dst.collector.reset(seed=9)
    out_s, out_d = src.step(), dst.step()
    assert out_s["metrics"] == out_d["metrics"]
    for a, b in zip(src.net.variables, dst.net.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    src.close()
    dst.close()


def test_evaluate_carries_the_state():
    agent = agents.make("a2c", "CartPole-v1", seed=0, recurrent="lstm", **SHARED)
    result = pgrad.evaluate(agent, episodes=2, seed=0)
    assert result["return_mean"] > 0
    agent.close()


@pytest.mark.parametrize("kw, match", [
    (dict(recurrent="rnn"), "recurrent must be one of"),
    (dict(recurrent="lstm", rollout="episodes"), "needs rollout='steps'"),
    (dict(recurrent="lstm", n_steps=8, num_envs=4, minibatch_size=4), "multiple of n_steps"),
    (dict(recurrent="gru", shared_trunk=True, minibatch_size=0), "shared_trunk"),
])
def test_settings_a_recurrent_policy_cannot_take(kw, match):
    with pytest.raises(ValueError, match=match):
        agents.make("ppo", "CartPole-v1", **kw)


#: rl-zoo's ppo_lstm entry for CartPoleNoVel-v1 (pgrad_app/config/hyperparams/ppo.yaml) but
#: its reward normalisation (the criterion below was measured without it).
ZOO = dict(num_envs=8, n_steps=32, minibatch_size=256, epochs=20, gamma=0.98, gae_lambda=0.8,
           learning_rate="lin_1e-3", clip_range="lin_0.2", ent_coef=0.0, normalize_obs=True,
           normalize_reward=True, lstm_units=64, hidden=(64,), activation="relu",
           ortho_init=False)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_recurrent_ppo_learns_what_the_mlp_cannot_see():
    """A shorter criterion than the full run (docs/benchmarks/memory/, rl-zoo's ppo_lstm entry):
    on CartPoleNoVel-v1 (velocities hidden) the LSTM policy's last-20 mean passes 150 within 40k
    env steps of the 100k-step schedule (9-12k on the benchmark's 3 seeds), while the MLP's
    never passes 100 (at most 61 over the benchmark's 3 seeds of 100k); here the MLP gets the
    steps the LSTM took, and at least 20k."""
    from test_learning import train

    agent = agents.make("ppo", "CartPoleNoVel-v1", seed=0, recurrent="lstm", **ZOO)
    agent.budget = 100_000  # the lin_ schedules run over the full budget, as in the benchmark
    returns = train(agent, 40_000, target=150.0)
    assert np.mean(returns[-20:]) >= 150.0, (agent.env_steps, np.mean(returns[-20:]))
    steps = agent.env_steps
    agent.close()
    mlp = agents.make("ppo", "CartPoleNoVel-v1", seed=0, **ZOO)
    mlp.budget = 100_000
    returns = np.array(train(mlp, max(steps, 20_000)))
    best = np.convolve(returns, np.ones(20) / 20, "valid").max()
    assert best < 100.0, best
    mlp.close()
