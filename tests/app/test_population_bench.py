"""The population_vs_sweep bench figure (pgrad_app/perf/population.py), its runs faked."""

from __future__ import annotations

from pathlib import Path

from pgrad_app.cli import bench
from pgrad_app.perf import population


def test_the_three_commands_train_the_same_seeds_and_budget():
    cmds = population.commands(5000, Path("/tmp/x"))
    pop, sweep, one = cmds["population"], cmds["sweep"], cmds["one_seed"]
    assert pop[pop.index("--seeds") + 1] == "0..9" and "train" in pop
    assert sweep[sweep.index("--seeds") + 1: sweep.index("--steps")] == [str(s) for s in
                                                                         range(10)]
    assert one[one.index("--seed") + 1] == "0"
    for argv, flag in ((pop, "--total-steps"), (sweep, "--steps"), (one, "--total-steps")):
        assert argv[argv.index(flag) + 1] == "5000"


def test_the_figure_is_the_ratio_of_walls_with_both_goals(monkeypatch):
    walls = {"population": 30.0, "sweep": 100.0, "one": 10.0}

    def fake(argv):
        name = next(k for k in walls if any(str(a).endswith(k) for a in argv))
        return {"wall_s": walls[name], "cpu_s": 1.0, "peak_rss_mb": 100.0}

    monkeypatch.setattr(population, "_timed", fake)
    out = population.population_vs_sweep(steps=1000)
    assert out["value"] == 0.3 and out["details"]["population_over_one_seed"] == 3.0
    assert not out["met"]  # 3.0 x one seed is above 2.5
    assert out["details"]["ten_single_runs_rss_mb"] == 1000.0
    assert len(out["details"]["load_avg_before"]) == 3
    walls["population"] = 20.0
    assert population.population_vs_sweep(steps=1000)["met"]


def test_bench_offers_the_figure():
    args = bench.build_parser().parse_args(["--only", "population_vs_sweep", "--steps", "10"])
    assert args.only == ["population_vs_sweep"]
