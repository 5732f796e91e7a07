"""The mappo_vs_benchmarl figure and the learning driver, without BenchMARL: the two sides'
settings describe the same work, a missing interpreter is one skipped line, bad sizes are one
error, rounds alternate with the median ratio as the value (fake runs), the driver skips finished
runs, and the team return of the last tenth is weighted by
episodes."""

from __future__ import annotations

import json
import math

import pytest

from pgrad_app.perf.peers import benchmarl_side, mappo_benchmarl
from pgrad_app.perf.peers.mappo_benchmarl import MATCHED


def test_the_matched_settings_are_the_same_work():
    ours, theirs = MATCHED["pgrad"], MATCHED["benchmarl"]
    assert ours["num_envs"] * ours["n_steps"] == theirs["frames_per_batch"]
    assert ours["num_envs"] == theirs["n_envs"]
    assert ours["epochs"] * ours["num_minibatches"] == theirs["minibatch_iters"]
    assert theirs["frames_per_batch"] // ours["num_minibatches"] == theirs["minibatch_size"]
    assert list(ours["hidden"]) == list(theirs["hidden"])
    assert ours["learning_rate"] == theirs["lr"]
    assert ours["max_grad_norm"] == theirs["clip_grad"]
    assert ours["gae_lambda"] == theirs["lmbda"] and ours["ent_coef"] == theirs["entropy_coef"]
    assert ours["critic_input"] == "state"  # BenchMARL's MAPPO critic reads the state
    assert set(theirs) <= set(benchmarl_side.SPEC)  # every key is one the side reads
    assert mappo_benchmarl.GAME == {k: theirs[k] for k in ("max_cycles", "N", "local_ratio")}


def test_pgrads_side_takes_the_game_as_env_kwargs():
    assert mappo_benchmarl.game_argv({"max_cycles": 100, "N": 3}) == [
        "--env-kwargs", "max_cycles=100", "N=3"]


def test_without_the_interpreter_the_figure_is_skipped(tmp_path):
    out = mappo_benchmarl.mappo_vs_benchmarl(1, python=tmp_path / "no-python")
    assert out["name"] == "mappo_vs_benchmarl" and math.isnan(out["value"])
    assert "no BenchMARL interpreter" in out["details"]["skipped"] and not out["met"]


def test_steps_must_be_whole_batches(tmp_path):
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    with pytest.raises(ValueError, match="multiple of 400"):
        mappo_benchmarl.mappo_vs_benchmarl(1, steps=1000, python=python)


def test_rounds_alternate_and_the_value_is_the_median_ratio(monkeypatch, tmp_path):
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    order, specs = [], []
    walls = {"pgrad": iter([1.0, 4.0]), "benchmarl": iter([3.0, 4.0])}

    def run(side, steps):
        order.append(side)
        wall = next(walls[side])
        out = {"env_steps": steps, "process_wall_s": wall, "process_cpu_s": wall / 2}
        if side == "pgrad":
            return {**out, "side": "command", "loop_wall_s": wall / 4}
        return {**out, "side": "benchmarl", "wall_s": wall / 2, "curve": [[400, -1.0, 2]]}

    def pgrad_run(algo, steps, seed, hp, game):
        assert algo == "mappo" and hp == MATCHED["pgrad"] and game == mappo_benchmarl.GAME
        return run("pgrad", steps)

    def benchmarl_run(spec, python_):
        assert python_ == python
        specs.append(spec)
        return run("benchmarl", spec["frames"])

    monkeypatch.setattr(mappo_benchmarl, "pgrad_run", pgrad_run)
    monkeypatch.setattr(mappo_benchmarl, "benchmarl_run", benchmarl_run)
    out = mappo_benchmarl.mappo_vs_benchmarl(0, steps=800, rounds=2, python=python, threads=0)
    assert order == ["pgrad", "benchmarl", "benchmarl", "pgrad"]
    assert specs[0]["algorithm"] == "mappo" and specs[0]["frames"] == 800
    assert out["value"] == 2.0 and out["met"] is True  # median of 3 and 1
    details = out["details"]
    assert details["round_ratios"] == [3.0, 1.0] and details["cpu_ratio"] == 2.0
    assert details["loop_ratio"] == 4.0  # loops: pgrad wall / 4, BenchMARL's wall / 2
    assert details["env_steps_per_s"] == {"pgrad_train": 500.0, "benchmarl": 233.3}
    assert "curve" not in details["runs"]["benchmarl"][0] and len(details["load_avg_1m"]) == 5


def test_the_last_tenth_is_weighted_by_episodes():
    points = [(400, -30.0, 10), (9200, -20.0, 1), (9600, -10.0, 3), (10000, 99.0, 0)]
    # frames > 9000: (-20 * 1 + -10 * 3) / 4; the point with no episode does not count
    assert mappo_benchmarl.last_fraction(points, 10_000) == pytest.approx(-12.5)
    assert math.isnan(mappo_benchmarl.last_fraction(points[:1], 10_000))


def test_the_driver_skips_finished_runs(tmp_path, monkeypatch):
    for side in ("pgrad", "benchmarl"):
        (tmp_path / f"benchmarl_{side}_mappo_s0_6000.json").write_text(json.dumps({}))

    def refuse(*args, **kwargs):
        raise AssertionError("a finished run was run again")

    monkeypatch.setattr(mappo_benchmarl, "_pgrad_learning", refuse)
    monkeypatch.setattr(mappo_benchmarl, "_benchmarl_learning", refuse)
    assert mappo_benchmarl.learning_runs(6000, [0], ["mappo"], ["pgrad", "benchmarl"],
                                         results=tmp_path) == []


def test_bench_registers_the_figure():
    from pgrad_app.cli import bench

    assert bench.OPT_IN["mappo_vs_benchmarl"] is mappo_benchmarl.mappo_vs_benchmarl
    assert "mappo_vs_benchmarl" not in bench.FIGURES  # opt-in: minutes, another interpreter
