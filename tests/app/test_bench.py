"""scripts/bench.py and the side-by-side runs (pgrad_app.perf.peers.side_by_side) run as a user runs
them (tiny settings, no timing).

Only that they run and report what they promise (JSON figures with goals, peak memory, a table);
the numbers themselves are never asserted: the machine is shared and timings are noisy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parents[2]
SIDE_BY_SIDE = "pgrad_app.perf.peers.side_by_side"


def run(script: str, *args, timeout=300) -> subprocess.CompletedProcess:
    command = ([str(ROOT / "scripts" / script)] if script.endswith(".py")
               else ["-m", script])  # a module: python -m pgrad_app.perf.peers.side_by_side
    return subprocess.run([sys.executable, *command, *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))


def test_bench_figure_reports_value_goal_and_memory():
    proc = run("bench.py", "--only", "update_overhead", "--repeats", 2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    fig = next(x for x in lines if x.get("name") == "update_overhead_ms")
    assert fig["goal"] == "<= 0.5 ms" and isinstance(fig["met"], bool)
    assert fig["value"] > 0 and fig["details"]["figure_process_peak_rss_mb"] > 0
    assert "update_overhead_ms" in proc.stdout.splitlines()[-1]  # the table's row


def test_bench_command_overhead_runs_both_lines():
    """The command_overhead figure: pgrad-train with its run directory beside the bare
    agent.learn on rl-zoo's one-env MuJoCo A2C setting (a tiny budget: it runs, no timing)."""
    proc = run("bench.py", "--only", "command_overhead", "--steps", 100, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    fig = next(x for x in lines if x.get("name") == "command_overhead")
    assert fig["goal"] == "<= 1.15 x the bare agent.learn" and fig["value"] > 0
    bare, command = fig["details"]["runs"]
    assert (bare["side"], command["side"]) == ("pgrad", "command")
    assert bare["env_steps"] == command["env_steps"] == 100
    assert command["updates_csv_rows"] == 2  # the first update and the end (A2C: every 100)
    assert fig["details"]["loop_ratio"] > 0 and command["tensorboard_bytes"] > 0


def test_bench_runs_pgrad_side():
    spec = {"agent": "a2c", "env": "CartPole-v1", "seed": 0, "max_steps": 400, "target": 475}
    proc = run(SIDE_BY_SIDE, "pgrad", json.dumps(spec))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["side"] == "pgrad" and out["env_steps"] >= 400 and not out["solved"]
    assert out["wall_s"] > 0 and out["peak_rss_mb"] > 0


@pytest.mark.sb3  # opt-in: make test-sb3 installs the bench extra and runs these
def test_bench_runs_sb3_side_without_tensorflow():
    spec = {"agent": "a2c", "env": "CartPole-v1", "seed": 0, "max_steps": 400, "target": 475}
    proc = run(SIDE_BY_SIDE, "sb3", json.dumps(spec))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["side"] == "sb3" and out["env_steps"] >= 400 and out["torch_threads"] == 1
    assert not out["tensorflow_loaded"]  # its memory and start-up are SB3's own


@pytest.mark.sb3  # opt-in: make test-sb3 installs the bench extra and runs these
def test_bench_runs_a2c_mujoco_setting_on_both_sides():
    """rl-zoo's MuJoCo A2C setting: SB3 with one env and VecNormalize, pgrad with the same
    hyperparameters as config fields (a few hundred steps: it runs, no timing)."""
    hp = {"num_envs": 1, "n_steps": 5, "normalize_obs": True, "normalize_reward": True}
    spec = {"agent": "a2c", "env": "HalfCheetah-v5", "seed": 21, "max_steps": 200, "hp": hp}
    for side in ("pgrad", "sb3"):
        proc = run(SIDE_BY_SIDE, side, json.dumps(spec))
        assert proc.returncode == 0, proc.stderr[-3000:]
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out["side"] == side and out["env_steps"] >= 200
        if side == "sb3":
            assert out["n_envs"] == 1 and out["vec_normalize"]


@pytest.mark.sb3  # opt-in: make test-sb3 installs the bench extra and runs these
def test_command_side_stops_at_the_target_and_reports_its_episodes():
    """The command side of the SB3 figures: pgrad-train with --stop-at-return, its solve read
    back from the run's episodes.csv (a target no run reaches in 600 steps: not solved)."""
    spec = {"agent": "a2c", "env": "CartPole-v1", "seed": 0, "max_steps": 600, "target": 475}
    proc = run(SIDE_BY_SIDE, "command", json.dumps(spec), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["side"] == "command" and out["env_steps"] >= 600 and not out["solved"]
    assert out["episodes"] > 0 and out["last20_return"] < 475
    spec.update(target=5, max_steps=5000)  # any 20 CartPole episodes return > 5: stops early
    out = json.loads(run(SIDE_BY_SIDE, "command", json.dumps(spec), timeout=600)
                     .stdout.strip().splitlines()[-1])
    assert out["solved"] and out["env_steps"] < 5000


@pytest.mark.sb3  # opt-in: make test-sb3 installs the bench extra and runs these
def test_minatar_sides_train_the_same_network():
    """ppo_minatar_vs_sb3's sides: SB3 with pgrad's minatar_cnn as its features extractor has
    exactly pgrad's parameter count (conv 16 3x3, 128 units, one linear layer per head)."""
    from pgrad_app.perf.peers.sb3 import minatar_settings

    hp, sb3_settings = minatar_settings()
    hp.update(num_envs=2, n_steps=8, minibatch_size=8)  # tiny: it runs, no timing
    sb3_settings.update(n_envs=2, hp={**sb3_settings["hp"], "n_steps": 8, "batch_size": 8})
    spec = {"agent": "ppo", "env": "MinAtar/Breakout-v1", "seed": 0, "max_steps": 16, "hp": hp,
            "sb3_settings": sb3_settings}
    out = {}
    for side in ("pgrad", "sb3"):
        proc = run(SIDE_BY_SIDE, side, json.dumps(spec))
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[side] = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out[side]["env_steps"] >= 16
    assert out["sb3"]["network"] == "minatar_cnn" and not out["sb3"]["tensorflow_loaded"]
    assert out["pgrad"]["parameters"] == out["sb3"]["parameters"] == (
        4 * 9 * 16 + 16 + 8 * 8 * 16 * 128 + 128 + 129 * 3 + 129)  # Breakout: 4 planes, 3 actions
