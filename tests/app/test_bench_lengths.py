"""scripts/bench.py's run lengths: each side-by-side figure's own default unless ``--steps``
is given, and the fixed cost outside the command's loop reported apart (no training here)."""

from __future__ import annotations

import numpy as np
import pytest

from pgrad_app.cli.bench import build_parser
from pgrad_app.perf import driver
from pgrad_app.perf.peers import sb3


@pytest.mark.parametrize("argv, want", [([], sb3.MINATAR_STEPS), (["--steps", "1000"], 1000)])
def test_minatar_figure_runs_its_own_length_unless_steps_is_given(monkeypatch, argv, want):
    seen = {}

    def fake(repeats, steps=sb3.MINATAR_STEPS, rounds=1):  # the figure's signature, its default
        seen["steps"] = steps
        return {"name": "ppo_minatar_vs_sb3", "details": {}}

    monkeypatch.setitem(driver.OPT_IN, "ppo_minatar_vs_sb3", fake)
    driver.run_figure("ppo_minatar_vs_sb3", build_parser().parse_args(argv))
    assert seen["steps"] == want
    assert sb3.MINATAR_STEPS == 500_000


def test_other_figures_keep_their_lengths(monkeypatch):
    """Without --steps the MuJoCo figures run 50k steps as before, the Atari RSS figure 8192."""
    seen = {}

    def recorder(name):
        def fake(repeats, steps=50_000, rounds=1):
            seen[name] = steps
            return {"name": name, "details": {}}
        return fake

    for name in ("ppo_mujoco_vs_sb3", "ppo_atari_rss_vs_sb3"):
        monkeypatch.setitem(driver.OPT_IN, name, recorder(name))
        driver.run_figure(name, build_parser().parse_args([]))
    assert seen == {"ppo_mujoco_vs_sb3": 50_000, "ppo_atari_rss_vs_sb3": 8192}


def test_side_by_side_reports_the_command_outside_its_loop(monkeypatch):
    """``command_outside_loop_s`` = the command's process wall minus its loop's; the loop ratio
    compares the loops per env step (SB3's learn wall)."""
    runs = {"command": {"side": "command", "env_steps": 1000, "wall_s": 30.0,
                        "process_wall_s": 30.0, "loop_wall_s": 24.0, "process_cpu_s": 30.0,
                        "cpu_s": 30.0, "peak_rss_mb": 1.0},
            "sb3": {"side": "sb3", "env_steps": 2000, "wall_s": 60.0, "process_wall_s": 64.0,
                    "process_cpu_s": 60.0, "cpu_s": 60.0, "peak_rss_mb": 1.0},
            "pgrad": {"side": "pgrad", "env_steps": 1000, "wall_s": 20.0, "process_wall_s": 25.0,
                      "process_cpu_s": 20.0, "cpu_s": 20.0, "peak_rss_mb": 1.0}}
    monkeypatch.setattr(sb3, "sb3_available", lambda: True)
    monkeypatch.setattr(sb3, "train_run", lambda side, spec: runs[side])
    fig = sb3.side_by_side_vs_sb3("f", "goal", {}, steps=1000, full=500_000)
    d = fig["details"]
    assert d["command_outside_loop_s"] == 6.0 and d["command_outside_loop_share"] == 0.2
    assert d["sb3_outside_learn_s"] == 4.0
    assert d["loop_ratio"] == pytest.approx((24 / 1000) / (60 / 2000), abs=1e-3)
    assert fig["value"] == pytest.approx((30 / 1000) / (64 / 2000), abs=1e-3)
    assert not d["full_length"]


def test_side_by_side_rounds_alternate_the_order_and_report_the_median(monkeypatch):
    """``--rounds 3``: command, SB3, bare; then bare, SB3, command; then the first order again.
    The value is the median of the rounds' ratios, each round's ratios reported."""
    order, walls = [], iter([30.0, 60.0, 20.0,   # round 0: command, sb3, pgrad
                             20.0, 50.0, 40.0,   # round 1: pgrad, sb3, command
                             30.0, 40.0, 20.0])  # round 2: command, sb3, pgrad

    def fake_run(side, spec):
        order.append(side)
        wall = next(walls)
        run = {"side": side, "env_steps": 1000, "wall_s": wall, "process_wall_s": wall,
               "cpu_s": wall, "process_cpu_s": wall, "peak_rss_mb": 1.0}
        return {**run, "loop_wall_s": wall} if side == "command" else run

    monkeypatch.setattr(sb3, "sb3_available", lambda: True)
    monkeypatch.setattr(sb3, "train_run", fake_run)
    fig = sb3.side_by_side_vs_sb3("f", "goal", {}, steps=1000, full=1000, rounds=3)
    assert order == ["command", "sb3", "pgrad", "pgrad", "sb3", "command",
                     "command", "sb3", "pgrad"]
    assert [r["value"] for r in fig["details"]["rounds"]] == [0.5, 0.8, 0.75]
    assert fig["value"] == 0.75  # the median
    assert fig["details"]["bare_ratio"] == pytest.approx(np.median([20 / 60, 20 / 50, 20 / 40]),
                                                         abs=1e-3)
    assert len(fig["details"]["runs"]) == 9
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        sb3.side_by_side_vs_sb3("f", "goal", {}, steps=1000, full=1000, rounds=0)


def test_bench_passes_rounds_to_the_sb3_figures(monkeypatch):
    seen = {}

    def fake(repeats, steps=50_000, rounds=1):
        seen["rounds"] = rounds
        return {"name": "a2c_mujoco_vs_sb3", "details": {}}

    monkeypatch.setitem(driver.OPT_IN, "a2c_mujoco_vs_sb3", fake)
    driver.run_figure("a2c_mujoco_vs_sb3", build_parser().parse_args(["--rounds", "2"]))
    assert seen["rounds"] == 2
