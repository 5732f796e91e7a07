"""A CNN before the recurrent core (encoder -> core -> heads): compiled acting reads the Keras
model's parameters through the sequence, the update runs on image sequences, and the export
acts as ``predict``."""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

import agents
from pgrad.rl.acting.recurrent_actor import CompiledRecurrentActor
from pgrad.rl.export.saved_model import ExportedPolicy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from policies import ImageEnv  # noqa: E402

PLANES = "pgrad-test/RecurrentPlanes-v0"  # 10 x 10 x 4 bool (as MinAtar), 5-step episodes
if PLANES not in gym.registry:
    gym.register(PLANES, entry_point=ImageEnv,
                 kwargs={"shape": (10, 10, 4), "dtype": np.bool_, "length": 5})


@pytest.fixture(scope="module")
def agent():
    a = agents.make("ppo", PLANES, seed=1, encoder="minatar_cnn", recurrent="lstm",
                    lstm_units=8, num_envs=2, n_steps=8, minibatch_size=8, epochs=2)
    yield a
    a.close()


def test_compiled_acting_is_the_keras_model_through_the_sequence(agent):
    """The rollout's log-probabilities (compiled acting: encoder -> core -> actor, state carried
    and reset at episode ends) equal the Keras networks' over the stored sequences from the
    stored initial state; deterministic ``predict`` picks the Keras model's argmax."""
    assert isinstance(agent.mirror, CompiledRecurrentActor)
    agent.step()  # an update on image sequences: the state then goes on from it
    net, T = agent.net, 12
    state0, start0 = agent.rollout_state, agent.collector.episode_start.copy()
    traj, _ = agent.collector.collect(agent.acting_fn(np.random.default_rng(0)), T)
    done = np.maximum(traj.terminated, traj.truncated)
    assert done[:-1].any()  # an episode ended inside the rollout
    starts = np.concatenate([start0[None], done[:-1]]).astype(np.float32)

    def seq(x):  # [T, B, ...] -> env-major [B T, ...]
        return tf.constant(np.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:]))

    params = net.params_sequence(seq(traj.observations), seq(starts), tf.constant(state0), T)
    log_probs = net.head.distribution(params).log_prob(seq(traj.actions))
    np.testing.assert_allclose(log_probs.numpy(), seq(traj.log_probs).numpy(), atol=1e-5)

    obs = traj.observations[:, 0]  # env 0's sequence, one observation at a time
    state, want = state0[0], np.argmax(params.numpy()[:T], axis=1)
    for t in range(T):
        action, state = agent.predict(obs[t], state, episode_start=bool(starts[t, 0]))
        assert action == want[t]


def test_the_export_acts_as_predict(agent, tmp_path):
    agent.export_policy(str(tmp_path / "policy"))
    policy = ExportedPolicy(tmp_path / "policy", agent.observation_space, agent.action_space)
    rng = np.random.default_rng(3)
    state = mine = None
    for t in range(6):
        obs = rng.random((2, 10, 10, 4)) < 0.2
        start = np.array([t == 0, t == 3])
        want, state = agent.predict(obs, state, episode_start=start)
        got, mine = policy.act_with_state(policy.flatten(obs), mine, start, deterministic=True)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_allclose(mine, state, atol=1e-5)
