"""pgrad-train --seeds: one run directory per seed, bad input in one line, resume per seed."""

from __future__ import annotations

import json
import shutil
import signal
import time

import gymnasium as gym
import numpy as np
import pytest

from tests.cli_helpers import evaluate, one_error_line, popen_train, train

SMALL = ("--agent", "a2c", "--env", "CartPole-v1", "--num-envs", "4", "--no-tuned", "--quiet",
         "--set", "hidden=[16]")


def _weights(run_dir):
    import agents

    agent = agents.load(run_dir)
    try:
        return [v.numpy() for v in agent.net.variables], agent.env_steps
    finally:
        agent.close()


def _export_logits(policy_dir, obs):
    import tensorflow as tf

    loaded = tf.saved_model.load(str(policy_dir))  # held: its functions read its variables
    return loaded.distribution_params(obs)["logits"].numpy()


def test_seeds_write_the_run_directory_of_each_seed(tmp_path, capsys):
    out = tmp_path / "pop"
    code, stdout, err = train(*SMALL, "--seeds", "80..81", "--total-steps", "120", "--out", out,
                              capsys=capsys)
    assert code == 0, err
    assert json.loads((out / "population.json").read_text())["runs"] == {
        "80": "seed80", "81": "seed81"}
    assert "2 of 2 seeds trained" in stdout
    # the same run directory (and numbers) as pgrad-train --seed 80
    code, _, err = train(*SMALL, "--seed", "80", "--total-steps", "120", "--out",
                         tmp_path / "alone", capsys=capsys)
    assert code == 0, err
    for name in ("config.yaml", "episodes.csv", "updates.csv", "agent.json", "policy",
                 "checkpoints", "learning_curve.png"):
        assert (out / "seed80" / name).exists(), name
    assert "seed: 81" in (out / "seed81" / "config.yaml").read_text()
    (pw, ps), (aw, as_) = _weights(out / "seed80"), _weights(tmp_path / "alone")
    assert ps == as_ == 120
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(pw, aw)) <= 1e-6
    # seed 81's export is written into a copy of seed 80's (one trace): each is its own policy
    code, _, err = train(*SMALL, "--seed", "81", "--total-steps", "120", "--out",
                         tmp_path / "alone81", capsys=capsys)
    assert code == 0, err
    obs = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    logits = {name: _export_logits(d / "policy", obs) for name, d in (
        ("p80", out / "seed80"), ("p81", out / "seed81"), ("a80", tmp_path / "alone"),
        ("a81", tmp_path / "alone81"))}
    np.testing.assert_array_equal(logits["p80"], logits["a80"])
    np.testing.assert_array_equal(logits["p81"], logits["a81"])
    assert np.max(np.abs(logits["p80"] - logits["p81"])) > 1e-3
    code, stdout, err = evaluate(out / "seed81", "--episodes", "2", capsys=capsys)
    assert code == 0 and (out / "seed81" / "eval.json").is_file(), err


@pytest.mark.parametrize("argv,text", [
    (("--seeds", "1", "1"), "--seeds repeats seed(s) 1: each seed is one independent run"),
    (("--seeds", "5..3"), "--seeds: the range 5..3 is empty"),
    (("--seeds", "x"), "--seeds: 'x' is not a seed or a range"),
    (("--seeds",), "--seeds"),
    (("--seed", "1", "--seeds", "2", "3"), "--seed trains one seed and --seeds a population"),
    (("--agent", "impala", "--seeds", "1", "2"), "a population cannot train 'impala'"),
    (("--seeds", "1", "2", "--workers", "2"), "--workers is not available with --seeds"),
])
def test_bad_seed_input_is_one_line_and_writes_nothing(argv, text, tmp_path, capsys):
    out = tmp_path / "pop"
    code, _, err = train("--env", "CartPole-v1", "--total-steps", "100", "--out", out, *argv,
                         capsys=capsys)
    assert code == 2 and text in one_error_line(err)
    assert not out.exists()


def test_more_seeds_than_memory_is_refused_with_the_estimate(tmp_path, capsys, monkeypatch):
    from agents.population import members as population

    monkeypatch.setattr(population, "available_mb", lambda: 1.0)
    out = tmp_path / "pop"
    code, _, err = train(*SMALL, "--seeds", "1..40", "--total-steps", "100", "--out", out,
                         capsys=capsys)
    line = one_error_line(err)
    assert code == 2 and line.startswith("error: --seeds: 40 seeds: about ")
    assert "MiB per seed" in line and "more than the 0.00 GiB available" in line
    assert not out.exists()


def _wait_for_checkpoints(dirs, proc, timeout=120):
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if all(len(list((d / "checkpoints").glob("step-*"))) >= 2 for d in dirs):
            return
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.2)
    raise AssertionError("no checkpoints")


@pytest.mark.slow
def test_an_interrupted_population_resumes_each_seed_from_its_own_checkpoint(tmp_path, capsys):
    out = tmp_path / "pop"
    proc = popen_train(*SMALL, "--seeds", "5", "6", "--total-steps", "1000000",
                       "--checkpoint-every", "200", "--out", out)
    _wait_for_checkpoints([out / "seed5", out / "seed6"], proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and f"--resume {out}" in err, err
    # seed 6 killed one checkpoint earlier than seed 5: its newest one removed
    newest = sorted((out / "seed6" / "checkpoints").glob("step-*"))[-1]
    shutil.rmtree(newest)
    steps = {s: json.loads(sorted((out / f"seed{s}" / "checkpoints").glob("step-*"))[-1]
                           .joinpath("meta.json").read_text())["env_steps"] for s in (5, 6)}
    assert steps[6] < steps[5]
    total = max(steps.values()) + 80
    for s in (5, 6):  # the same checkpoints, resumed alone
        shutil.copytree(out / f"seed{s}", tmp_path / f"alone{s}")
    code, _, err = train("--resume", out, "--total-steps", total, "--quiet", capsys=capsys)
    assert code == 0, err
    assert f"from env steps {steps[5]:,}, {steps[6]:,}" in err
    for s in (5, 6):
        code, _, err = train("--resume", tmp_path / f"alone{s}", "--total-steps", total,
                             "--quiet", capsys=capsys)
        assert code == 0, err
        (pw, ps), (aw, as_) = _weights(out / f"seed{s}"), _weights(tmp_path / f"alone{s}")
        assert ps == as_ == total
        assert max(float(np.max(np.abs(a - b))) for a, b in zip(pw, aw)) <= 1e-6


class _CrashOnSeed(gym.Wrapper):
    """CartPole whose sub-env reset with seed 21 fails at its 30th step."""

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.doomed, self.count = seed == 21, 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        self.count += 1
        if self.doomed and self.count >= 30:
            raise RuntimeError("the simulator lost its state")
        return self.env.step(action)


CRASHING = "PopulationCrashCartPole-v0"
if CRASHING not in gym.registry:
    gym.register(CRASHING, entry_point=lambda **kw: _CrashOnSeed(gym.make("CartPole-v1")))


def test_a_seed_whose_env_crashes_stops_alone_with_a_line_in_its_directory(tmp_path, capsys):
    out = tmp_path / "pop"
    code, stdout, err = train("--agent", "a2c", "--env", f"{__name__}:{CRASHING}", "--seeds",
                              "10", "20", "--num-envs", "2", "--set", "hidden=[16]",
                              "--total-steps", "200",
                              "--checkpoint-every", "20", "--quiet", "--out", out,
                              capsys=capsys)
    assert code == 1
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert lines[0].startswith("error: seed 20 stopped: ") and "lost its state" in lines[0]
    assert "the other seeds go on" in lines[0] and "Traceback" not in err
    assert lines[-1].startswith("error: 1 of 2 seeds stopped (seed 20: see failure.txt")
    failure = (out / "seed20" / "failure.txt").read_text().splitlines()
    assert len(failure) == 1 and "lost its state" in failure[0]
    assert "the last good checkpoint" in failure[0]  # what it saved before is kept
    assert list((out / "seed20" / "checkpoints").glob("step-*"))
    assert (out / "seed10" / "policy").is_dir() and not (out / "seed10" / "failure.txt").exists()
    assert "seed 10: 200 env steps" in stdout


def test_a_new_population_into_a_population_folder_is_refused(tmp_path, capsys):
    out = tmp_path / "pop"
    out.mkdir()
    (out / "population.json").write_text('{"runs": {"1": "seed1"}}')
    code, _, err = train(*SMALL, "--seeds", "2", "3", "--total-steps", "100", "--out", out,
                         capsys=capsys)
    assert code == 2 and "holds a population already; --resume" in one_error_line(err)
