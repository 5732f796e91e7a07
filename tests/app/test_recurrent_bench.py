"""The ``recurrent_ppo_vs_sb3c`` bench figure (pgrad_app.perf.peers.recurrent): both sides on
rl-zoo's CartPoleNoVel ppo_lstm settings, skipped in one line without sb3-contrib's interpreter,
rounds alternating with the median ratio as the value. No torch here: sb3-contrib's script is
imported for its settings only (torch is imported inside its run)."""

from __future__ import annotations

import importlib.util
import math

import pytest

from pgrad_app.perf.peers import recurrent


def _side_script():
    spec = importlib.util.spec_from_file_location("sb3c_side", recurrent.SB3C_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_both_sides_run_rl_zoos_ppo_lstm_settings():
    """pgrad's tuned entry and sb3-contrib's script name the same settings (pgrad's names)."""
    side = _side_script()
    hp = recurrent.tuned_hp()
    zoo, arch = side.ZOO, side.ARCH
    assert hp["num_envs"] == zoo["n_envs"] and hp["n_steps"] == zoo["n_steps"]
    assert hp["minibatch_size"] == zoo["batch_size"] and hp["epochs"] == zoo["n_epochs"]
    for key in ("gamma", "gae_lambda", "ent_coef", "learning_rate", "clip_range"):
        assert hp[key] == zoo[key], key
    assert hp["normalize_obs"] and hp["normalize_reward"] and zoo["normalize"]
    assert hp["recurrent"] == "lstm" and hp["lstm_units"] == arch["lstm_hidden_size"]
    assert hp["hidden"] == arch["net_arch"]["pi"] == arch["net_arch"]["vf"]
    assert hp["activation"] == arch["activation_fn"].lower()
    assert hp["ortho_init"] is arch["ortho_init"] is False and arch["enable_critic_lstm"]
    with pytest.raises(ValueError, match="unknown spec keys \\['n_envs'\\]"):
        side.run({"n_envs": 4})


def test_figure_is_skipped_in_one_line_without_the_interpreter(monkeypatch, tmp_path):
    missing = tmp_path / "venv" / "bin" / "python"
    monkeypatch.setattr(recurrent, "SB3C_PYTHON", missing)

    def no_process(*args, **kwargs):
        raise AssertionError("no run may start without the interpreter")

    monkeypatch.setattr(recurrent, "pgrad_run", no_process)
    monkeypatch.setattr(recurrent, "sb3c_run", no_process)
    out = recurrent.recurrent_ppo_vs_sb3c(repeats=60)
    assert out["name"] == "recurrent_ppo_vs_sb3c" and out["met"] is False
    assert math.isnan(out["value"]) and set(out["details"]) == {"skipped"}
    reason = out["details"]["skipped"]
    assert "\n" not in reason and str(missing) in reason and "PGRAD_SB3C_PYTHON" in reason


def test_rounds_alternate_and_the_value_is_the_median_ratio(monkeypatch, tmp_path):
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    order = []
    walls = {"pgrad": iter([1.0, 4.0, 2.0]), "sb3c": iter([3.0, 4.0, 3.0])}

    def run(side, steps):
        order.append(side)
        wall = next(walls[side])
        out = {"env_steps": steps, "process_wall_s": wall, "process_cpu_s": 2 * wall}
        if side == "pgrad":
            return {**out, "side": "command", "loop_wall_s": wall / 2}
        return {**out, "side": "sb3c", "wall_s": wall / 2}

    monkeypatch.setattr(recurrent, "pgrad_run", lambda steps, seed: run("pgrad", steps))
    monkeypatch.setattr(recurrent, "sb3c_run",
                        lambda steps, seed, python=None: run("sb3c", steps))
    out = recurrent.recurrent_ppo_vs_sb3c(0, steps=1000, rounds=3, python=python)
    assert order == ["pgrad", "sb3c", "sb3c", "pgrad", "pgrad", "sb3c"]
    assert out["value"] == 1.5 and out["met"] is True  # median of 3, 1, 1.5
    assert out["details"]["round_ratios"] == [3.0, 1.0, 1.5]
    assert out["details"]["env_steps_per_s"] == {"pgrad_train": 500.0, "sb3c": 333.3}
    assert len(out["details"]["load_avg_1m"]) == 7 and not out["details"]["full_length"]
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        recurrent.recurrent_ppo_vs_sb3c(0, steps=1000, rounds=0, python=python)


@pytest.mark.parametrize("argv, want", [([], {"rounds": 1}),
                                        (["--rounds", "2", "--steps", "4096"],
                                         {"rounds": 2, "steps": 4096})])
def test_the_bench_command_lists_and_passes_its_settings(monkeypatch, argv, want):
    from pgrad_app.cli.bench import build_parser
    from pgrad_app.perf import driver

    seen = {}

    def fake(repeats, **kwargs):
        seen.update(kwargs)
        return {"name": "recurrent_ppo_vs_sb3c", "details": {}}

    assert "recurrent_ppo_vs_sb3c" in driver.OPT_IN
    monkeypatch.setitem(driver.OPT_IN, "recurrent_ppo_vs_sb3c", fake)
    args = build_parser().parse_args(["--only", "recurrent_ppo_vs_sb3c", *argv])
    driver.run_figure("recurrent_ppo_vs_sb3c", args)
    assert seen == want


@pytest.mark.skipif(recurrent.sb3c_missing() is not None, reason="no sb3-contrib interpreter")
def test_sb3c_side_runs_one_rollout_under_its_own_interpreter():
    out = recurrent.sb3c_run(256, seed=0)
    assert out["side"] == "sb3c" and out["env_steps"] == 256 and out["torch_threads"] == 1
    assert out["params"] == 44355 and out["process_wall_s"] >= out["wall_s"] > 0
