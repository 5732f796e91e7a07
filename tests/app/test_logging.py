"""The logging cadence (agents/logger.py, pgrad_app/run/logs.py): interval rows, SB3's TensorBoard
names read as plain scalars, buffered episode rows that a killed run never loses up to its last
checkpoint, ``TensorBoardLog`` from Python."""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import agents
from agents import logger
from pgrad.rl.storage.checkpoint import CheckpointStore

ROOT = Path(__file__).resolve().parents[2]


def scalars(directory: Path) -> EventAccumulator:
    acc = EventAccumulator(str(directory))
    acc.Reload()
    return acc


def test_interval_rows_hold_means_and_maxima_and_a_nan_is_not_hidden():
    interval = logger.Interval()
    interval.add({"grad_norm": 1.0, "policy_loss": 2.0, "nonfinite_skipped": 0.0,
                  "step_norms": np.array([1.0, 2.0])})
    interval.add({"grad_norm": 5.0, "policy_loss": 4.0, "nonfinite_skipped": 1.0})
    interval.add({"grad_norm": 3.0, "policy_loss": 0.0, "nonfinite_skipped": 0.0})
    row, arrays = interval.row()
    assert row == pytest.approx({"grad_norm": 3.0, "grad_norm_max": 5.0, "policy_loss": 2.0,
                                 "nonfinite_skipped": 1 / 3, "nonfinite_skipped_max": 1.0})
    np.testing.assert_array_equal(arrays["step_norms"], [1.0, 2.0])
    assert interval.count == 0 and interval.row() == ({}, {})
    for values in ([1.0, math.nan, 2.0], [math.nan, 1.0]):
        for v in values:
            interval.add({"grad_norm": v})
        assert math.isnan(interval.row()[0]["grad_norm_max"])


def test_cadence_defaults_per_agent_and_refuses_nonsense():
    assert logger.LOG_EVERY == {"a2c": 100, "ppo": 1, "npg": 1, "reinforce": 10}
    with pytest.raises(ValueError, match="log_every must be >= 1"):
        logger.Cadence(0)


def test_tensorboard_log_from_python_is_read_by_scalars(tmp_path):
    agent = agents.make("ppo", "Pendulum-v1", seed=1, n_steps=64, minibatch_size=32, epochs=2,
                        tensorboard_log=tmp_path)
    try:
        agent.learn(192, progress=False)
        agent.learn(64, callbacks=logger.TensorBoardLog(tmp_path / "more"), progress=False)
    finally:
        agent.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["PPO_1", "PPO_2", "more"]  # as SB3's
    assert [p.name for p in (tmp_path / "more").iterdir()] == ["PPO_1"]
    acc = scalars(tmp_path / "PPO_1")
    for tag in ("train/policy_loss", "train/value_loss", "train/entropy_loss", "train/approx_kl",
                "train/clip_range", "train/clip_fraction", "train/learning_rate",
                "train/explained_variance", "train/std", "time/fps"):
        assert [e.step for e in acc.Scalars(tag)] == [64, 128, 192], tag  # once per rollout
    assert acc.Scalars("train/std")[0].value == pytest.approx(1.0, rel=0.05)  # log_std_init 0
    assert [e.value for e in acc.Scalars("train/n_updates")] == [1.0, 2.0, 3.0]


def test_run_directory_from_python_logs_at_its_cadence(tmp_path):
    from pgrad_app import RunDirectory

    out = tmp_path / "run"
    agent = agents.make("a2c", "CartPole-v1", seed=3, num_envs=2)
    try:
        agent.learn(200, callbacks=RunDirectory(out, log_every=7), progress=False)
    finally:
        agent.close()
    with open(out / "updates.csv", newline="") as f:
        steps = [int(r["step"]) for r in csv.DictReader(f)]
    assert steps == [10, 80, 150, 200]  # the first update, every 7th after it, the end
    acc = scalars(out / "tb")
    assert [e.step for e in acc.Scalars("train/value_loss")] == steps
    assert [e.step for e in acc.Scalars("rollout/ep_rew_mean")] == [
        s for s in steps if s >= 80]  # CartPole's first episodes end after step 10
    assert "episode/return" not in acc.Tags()["scalars"] + acc.Tags()["tensors"]


@pytest.mark.subprocess
def test_a_killed_run_keeps_every_episode_row_up_to_its_last_checkpoint(tmp_path):
    """SIGKILL right after a checkpoint appears: every episode the checkpoint counts is a row of
    episodes.csv (rows are buffered, but flushed before each checkpoint is written)."""
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "train.py"), "--total-steps", str(10**7),
         "--quiet", "--checkpoint-every", "400", "--out", str(out), "--seed", "5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"))
    store = CheckpointStore(out / "checkpoints")
    deadline = time.monotonic() + 180
    try:
        while len(store.checkpoints()) < 2:
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "no checkpoint appeared"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    for checkpoint in store.checkpoints():
        meta = json.loads((checkpoint / "meta.json").read_text())
        with open(out / "episodes.csv", newline="") as f:
            rows = [r for r in csv.DictReader(f) if int(r["step"]) <= meta["env_steps"]]
        assert meta["episodes"] > 0 and len(rows) == meta["episodes"], checkpoint
        assert [float(r["return"]) for r in rows][-len(meta["recent_returns"]):] == \
            pytest.approx(meta["recent_returns"])
