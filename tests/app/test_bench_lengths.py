"""scripts/bench.py's run lengths: each side-by-side figure's own default unless ``--steps``
is given, and the fixed cost outside the command's loop reported apart (no training here)."""

from __future__ import annotations

import pytest

from pgrad_app.cli.bench import build_parser
from pgrad_app.perf import driver, sb3


@pytest.mark.parametrize("argv, want", [([], sb3.MINATAR_STEPS), (["--steps", "1000"], 1000)])
def test_minatar_figure_runs_its_own_length_unless_steps_is_given(monkeypatch, argv, want):
    seen = {}

    def fake(repeats, steps=sb3.MINATAR_STEPS):  # the figure's signature, its default
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
        def fake(repeats, steps=50_000):
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
