"""The command line over the Python API: evaluation during training, saved agents on the command
line, run directories from Python, tracking, transforms from the command line, command names."""

from __future__ import annotations

import csv
import json

import pytest
import yaml
from cli_helpers import evaluate, one_error_line, train

import agents
import pgrad
from pgrad_app.errors import UserError, command
from pgrad_app.run.evaluate import evaluate_run

TRANSFORMS = '''
import tensorflow as tf
import pgrad


def weighted(grads, *, advantages, **context):
    w = tf.math.sign(advantages) * tf.math.log1p(tf.abs(advantages))
    return [g * tf.reshape(w, [-1] + [1] * (len(g.shape) - 1)) for g in grads]


def weighted_mean(grads, *, advantages, **context):  # the final gradient: weight, then average
    return [tf.reduce_mean(g, 0) for g in weighted(grads, advantages=advantages)]


def clipped(max_norm: float = 1.0):
    return pgrad.chain(pgrad.clip_per_step(max_norm), pgrad.weight_by("advantages"),
                       pgrad.mean_steps())
'''


def rows(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_eval_every_keeps_the_best_and_evaluation_is_deterministic_by_default(tmp_path, capsys):
    out = tmp_path / "run"
    code, stdout, err = train("--total-steps", 320, "--eval-every", 160, "--eval-episodes", 2,
                              "--quiet", "--out", out, capsys=capsys)
    assert code == 0, err
    assert [int(r["step"]) for r in rows(out / "eval.csv")] == [160, 320]
    assert "eval at step 160: return" in err and "(deterministic)" in err
    config = (out / "config.yaml").read_text()
    assert yaml.safe_load(config)["eval_every"] == 160
    assert "Reproduce: pgrad-train --config" in config and "scripts/" not in config
    code, stdout, err = evaluate(out / "best", "--episodes", 2, capsys=capsys)  # a saved agent
    assert code == 0, err
    assert "(deterministic actions" in stdout
    assert json.loads((out / "best" / "eval.json").read_text())["deterministic"] is True
    code, stdout, err = evaluate(out, "--episodes", 2, "--stochastic", capsys=capsys)
    assert code == 0 and "(sampled (--stochastic) actions" in stdout
    code, _, err = train("--total-steps", 80, "--quiet", "--out", out, "--overwrite",
                         capsys=capsys)
    assert code == 0 and not (out / "eval.csv").exists() and not (out / "best").exists()


def test_a_saved_agent_resumes_and_evaluates_on_the_command_line(tmp_path, capsys):
    path = agents.make("a2c", "CartPole-v1", seed=4, num_envs=4).learn(160, progress=False)
    path = path.save(tmp_path / "saved")
    code, _, err = train("--resume", path, "--quiet", capsys=capsys)
    assert code == 2 and "give --total-steps N" in one_error_line(err)
    code, stdout, err = train("--resume", path, "--total-steps", 240, "--quiet", capsys=capsys)
    assert code == 0, err
    assert "from env step 160" in err and "done (reached total_steps): 240 env steps" in stdout
    assert [int(r["step"]) for r in rows(path / "updates.csv")] == [180, 240]  # first, last
    assert yaml.safe_load((path / "config.yaml").read_text())["seed"] == 4
    assert evaluate_run(path, episodes=2, write=False)["deterministic"] is True


def test_run_directory_written_from_python(tmp_path, capsys):
    from pgrad_app import RunDirectory

    out = tmp_path / "run"
    agent = agents.make("a2c", "CartPole-v1", seed=5, num_envs=4)
    agent.learn(80, callbacks=RunDirectory(out), progress=False)
    for name in ("config.yaml", "agent.json", "episodes.csv", "updates.csv", "policy",
                 "checkpoints", "learning_curve.png", ".pgrad-run"):
        assert (out / name).exists(), name
    assert pgrad.evaluate(out, episodes=2)["return_mean"] == evaluate_run(
        out, episodes=2, seed=0, write=False)["return_mean"]
    code, stdout, err = train("--resume", out, "--total-steps", 160, "--quiet", capsys=capsys)
    assert code == 0 and "160 env steps" in stdout, err
    with pytest.raises(UserError, match="already holds a run"):
        agent.learn(20, callbacks=RunDirectory(out), progress=False)
    agent.close()


def test_plain_transforms_of_both_shapes_and_factory_arguments(tmp_path, capsys):
    (tmp_path / "mine.py").write_text(TRANSFORMS)
    for name in ("weighted", "weighted_mean"):  # per-step result, or already aggregated
        code, _, err = train("--total-steps", 80, "--quiet", "--out", tmp_path / name,
                             "--transform", f"{tmp_path / 'mine.py'}:{name}", capsys=capsys)
        assert code == 0, err
    per_step = rows(tmp_path / "weighted" / "updates.csv")[0]
    aggregated = rows(tmp_path / "weighted_mean" / "updates.csv")[0]
    assert float(per_step["pg_grad_norm"]) == pytest.approx(float(aggregated["pg_grad_norm"]),
                                                            rel=1e-5)
    out = tmp_path / "clipped"
    code, _, err = train("--total-steps", 80, "--quiet", "--out", out, "--transform",
                         f"{tmp_path / 'mine.py'}:clipped", "--transform-arg", "max_norm=0.5",
                         capsys=capsys)
    assert code == 0, err
    assert yaml.safe_load((out / "config.yaml").read_text())["transform_args"] == {
        "max_norm": 0.5}
    code, _, err = train("--total-steps", 80, "--quiet", "--out", tmp_path / "bad",
                         "--transform", f"{tmp_path / 'mine.py'}:clipped", "--transform-arg",
                         "max_nrom=0.5", capsys=capsys)
    assert code == 2 and "Did you mean 'max_norm'" in one_error_line(err)
    assert not (tmp_path / "bad").exists()


@pytest.mark.subprocess  # wandb runs its own service process
def test_track_wandb_offline_writes_its_files(tmp_path, capsys, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "run"
    code, _, err = train("--total-steps", 160, "--num-envs", 2, "--eval-every", 80,
                         "--eval-episodes", 1, "--track", "wandb", "--quiet", "--out", out,
                         capsys=capsys)
    assert code == 0, err
    (run_dir,) = (out / "wandb").glob("offline-run-*")
    (log,) = run_dir.glob("run-*.wandb")
    data = log.read_bytes()
    for key in (b"train/policy_loss", b"rollout/ep_rew_mean", b"eval/mean_reward", b"time/fps",
                b"gae_lambda", b"learning_curve"):
        assert key in data, key
    assert list((run_dir / "files" / "media" / "images").glob("learning_curve*.png"))
    assert (out / "episodes.csv").exists() and (out / "eval.csv").exists()  # still the record
    code, _, err = evaluate(out, "--episodes", 1, "--video", tmp_path / "videos", capsys=capsys)
    assert code == 0, err  # the same tracked run gets the evaluation and its video
    assert len(list((out / "wandb").glob(f"offline-run-*-{log.stem[4:]}"))) == 2
    assert list((out / "wandb").glob("offline-run-*/files/media/videos/*.mp4"))


def test_messages_name_the_command_the_user_ran(monkeypatch):
    monkeypatch.setattr("sys.argv", ["/home/me/pgrad/scripts/train.py"])
    assert command("train") == "python scripts/train.py"
    monkeypatch.setattr("sys.argv", ["/venv/bin/pgrad-train"])
    assert command("train") == "pgrad-train"
