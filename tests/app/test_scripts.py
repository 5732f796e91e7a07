"""scripts/train.py and scripts/evaluate.py run as a user runs them (subprocess, tiny budgets)."""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

from pgrad_app.run.evaluate import evaluate_run

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
EXAMPLE = ROOT / "examples" / "custom_transform.py"
STEPS = 2000


def run(script: str, *args, cwd=None, timeout=240) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([PY, str(ROOT / "scripts" / script), *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=env)


def read_csv(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One short A2C run on CartPole with the README's custom transform given as a file path."""
    out = tmp_path_factory.mktemp("runs") / "a2c-cartpole"
    proc = run("train.py", "--agent", "a2c", "--env", "CartPole-v1", "--total-steps", STEPS,
               "--seed", 0, "--out", out, "--checkpoint-every", 1000, "--set", "n_steps=8",
               "--transform", f"{EXAMPLE}:log_advantage")
    assert proc.returncode == 0, proc.stderr
    return out, proc


def test_run_directory_holds_every_artifact(trained):
    out, proc = trained
    assert "done (reached total_steps): 2,048 env steps, 16 updates" in proc.stdout
    assert str(out) in proc.stdout

    cfg = yaml.safe_load((out / "config.yaml").read_text())
    import agents
    from pgrad_app.config.settings import field_help

    fields = {f for f, _, _ in field_help(agents.get("a2c").Config)}
    assert cfg["agent"] == "a2c" and cfg["env"] == "CartPole-v1" and cfg["seed"] == 0
    assert cfg["total_steps"] == STEPS and cfg["transform"] == f"{EXAMPLE}:log_advantage"
    assert set(cfg["hyperparameters"]) == fields and cfg["hyperparameters"]["n_steps"] == 8

    header, rows = read_csv(out / "episodes.csv")
    assert header == ["step", "wall_s", "return", "length"] and len(rows) > 10
    steps = [int(r["step"]) for r in rows]
    assert steps == sorted(steps) and 0 < steps[-1] <= 2048
    assert all(float(r["return"]) == int(r["length"]) for r in rows)  # CartPole: +1 per step
    assert all(float(r["wall_s"]) >= 0 for r in rows)

    header, rows = read_csv(out / "updates.csv")
    for col in ("step", "policy_loss", "value_loss", "entropy", "grad_norm", "pg_grad_norm",
                "learning_rate", "nonfinite_skipped"):
        assert col in header
    # 16 updates of 128 steps (n_steps x num_envs); A2C logs every 100 updates (SB3's
    # log_interval), after the first one, at every checkpoint (1024) and at the end.
    assert [int(r["step"]) for r in rows] == [128, 1024, 2048]
    assert all(np.isfinite(float(r["policy_loss"])) for r in rows)
    assert {r["nonfinite_skipped"] for r in rows} == {r["nonfinite_skipped_max"] for r in rows} \
        == {"0.0"}
    assert float(rows[1]["grad_norm_max"]) >= float(rows[1]["grad_norm"]) > 0

    events = list((out / "tb").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 1000

    png = (out / "learning_curve.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000

    ckpts = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert ckpts == ["step-000000001024", "step-000000002048"]  # every 1000 steps, and the end
    assert (out / "policy" / "saved_model.pb").is_file()


def test_tensorboard_has_scalars(trained):
    out, _ = trained
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(out / "tb"))
    acc.Reload()
    for tag in ("rollout/ep_rew_mean", "rollout/ep_len_mean"):  # no episode ended by step 128
        assert [e.step for e in acc.Scalars(tag)] == [1024, 2048], tag
    for tag in ("train/policy_loss",
                "train/value_loss", "train/entropy_loss", "train/explained_variance",
                "train/learning_rate", "train/approx_kl", "time/fps"):
        assert [e.step for e in acc.Scalars(tag)] == [128, 1024, 2048], tag  # plain scalars
    _, rows = read_csv(out / "updates.csv")
    assert [e.value for e in acc.Scalars("train/entropy_loss")] == pytest.approx(
        [-float(r["entropy"]) for r in rows])  # SB3's sign
    assert [e.value for e in acc.Scalars("rollout/ep_rew_mean")] == pytest.approx(
        [float(r["ep_rew_mean"]) for r in rows[1:]])
    assert rows[0]["ep_rew_mean"] == ""  # before the first episode: empty, as in SB3's CSV
    assert all(e.value > 0 for e in acc.Scalars("time/fps"))


def test_checkpoint_restores_into_a_fresh_agent(trained):
    import tensorflow as tf

    import agents
    from pgrad.rl.storage.checkpoint import CheckpointStore
    from pgrad_app.config.plugins import load_transform

    out, _ = trained
    a2c = agents.get("a2c")
    agent = a2c(a2c.Config(n_steps=8), env_id="CartPole-v1", seed=123,
                transform=load_transform(f"{EXAMPLE}:log_advantage"))
    try:
        meta, path = CheckpointStore(out / "checkpoints").restore(agent.trackables())
        assert path.name == "step-000000002048" and agent.env_steps == meta["env_steps"] == 2048
        reader = tf.train.load_checkpoint(str(path / "ckpt"))
        # Keras weights are stored once, under the optimizer's path (the first one TF finds);
        # the agent's networks now hold exactly those values (the seed-123 init is gone).
        for i, v in enumerate(agent.net.variables):
            key = f"optimizer/_trainable_variables/{i}/.ATTRIBUTES/VARIABLE_VALUE"
            np.testing.assert_array_equal(v.numpy(), reader.get_tensor(key))
        assert int(agent.updates_var.numpy()) == meta["updates"] == 16
    finally:
        agent.close()


def test_saved_model_loads_without_pgrad(trained):
    out, _ = trained
    code = textwrap.dedent(f"""
        import os, sys
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
        import numpy as np, tensorflow as tf
        policy = tf.saved_model.load({str(out / "policy")!r})
        obs = np.random.default_rng(0).uniform(-0.05, 0.05, size=(5, 4)).astype(np.float32)
        a = policy.action(tf.constant(obs)).numpy()
        assert a.shape == (5,), a.shape
        assert set(a.tolist()) <= {{0, 1}}, a
        assert not any(m == "pgrad" or m.startswith(("pgrad.", "agents")) for m in sys.modules)
        print("ok", a.tolist())
    """)
    proc = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd="/")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ok")


def test_evaluate_prints_and_writes_eval_json(trained):
    out, _ = trained
    proc = run("evaluate.py", out, "--episodes", 3, "--deterministic", "--seed", 7)
    assert proc.returncode == 0, proc.stderr
    assert "return" in proc.stdout and "±" in proc.stdout and "eval.json" in proc.stdout
    result = json.loads((out / "eval.json").read_text())
    assert result["episodes"] == 3 and len(result["returns"]) == 3
    assert result["source"] == "policy" and result["deterministic"] is True
    assert result["return_mean"] == pytest.approx(np.mean(result["returns"]))
    assert result["length_std"] == pytest.approx(np.std(result["lengths"]))


def test_run_evaluation_from_export_and_from_checkpoint(trained, tmp_path):
    out, _ = trained
    first = evaluate_run(out, episodes=2, seed=3, write=False, deterministic=False)
    again = evaluate_run(out, episodes=2, seed=3, write=False, deterministic=False)
    assert first["source"] == "policy" and first["returns"] == again["returns"]
    sampled = evaluate_run(out, episodes=2, seed=3, write=False, deterministic=False,
                           source="checkpoint")
    assert sampled["source"] == "checkpoint"
    # Greedy actions from the checkpoint and from the exported SavedModel are the same policy.
    from_policy = evaluate_run(out, episodes=3, deterministic=True, seed=5, write=False)
    from_ckpt = evaluate_run(out, episodes=3, deterministic=True, seed=5, write=False,
                               source="checkpoint")
    assert from_policy["source"] == "policy" and from_ckpt["source"] == "checkpoint"
    assert from_policy["returns"] == from_ckpt["returns"]
    video = tmp_path / "video"
    evaluate_run(out, episodes=1, deterministic=True, video_dir=video, write=False)
    mp4 = list(video.glob("*.mp4"))
    assert len(mp4) == 1 and mp4[0].stat().st_size > 0


def test_resume_continues_from_the_saved_step_count(trained, tmp_path):
    src, _ = trained
    out = tmp_path / "resumed"
    shutil.copytree(src, out)
    proc = run("train.py", "--resume", out, "--total-steps", 3000, "--quiet",
               "--transform", f"{EXAMPLE}:log_advantage")
    assert proc.returncode == 0, proc.stderr
    assert "resuming" in proc.stderr and "from env step 2,048" in proc.stderr
    assert "done (reached total_steps): 3,072 env steps, 24 updates" in proc.stdout
    _, rows = read_csv(out / "updates.csv")
    steps = [int(r["step"]) for r in rows]
    assert steps == [128, 1024, 2048, 2176, 3072]  # continues 2048 -> 2176, no gap/repeat
    assert yaml.safe_load((out / "config.yaml").read_text())["total_steps"] == 3000
    assert sorted(p.name for p in (out / "checkpoints").iterdir())[-1] == "step-000000003072"


def test_help_documents_every_option_with_its_default():
    proc = run("train.py", "--help")
    assert proc.returncode == 0
    from pgrad_app.cli import evaluate as evaluate_script
    from pgrad_app.cli import train

    for action in train.build_parser()._actions:
        if action.dest == "help" or action.help == argparse.SUPPRESS:  # other toolkits' flags,
            continue  # refused with pgrad's name ("did you mean"), hidden from --help
        assert "default" in (action.help or ""), action.dest
        assert action.option_strings[0] in proc.stdout
    assert "hyperparameters" in proc.stdout and "gae_lambda" in proc.stdout
    parser = evaluate_script.build_parser()
    assert "--deterministic" in parser.format_help()
    for action in parser._actions:
        if action.dest not in ("help", "run"):
            assert "default" in (action.help or ""), action.dest


def test_custom_transform_example_forms_agree():
    """The example's plain function equals its built-in chain (and a per-step numpy loop)."""
    import tensorflow as tf

    import pgrad

    spec = importlib.util.spec_from_file_location("example_ct", EXAMPLE)
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    rng = np.random.default_rng(0)
    grads = [tf.constant(rng.normal(size=(6, 3, 2)), tf.float32),
             tf.constant(rng.normal(size=(6, 2)), tf.float32)]
    adv = tf.constant(rng.normal(size=6) * 3, tf.float32)
    slow = pgrad.from_function(ex.log_advantage)
    mean = pgrad.from_function(ex.log_advantage_mean)
    fast = ex.fast()
    variables = [tf.Variable(tf.zeros(g.shape[1:])) for g in grads]
    a, _ = slow.update(grads, slow.init(variables), advantages=adv)
    b, _ = fast.update(grads, fast.init(variables), advantages=adv)
    c, _ = mean.update(grads, mean.init(variables), advantages=adv)
    for x, y in zip(a, c):
        np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-6, atol=1e-7)
    ref = [np.zeros(g.shape[1:]) for g in grads]
    for t in range(6):
        norm = np.sqrt(sum(np.sum(g.numpy()[t] ** 2) for g in grads))
        w = np.sign(adv[t]) * np.log1p(abs(adv[t])) * min(1.0, ex.MAX_NORM / norm)
        for r, g in zip(ref, grads):
            r += w * g.numpy()[t] / 6
    for x, y, r in zip(a, b, ref):
        np.testing.assert_allclose(x.numpy(), r, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(y.numpy(), r, rtol=1e-5, atol=1e-6)


def test_runlog_writes_csv_rows_histograms_and_truncates_on_resume(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from pgrad_app.run.logs import RunLog, rolling_mean

    log = RunLog(tmp_path)
    log.episode(10, 0.5, 12.0, 12)
    log.update(16, {"loss": 0.25, "step_norms": np.array([1.0, 2.0, 3.0])})
    log.episode(30, 1.0, 20.0, 20)
    log.update(32, {"loss": 0.5, "new_metric": 1.0})  # columns are fixed by the first update
    log.close()
    assert (tmp_path / "updates.csv").read_text().splitlines() == ["step,loss", "16,0.25",
                                                                    "32,0.5"]
    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"tensors": 0})
    acc.Reload()
    hist = acc.Tensors("train/step_norms")[0]
    assert hist.step == 16 and [e.value for e in acc.Scalars("train/new_metric")] == [1.0]
    # Resuming from a checkpoint at step 16 drops what was logged after it, then appends.
    log = RunLog(tmp_path, resume_step=16, tensorboard=False)
    log.update(48, {"loss": 0.75})
    log.close()
    assert (tmp_path / "updates.csv").read_text().splitlines()[1:] == ["16,0.25", "48,0.75"]
    assert (tmp_path / "episodes.csv").read_text().splitlines() == [
        "step,wall_s,return,length", "10,0.500,12.0,12"]
    np.testing.assert_allclose(rolling_mean([1, 2, 3, 4], window=2), [1, 1.5, 2.5, 3.5])
