"""Recurrent exports: the state is an input and an output; a process without pgrad acts as
``agent.predict`` over env steps with episode starts inside; ``pgrad.evaluate`` on the export is
the agent's evaluation; TFLite and ONNX take and return the state too."""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

import agents
import pgrad
from pgrad.rl.acting.policy import NetworkPolicy, make_actor
from pgrad.rl.export import deploy
from pgrad.rl.export.saved_model import ExportedPolicy, export_policy, read_metadata
from pgrad.rl.models.networks import actor_critic
from pgrad.rl.observations import spaces
from pgrad.rl.observations.normalize import ObsNormalizer

VECTOR = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
BOX = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)


def decisive(net) -> None:
    """Logits far apart (no argmax decided by round-off between the export and the mirror)
    that follow the observations (both actions taken)."""
    out = net.actor.layers[-1]
    out.kernel.assign(np.random.default_rng(0).normal(0, 5, out.kernel.shape))
    net.core.kernel.assign(net.core.kernel * 3.0)


@pytest.fixture(scope="module")
def agent_export(tmp_path_factory):
    """A recurrent PPO agent on CartPoleNoVel-v1 (untrained, decisive logits) and its export."""
    agent = agents.make("ppo", "CartPoleNoVel-v1", seed=2, recurrent="lstm", lstm_units=8,
                        hidden=(8,), num_envs=2, n_steps=8, minibatch_size=16,
                        normalize_obs=True)
    decisive(agent.net)
    agent.obs_norm.rms.mean = np.array([0.01, 0.0, -0.02, 0.0], np.float64)  # real statistics
    agent.obs_norm.rms.var = np.array([0.02, 1.0, 0.005, 1.0], np.float64)
    agent.obs_norm.push()
    agent.mirror.sync()
    path = tmp_path_factory.mktemp("rec") / "policy"
    agent.export_policy(str(path))
    yield agent, path
    agent.close()


def predicted_episode(agent, steps: int, seed: int):
    """``agent.predict`` over ``steps`` env steps of one env (reset where an episode ends):
    the observations, episode starts, actions and states."""
    env = gym.make("CartPoleNoVel-v1")
    obs, _ = env.reset(seed=seed)
    state, start = None, True
    rows = {"obs": [], "start": [], "action": [], "state": []}
    for _ in range(steps):
        action, state = agent.predict(obs, state, episode_start=start)
        for k, v in (("obs", obs), ("start", start), ("action", action), ("state", state)):
            rows[k].append(np.asarray(v))
        obs, _, term, trunc, _ = env.step(action)
        start = bool(term or trunc)
        if start:
            obs, _ = env.reset()
    env.close()
    return {k: np.stack(v) for k, v in rows.items()}


@pytest.mark.subprocess
def test_a_process_without_pgrad_acts_as_predict(agent_export, tmp_path):
    """Over 60 env steps (episodes end inside them), the SavedModel loaded by TensorFlow alone,
    its state carried by the caller, gives ``agent.predict``'s actions and states -- one
    observation at a time through ``action``, and as ``[1, ...]`` batches through the serving
    signature."""
    agent, path = agent_export
    ref = predicted_episode(agent, 60, seed=5)
    assert ref["start"][1:].any()  # an episode started inside the sequence
    assert 0 < ref["action"].mean() < 1  # both actions taken
    np.savez(tmp_path / "seq.npz", obs=ref["obs"], start=ref["start"])
    code = (
        "import sys, json, numpy as np, tensorflow as tf\n"
        f"d, p = {str(tmp_path)!r}, {str(path)!r}\n"
        "seq = np.load(d + '/seq.npz')\n"
        "m = tf.saved_model.load(p)\n"
        "sig = m.signatures['action']\n"
        "S = sig.structured_input_signature[1]['state'].shape[1]\n"
        "state, batched = np.zeros(S, np.float32), np.zeros((1, S), np.float32)\n"
        "out = {'action': [], 'state': [], 'batched': []}\n"
        "for obs, start in zip(seq['obs'], seq['start']):\n"
        "    r = m.action(obs, state, bool(start))\n"
        "    state = r['next_state'].numpy()\n"
        "    b = sig(observation=obs[None], state=batched, episode_start=np.array([start]))\n"
        "    batched = b['next_state'].numpy()\n"
        "    out['action'].append(int(r['action'])); out['state'].append(state.tolist())\n"
        "    out['batched'].append(int(b['action'][0]))\n"
        "assert 'pgrad' not in sys.modules and 'agents' not in sys.modules\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["action"] == got["batched"] == ref["action"].tolist()
    np.testing.assert_allclose(np.array(got["state"]), ref["state"], atol=1e-5)


def test_evaluating_the_export_is_evaluating_the_agent(agent_export):
    """``pgrad.evaluate`` (what ``pgrad-evaluate`` runs on a run's ``policy/``) carries the
    export's state: the same episodes as the agent's own evaluation; the export's metadata
    names the state."""
    agent, path = agent_export
    meta = read_metadata(path)
    assert meta["recurrent"] == "lstm" and meta["state_size"] == 16
    from_export = pgrad.evaluate(str(path), episodes=3, seed=11)
    from_agent = pgrad.evaluate(agent, episodes=3, seed=11)
    assert from_export["returns"] == from_agent["returns"]
    policy = ExportedPolicy(path, agent.observation_space, agent.action_space)
    with pytest.raises(ValueError, match="depends on its state"):
        policy.params(np.zeros((1, 4), np.float32))


@pytest.fixture(scope="module")
def gru_box(tmp_path_factory):
    """A GRU policy with a Gaussian head and an observation normaliser, exported."""
    layout = spaces.obs_layout(VECTOR)
    net = actor_critic(layout, lambda latent: pgrad.make_head(BOX, log_std_init=-1.0), "mlp",
                       hidden=(8,), seed=3, recurrent="gru", core_units=6)
    norm = ObsNormalizer(4)
    norm.mean.assign(np.array([0.1, -0.3, 0.0, 0.2]))
    norm.var.assign(np.array([0.5, 2.0, 1.0, 0.25]))
    norm.pull()
    path = tmp_path_factory.mktemp("gru") / "policy"
    export_policy(net, norm, VECTOR, path)
    reference = NetworkPolicy(net, make_actor(net, layout), norm, VECTOR, BOX)
    return net, reference, path


def sequence(n: int, steps: int, seed: int):
    """``[steps, n, 4]`` observations and ``[steps, n]`` episode starts (some inside)."""
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (steps, n, 4)).astype(np.float32)
    starts = rng.random((steps, n)) < 0.2
    starts[0] = True
    return obs, starts


def test_every_function_carries_the_state_as_the_live_network(gru_box):
    """``action``, ``sample_with_noise``, ``distribution_params`` and ``params`` over a batched
    sequence with resets inside: the reference (the numpy mirror) step by step."""
    net, reference, path = gru_box
    loaded = tf.saved_model.load(str(path))
    obs, starts = sequence(3, 6, seed=1)
    state = mine = np.zeros((3, 6), np.float32)
    u = np.random.default_rng(2).random((3, 4), np.float32)
    for x, s in zip(obs, starts):
        want, state_after = reference.act_with_state(x, state, s, deterministic=True)
        got = loaded.action(x, mine, s)
        np.testing.assert_allclose(got["action"].numpy(), want, atol=1e-5)
        np.testing.assert_allclose(got["next_state"].numpy(), state_after, atol=1e-6)
        params = loaded.params(x, mine, s)
        dist = loaded.distribution_params(x, mine, s)
        np.testing.assert_allclose(dist["mean"].numpy(), params["params"].numpy()[:, :2])
        np.testing.assert_allclose(dist["log_std"].numpy(), -np.ones((3, 2)), atol=1e-6)
        noisy = loaded.sample_with_noise(x, mine, s, u)["action"].numpy()
        assert noisy.shape == (3, 2) and not np.allclose(noisy, want)
        state, mine = state_after, got["next_state"].numpy()


def test_a_wrong_state_is_one_clear_error(gru_box):
    _, _, path = gru_box
    loaded = tf.saved_model.load(str(path))
    obs = np.zeros((2, 4), np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"state: \[6\] float32 per "):
        loaded.action(obs, np.zeros((2, 5), np.float32), np.array([True, False]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="episode_start: one bool per"):
        loaded.action(obs, np.zeros((2, 6), np.float32), np.array([True]))


def test_tflite_and_onnx_take_and_return_the_state(agent_export, tmp_path):
    """The converted ``action`` signature: observation, state and episode_start in, action and
    next_state out, as the SavedModel's."""
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("tf2onnx")
    _, path = agent_export
    rng = np.random.default_rng(4)
    feeds = {"observation": rng.normal(size=(5, 4)).astype(np.float32),
             "state": rng.normal(size=(5, 16)).astype(np.float32),
             "episode_start": np.array([True, False, False, True, False])}
    want = {k: v.numpy() for k, v in
            tf.saved_model.load(str(path)).signatures["action"](**feeds).items()}
    lite = litert.Interpreter(model_path=str(deploy.to_tflite(path, tmp_path / "p.tflite",
                                                              ["action"])))
    onnx = ort.InferenceSession(str(deploy.to_onnx(path, tmp_path / "p.onnx")),
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in onnx.get_outputs()]
    for got in (lite.get_signature_runner("action")(**feeds),
                dict(zip(names, onnx.run(None, feeds)))):
        assert sorted(got) == ["action", "next_state"]
        np.testing.assert_array_equal(got["action"], want["action"])
        np.testing.assert_allclose(got["next_state"], want["next_state"], atol=1e-5)
