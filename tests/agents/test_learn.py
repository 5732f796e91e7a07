"""The Python API as a user calls it: learn -> save -> load -> predict / evaluate, callbacks."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import agents
import pgrad
from agents.callbacks import Checkpoint, EvalCallback, StopAtReturn
from agents.learning import Callback

ROOT = Path(__file__).resolve().parents[2]
SMALL = dict(num_envs=2, n_steps=8, hidden=(16,), normalize_obs=True)  # 16 env steps per update
OBS = np.random.default_rng(0).normal(size=(7, 4)).astype(np.float32)


def make(seed: int = 0):
    return agents.make("a2c", "CartPole-v1", seed=seed, **SMALL)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """An agent after learn(160), and the directory it was saved in."""
    agent = make().learn(160, progress=False)
    path = agent.save(tmp_path_factory.mktemp("saved") / "agent")
    yield agent, path
    agent.close()


def test_learn_returns_the_agent_and_counts(saved):
    agent, _ = saved
    assert agent.env_steps == 160 and int(agent.updates_var.numpy()) == 10
    assert agent.learn_stats.episodes == len(agent.learn_stats.recent_returns) > 0


@pytest.mark.subprocess
def test_load_restores_exactly_and_predicts_the_same_in_a_fresh_process(saved):
    agent, path = saved
    loaded = agents.load(path)
    assert (loaded.env_steps, int(loaded.updates_var.numpy())) == (160, 10)
    assert loaded.learn_stats.episodes == agent.learn_stats.episodes
    for a, b in [(agent.net.variables, loaded.net.variables),
                 (agent.optimizer.variables, loaded.optimizer.variables)]:
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x.numpy(), y.numpy())
    np.testing.assert_array_equal(loaded.predict(OBS)[0], agent.predict(OBS)[0])
    np.testing.assert_array_equal(agent.obs_norm.rms.mean, loaded.obs_norm.rms.mean)
    loaded.close()
    code = ("import json, sys, numpy as np, agents\n"
            "a = agents.load(sys.argv[1])\n"
            "obs = np.array(json.loads(sys.argv[2]), np.float32)\n"
            "print(json.dumps([a.predict(obs)[0].tolist(), int(a.predict(obs[0])[0])]))\n")
    proc = subprocess.run([sys.executable, "-c", code, str(path), json.dumps(OBS.tolist())],
                          capture_output=True, text=True, cwd=ROOT, timeout=180)
    assert proc.returncode == 0, proc.stderr
    batch, one = json.loads(proc.stdout.strip().splitlines()[-1])
    assert batch == agent.predict(OBS)[0].tolist()  # a batch of observations -> [N] actions
    assert one == int(agent.predict(OBS[0])[0]) == batch[0]  # one observation -> one action


def test_learning_again_continues_the_counters(saved):
    _, path = saved
    agent = agents.load(path)
    before = agent.learn_stats.episodes
    agent.learn(32, progress=False)
    assert agent.env_steps == 192 and int(agent.updates_var.numpy()) == 12
    assert agent.learn_stats.episodes >= before
    agent.close()


def test_evaluate_a_saved_agent_deterministic_by_default(saved):
    agent, path = saved
    r = pgrad.evaluate(path, episodes=2)
    assert r["deterministic"] is True and r["env"] == "CartPole-v1"
    assert r == pgrad.evaluate(agent, episodes=2)  # the saved export acts like the agent


def test_callbacks_evaluate_keep_the_best_and_stop_at_a_target(tmp_path):
    agent = make(1)
    seen = []
    evals = EvalCallback(every=32, episodes=2, log_dir=tmp_path, verbose=False)
    agent.learn(96, callbacks=[evals, seen.append], progress=False)
    with open(tmp_path / "eval.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == [32, 64, 96]
    assert all(r["deterministic"] == "1" for r in rows)
    best = max(float(r["return_mean"]) for r in rows)
    assert evals.best == best and rows[0]["best"] == "1"
    kept = agents.load(tmp_path / "best")  # the best policy, loadable and evaluable
    assert kept.env_steps == max(int(r["step"]) for r in rows if float(r["return_mean"]) == best)
    assert pgrad.evaluate(tmp_path / "best", episodes=2, seed=evals.seed)["return_mean"] == best
    kept.close()
    assert len(seen) == 6 and seen[1].evaluation is not None  # the hook saw every update
    # A target any evaluation reaches stops the run after the first one.
    agent.learn(96, callbacks=EvalCallback(every=32, episodes=1, target=0.0, verbose=False),
                progress=False)
    assert agent.env_steps == 128
    agent.close()


def test_user_hook_and_stop_at_return_end_the_run(tmp_path):
    agent = make(2)
    metrics = []

    def hook(loop):  # sees each update's metrics; False stops
        metrics.append(loop.metrics["policy_loss"])
        return len(metrics) < 3

    agent.learn(10_000, callbacks=hook, progress=False)
    assert len(metrics) == 3 and agent.env_steps == 48
    agent.learn(10_000, callbacks=[StopAtReturn(0.0, window=2), Checkpoint(tmp_path, every=16)],
                progress=False)
    assert len(agent.learn_stats.recent_returns) >= 2 and agent.env_steps < 10_000
    steps = sorted(int(p.name.split("-")[1]) for p in tmp_path.glob("step-*"))
    assert steps[-1] == agent.env_steps  # and one at the end
    agent.close()


def test_callbacks_are_closed_after_an_error_and_bad_ones_refused():
    agent = make(3)
    events = []

    class Fails(Callback):
        def on_update(self, loop):
            raise RuntimeError("boom")

        def on_end(self, loop):
            events.append("end")

        def close(self):
            events.append("close")

    with pytest.raises(RuntimeError, match="boom"):
        agent.learn(64, callbacks=Fails(), progress=False)
    assert events == ["close"]  # no on_end after an error; close always
    with pytest.raises(TypeError, match="callbacks must be"):
        agent.learn(16, callbacks=42, progress=False)
    agent.close()


def test_a_stateful_custom_chain_is_saved_and_must_be_passed_again(tmp_path):
    chain = pgrad.chain(pgrad.weight_by_running("returns"), pgrad.mean_steps(), name="running")
    agent = agents.make("a2c", "CartPole-v1", seed=5, transform=chain, **SMALL)
    agent.learn(48, progress=False).save(tmp_path / "a")
    with pytest.raises(ValueError, match="pass it again as transform="):
        agents.load(tmp_path / "a")
    loaded = agents.load(tmp_path / "a", transform=chain)
    for x, y in zip(agent.transform_state.values, loaded.transform_state.values):
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    assert float(np.abs(agent.transform_state.values[0].numpy()).sum()) > 0  # it did run
    agent.close()
    loaded.close()
