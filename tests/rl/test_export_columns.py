"""A MAPPO export answers an agent's own observation (and mask), loaded by TensorFlow alone:
the same logits and actions as the agent's actor on the whole row, whatever the state columns
hold; an IPPO export (its actor reads the whole row) is as before."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import agents
from pgrad.rl.export.columns import read_columns
from pgrad.rl.multiagent.cue_game import CueGame

N_AGENTS, N_ACTIONS = 3, 4
OWN = N_ACTIONS + 1  # the cue one-hot and the fraction of the episode gone


def game():
    return CueGame(N_AGENTS, N_ACTIONS, episode_steps=5)


def _agent(name: str, **hp):
    return agents.make(name, game, seed=3, num_envs=2, n_steps=8, num_minibatches=2, **hp)


@pytest.fixture(scope="module")
def mappo_export(tmp_path_factory):
    agent = _agent("mappo", agent_id=True)
    try:
        agent.learn(16)  # one update: weights away from their initial values
        path = tmp_path_factory.mktemp("mappo") / "policy"
        agent.export_policy(str(path))
        width = int(agent.observation_space.shape[0])
        rng = np.random.default_rng(0)
        rows = rng.normal(size=(64, width)).astype(np.float32)  # [N, D]
        logits = agent.net.params(tf.constant(rows)).numpy()  # [N, n_actions]
        state_changed = rows.copy()
        state_changed[:, OWN + N_AGENTS:] = rng.normal(size=(64, width - OWN - N_AGENTS))
        logits_other_state = agent.net.params(tf.constant(state_changed)).numpy()
    finally:
        agent.close()
    return path, rows, logits, logits_other_state


def test_the_columns_are_the_own_observation_and_the_agent_index(mappo_export):
    path, rows, logits, logits_other_state = mappo_export
    np.testing.assert_array_equal(logits, logits_other_state)  # the actor ignores the state
    meta = json.loads((path / "pgrad_policy.json").read_text())
    assert meta["row_columns"] == list(range(OWN + N_AGENTS))
    assert meta["observation_space"].endswith(f"({OWN + N_AGENTS},), float32)")


def test_tensorflow_alone_answers_the_own_observation(mappo_export, tmp_path):
    path, rows, logits, _ = mappo_export
    own = rows[:, :OWN + N_AGENTS]
    mask = np.zeros((len(rows), N_ACTIONS), bool)
    mask[:, 2] = True  # one legal action
    np.save(tmp_path / "own.npy", own)
    np.save(tmp_path / "mask.npy", mask)
    script = f"""
import sys
for name in ("pgrad", "agents", "pgrad_app"):
    sys.modules[name] = None  # TensorFlow alone
import numpy as np, tensorflow as tf
m = tf.saved_model.load({str(path)!r})
own = np.load({str(tmp_path / 'own.npy')!r}); mask = np.load({str(tmp_path / 'mask.npy')!r})
np.save({str(tmp_path / 'logits.npy')!r}, m.distribution_params(own)["logits"].numpy())
np.save({str(tmp_path / 'action.npy')!r}, m.action(own).numpy())
np.save({str(tmp_path / 'one.npy')!r}, m.action(own[0]).numpy())
np.save({str(tmp_path / 'masked.npy')!r}, m.action_masked(own, mask).numpy())
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    np.testing.assert_allclose(np.load(tmp_path / "logits.npy"), logits, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.load(tmp_path / "action.npy"), logits.argmax(axis=1))
    assert int(np.load(tmp_path / "one.npy")) == int(logits[0].argmax())  # one observation
    np.testing.assert_array_equal(np.load(tmp_path / "masked.npy"), np.full(len(rows), 2))


def test_an_actor_of_the_whole_row_is_exported_as_before(tmp_path):
    agent = _agent("ippo")
    try:
        assert read_columns(agent.net, agent.observation_space) is None
        agent.export_policy(str(tmp_path / "policy"))
        meta = json.loads((tmp_path / "policy" / "pgrad_policy.json").read_text())
        assert "row_columns" not in meta
        assert meta["observation_space"] == str(agent.observation_space)
    finally:
        agent.close()
