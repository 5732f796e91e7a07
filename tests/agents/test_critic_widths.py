"""Separate actor and critic widths (issue 24, item 2): SB3's
``policy_kwargs=dict(net_arch=dict(pi=[...], vf=[...]))`` and pgrad's ``critic_hidden`` build a
critic of its own widths, and everything that reads the networks follows: acting (the numpy
mirror against the Keras networks), save/load, the export and evaluation."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import agents
import pgrad


def widths(model) -> list[int]:
    return [int(layer.kernel.shape[1]) for layer in model.layers]


@pytest.fixture(scope="module")
def trained():
    agent = agents.make("ppo", "Pendulum-v1", seed=2, n_steps=32, minibatch_size=32, epochs=1,
                        policy_kwargs=dict(net_arch=dict(pi=[16, 16], vf=[48, 24])))
    agent.learn(64, progress=False)
    yield agent
    agent.close()


def test_net_arch_pi_vf_builds_a_critic_of_its_own_widths(trained):
    assert trained.cfg.hidden == (16, 16) and trained.cfg.critic_hidden == (48, 24)
    assert widths(trained.net.actor) == [16, 16, 1]  # Pendulum: one action mean
    assert widths(trained.net.critic) == [48, 24, 1]
    same = agents.make("a2c", "CartPole-v1", num_envs=1, policy_kwargs=dict(
        net_arch=dict(pi=[32], vf=[32])))
    try:  # equal widths are the plain hidden field, as before
        assert same.cfg.hidden == (32,) and same.cfg.critic_hidden == ()
        assert widths(same.net.critic) == [32, 1]
    finally:
        same.close()


def test_the_numpy_mirror_acts_and_values_as_the_keras_networks(trained):
    obs = np.random.default_rng(0).normal(size=(7, 3)).astype(np.float32)
    trained.mirror.sync()
    params, values = trained.mirror.forward(obs, with_value=True)
    np.testing.assert_allclose(params, trained.net.params(tf.constant(obs)).numpy(), atol=1e-5)
    np.testing.assert_allclose(values, trained.net.value(tf.constant(obs)).numpy(), atol=1e-5)


def test_save_load_export_and_evaluation_keep_the_widths(trained, tmp_path):
    obs = np.random.default_rng(1).normal(size=(5, 3)).astype(np.float32)
    want, _ = trained.predict(obs)
    trained.save(tmp_path / "a")
    loaded = agents.load(tmp_path / "a")
    try:
        assert loaded.cfg.critic_hidden == (48, 24)
        assert widths(loaded.net.critic) == [48, 24, 1]
        np.testing.assert_allclose(loaded.predict(obs)[0], want, atol=1e-5)
        np.testing.assert_allclose(loaded.net.value(tf.constant(obs)).numpy(),
                                   trained.net.value(tf.constant(obs)).numpy(), atol=1e-5)
    finally:
        loaded.close()
    exported = tf.saved_model.load(str(tmp_path / "a" / "policy"))  # plain TensorFlow
    np.testing.assert_allclose(exported.action(tf.constant(obs)).numpy(), want, atol=1e-5)
    result = pgrad.evaluate(str(tmp_path / "a"), episodes=2)
    assert result["episodes"] == 2 and np.isfinite(result["return_mean"])


def test_critic_widths_refused_where_they_cannot_apply():
    with pytest.raises(ValueError, match="critic_hidden .* shared_trunk"):
        agents.PPOConfig(critic_hidden=(32,), shared_trunk=True).validate()
    with pytest.raises(ValueError, match="critic_hidden widths must be in"):
        agents.PPOConfig(critic_hidden=(0,)).validate()
    with pytest.raises(ValueError, match="critic_hidden applies to MLP policies on vector"):
        agents.make("ppo", "CartPole-v1", encoder=lambda space: tf.keras.Sequential(
            [tf.keras.layers.Dense(8)]), critic_hidden=(16,))
