"""scripts/benchmark.py end to end (tiny real runs in subprocesses), and its planning, curves and
report on synthetic results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pgrad_app.config import tuned as hyperparams
from pgrad_app.errors import UserError
from pgrad_app.experiments.benchmark import launch, stats
from pgrad_app.experiments.benchmark import plan as benchmark
from pgrad_app.experiments.benchmark import report as benchmark_report
from pgrad_app.experiments.benchmark.single_run import downsample

ROOT = Path(__file__).resolve().parents[2]
STEPS = 2000

CRASH_ENV = '''
import gymnasium as gym
import numpy as np


class Crash(gym.Env):
    """Fails on its 30th step: a run that crashes after it started."""
    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = getattr(self, "t", 0)
        return np.zeros(4, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t >= 30:
            raise RuntimeError("bench crash in step 30")
        return np.zeros(4, np.float32), 1.0, False, self.t % 10 == 0, {}


gym.register("BenchCrash-v0", entry_point=Crash)
'''


def run_benchmark(*args, cwd: Path, timeout: int = 400) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "benchmark.py"),
                           *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def table_row(readme: str, env: str, agent: str) -> list[str]:
    section = readme.split(f"## {env}\n", 1)[1].split("\n## ", 1)[0]
    line = next(ln for ln in section.splitlines() if ln.startswith(f"| {agent} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


@pytest.mark.subprocess
def test_benchmark_runs_resumes_reports_and_survives_a_crash(tmp_path):
    (tmp_path / "benchcrash.py").write_text(CRASH_ENV)
    results = tmp_path / "results"
    proc = run_benchmark("--agents", "a2c", "--envs", "CartPole-v1", "benchcrash:BenchCrash-v0",
                         "--seeds", 0, 1, "--steps", STEPS, "--jobs", 2, "--results", results,
                         cwd=tmp_path)
    # The crashing runs are reported with the end of their log; the others finish.
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "4 runs, 0 already in" in proc.stdout
    assert proc.stdout.count("FAILED a2c benchcrash:BenchCrash-v0 seed") == 2
    assert "RuntimeError: bench crash in step 30" in proc.stdout
    assert "2 run(s) failed: a2c__BenchCrash-v0__seed0, a2c__BenchCrash-v0__seed1" in proc.stderr
    assert "2 finished, 2 failed" in proc.stdout
    names = sorted(p.name for p in results.glob("*.json"))
    assert names == ["a2c__CartPole-v1__seed0.json", "a2c__CartPole-v1__seed1.json"]

    runs = [json.loads((results / n).read_text()) for n in names]
    tuned, path = hyperparams.tuned("a2c", "CartPole-v1")
    for seed, r in enumerate(runs):
        assert (r["agent"], r["env"], r["seed"], r["budget"]) == ("a2c", "CartPole-v1", seed, STEPS)
        assert r["steps"] >= STEPS and path.name == "a2c.yaml"
        # the same on every machine:
        assert r["tuned_from"] == "pgrad_app/config/hyperparams/a2c.yaml"
        assert r["hyperparameters"]["num_envs"] == tuned["num_envs"] == 16
        assert r["eval"]["episodes"] == 20 and len(r["eval"]["returns"]) == 20
        assert r["eval"]["seed"] == 10_000 + seed
        assert r["eval"]["return_mean"] == pytest.approx(np.mean(r["eval"]["returns"]))
        assert 0 < len(r["curve"]) == r["episodes"] <= 2000 and r["curve_block"] == 1
        steps = [s for s, _ in r["curve"]]
        assert steps == sorted(steps) and steps[-1] <= r["steps"]
        assert all(ret == int(ret) >= 8 for _, ret in r["curve"])  # CartPole: +1 a step
        assert r["steps_per_s"] == pytest.approx(r["steps"] / r["wall_s"], rel=1e-2)
        assert r["machine"]["threads"] >= 1 and r["machine"]["tensorflow"]
        assert "benchmark.py --agents a2c" in r["command"] and r["pgrad_commit"]

    # The report: the table holds the numbers of the JSONs; a curve per env.
    readme = (results / "README.md").read_text()
    scores = [r["eval"]["return_mean"] for r in runs]
    mean, std = stats.mean_std(scores)
    iqm, (low, high) = stats.iqm_interval(scores)  # rliable's where it is installed
    row = table_row(readme, "CartPole-v1", "a2c")
    assert row[1] == "2 (0, 1)" and row[2] == f"{max(r['steps'] for r in runs):,}"
    assert row[3] == f"{mean:.1f} ± {std:.1f}"
    assert row[4] == f"{iqm:.1f} [{low:.1f}, {high:.1f}]" and iqm == stats.iqm(scores)
    assert row[5] == " / ".join(f"{s:.1f}" for s in scores)
    assert row[6] == f"{np.mean([r['wall_s'] for r in runs]):.1f}"
    assert row[7] == f"{np.mean([r['steps_per_s'] for r in runs]):.0f}"
    assert (results / "curves_CartPole-v1.png").stat().st_size > 5000
    assert "a2c__BenchCrash-v0__seed0" in readme  # launched without a result

    # Again: the finished runs are skipped, nothing is rerun or rewritten.
    before = {n: (results / n).read_bytes() for n in names}
    proc = run_benchmark("--agents", "a2c", "--envs", "CartPole-v1", "--seeds", 0, 1,
                         "--steps", STEPS, "--results", results, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "2 runs, 2 already in" in proc.stdout and "0 to run" in proc.stdout
    assert {n: (results / n).read_bytes() for n in names} == before
    (results / "README.md").unlink()
    proc = run_benchmark("--results", results, "--report-only", cwd=tmp_path)
    assert proc.returncode == 0 and (results / "README.md").read_text() == readme


# ---------------------------------------------------------------------------------------------
# Planning (in this process, nothing runs).
# ---------------------------------------------------------------------------------------------


def test_plan_resolves_defaults_tuned_and_set():
    specs = benchmark.plan(["ppo", "a2c"], ["Pendulum-v1"], [0, 1], sets=["ent_coef=0.001"])
    assert [(s.agent, s.seed) for s in specs] == [("ppo", 0), ("ppo", 1), ("a2c", 0), ("a2c", 1)]
    ppo, a2c = specs[0], specs[2]
    assert ppo.budget == 200_000 and a2c.budget == 1_000_000  # the entries' n_timesteps
    assert ppo.hyperparameters["gamma"] == 0.9 and ppo.hyperparameters["ent_coef"] == 0.001
    assert ppo.hyperparameters["clip_range"] == 0.2 and ppo.name == "ppo__Pendulum-v1__seed0"
    assert a2c.hyperparameters["log_std_init"] == -2.0 and a2c.overrides == {"ent_coef": 0.001}
    assert ppo.tuned_from == "pgrad_app/config/hyperparams/ppo.yaml"
    # Overrides are recorded as the config holds them: YAML reads 7e-4 as a string.
    lr = benchmark.plan(["a2c"], ["CartPole-v1"], [0], sets=["learning_rate=7e-4"])[0]
    assert lr.overrides == {"learning_rate": 7e-4} and lr.hyperparameters["learning_rate"] == 7e-4
    plain = benchmark.plan(["ppo"], ["Pendulum-v1"], [0], steps=5000, no_tuned=True)[0]
    assert plain.budget == 5000 and plain.tuned_from is None and plain.hyperparameters["gamma"] \
        == 0.99


@pytest.mark.parametrize("kwargs, fragment", [
    ({"sets": ["gama=0.9"]}, "--set gama (agent a2c): unknown key 'gama'. Did you mean 'gamma'?"),
    ({"sets": ["clip_range=0.1"]}, "--set clip_range (agent a2c): unknown key"),
    ({"sets": ["gamma=2"]}, "--set gamma (agent a2c)"),
    ({"sets": ["seed=3"]}, "--set seed: not a hyperparameter"),
    ({"envs": ["MountainCar-v0"]}, "no budget for a2c on MountainCar-v0"),
    ({"envs": ["CartPol-v1"]}, "unknown env 'CartPol-v1'"),
    ({"agents": ["sac"]}, "--agents: unknown agent 'sac'"),
])
def test_plan_refuses_bad_input_before_running(kwargs, fragment):
    args = {"agents": ["a2c"], "envs": ["CartPole-v1"], **kwargs}
    with pytest.raises(UserError) as err:
        benchmark.plan(args.pop("agents"), args.pop("envs"), [0], **args)
    assert fragment in str(err.value)


def test_existing_results_are_skipped_or_refused(tmp_path):
    spec = benchmark.plan(["a2c"], ["CartPole-v1"], [0], steps=1000)[0]
    assert benchmark.check_existing([spec], tmp_path) == [spec]
    stored = {**fake_run("a2c", 0, 1.0), "env": "CartPole-v1",
              "hyperparameters": dict(spec.hyperparameters)}
    benchmark.result_path(tmp_path, spec).write_text(json.dumps(stored))
    assert benchmark.check_existing([spec], tmp_path) == []
    stored["hyperparameters"]["gamma"] = 0.9
    benchmark.result_path(tmp_path, spec).write_text(json.dumps(stored))
    with pytest.raises(UserError, match="hyperparameter gamma 0.9 there, 0.99 now"):
        benchmark.check_existing([spec], tmp_path)
    longer = benchmark.plan(["a2c"], ["CartPole-v1"], [0], steps=2000)[0]
    with pytest.raises(UserError, match="other settings \\(budget 1000 there, 2000 now\\)"):
        benchmark.check_existing([longer], tmp_path)


def test_threads_per_run_share_the_cores():
    cores = launch.threads_per_run(1)
    assert cores >= 1 and launch.threads_per_run(cores) == 1
    assert launch.threads_per_run(10 * cores) == 1
    env = launch.child_env(1)
    assert env["OMP_NUM_THREADS"] == env["TF_NUM_INTRAOP_THREADS"] == "1"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)


# ---------------------------------------------------------------------------------------------
# Curves and the report on synthetic results.
# ---------------------------------------------------------------------------------------------


def test_downsample_averages_blocks_of_episodes():
    episodes = [(10 * (i + 1), float(i)) for i in range(4500)]
    points, block = downsample(episodes)
    assert block == 3 and len(points) == 1500
    assert points[0] == [30, 1.0] and points[-1] == [45000, 4498.0]  # mean of 4497..4499
    points, block = downsample(episodes[:7], max_points=3)
    assert block == 3 and points == [[30, 1.0], [60, 4.0], [70, 6.0]]  # last block shorter
    assert downsample(episodes[:5]) == ([[10 * (i + 1), float(i)] for i in range(5)], 1)


def test_smoothed_is_the_rolling_mean_of_the_last_20_episodes():
    run = {"curve": [[i + 1, float(i)] for i in range(30)], "curve_block": 1}
    steps, values = benchmark_report.smoothed(run)
    assert steps[0] == 1 and values[0] == 0.0 and values[3] == pytest.approx(1.5)
    assert values[19] == pytest.approx(9.5) and values[29] == pytest.approx(np.mean(range(10, 30)))
    run = {"curve": [[i + 1, float(i)] for i in range(30)], "curve_block": 10}  # 2 points
    assert benchmark_report.smoothed(run)[1][5] == pytest.approx(4.5)


def fake_run(agent, seed, score, env="Toy-v0", steps=1000):
    first = 100 + seed * 10
    curve = [[s, float(seed + s / 100)] for s in [*range(first, steps, 100), steps]]
    return {"schema": 1, "agent": agent, "env": env, "seed": seed, "budget": steps,
            "steps": steps, "eval": {"return_mean": score}, "eval_episodes": 20,
            "curve": curve, "curve_block": 1, "wall_s": 10.0 + seed, "steps_per_s": 100.0 - seed,
            "machine": {"cpu": "cpu", "cores": 2, "threads": 1, "jobs": 2, "tensorflow": "x"},
            "pgrad_commit": "abc", "command": "python scripts/benchmark.py"}


def test_curve_band_uses_the_common_step_range():
    runs = [fake_run("a2c", s, 0.0) for s in (0, 1, 2)]
    grid, mean, lower, upper = benchmark_report.curve_band(runs, points=5)
    assert grid[0] == 120 and grid[-1] == 1000  # the latest first step, the earliest last one
    assert np.all(lower <= mean) and np.all(mean <= upper)
    assert benchmark_report.curve_band([{"curve": []}]) is None


def test_report_table_and_files(tmp_path):
    scores = {"a2c": [10.0, 30.0, 20.0, 100.0], "ppo": [200.0, 220.0, 210.0]}
    for agent, values in scores.items():
        for seed, score in enumerate(values):
            run = fake_run(agent, seed, score)
            (tmp_path / f"{agent}__Toy-v0__seed{seed}.json").write_text(json.dumps(run))
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "ppo__Toy-v0__seed3.spec.json").write_text("{}")
    readme = benchmark_report.write_report(tmp_path).read_text()
    a2c = table_row(readme, "Toy-v0", "a2c")
    # IQM of 4 scores: drop 1 at each end -> (20 + 30) / 2; std over seeds with ddof 0.
    assert a2c[1] == "4 (0, 1, 2, 3)" and a2c[3] == f"40.0 ± {np.std([10, 30, 20, 100]):.1f}"
    assert a2c[4].startswith("25.0 [") and a2c[5] == "10.0 / 30.0 / 20.0 / 100.0"
    assert a2c[6] == "11.5" and a2c[7] == "98"  # mean wall 10..13 s, mean steps/s 100..97
    ppo = table_row(readme, "Toy-v0", "ppo")
    assert ppo[3] == "210.0 ± 8.2" and ppo[4].startswith("210.0 [")  # 3 seeds: IQM = mean
    assert "ppo__Toy-v0__seed3" in readme and (tmp_path / "curves_Toy-v0.png").is_file()


def test_report_names_a_broken_result(tmp_path):
    (tmp_path / "a2c__X__seed0.json").write_text("{not json")
    with pytest.raises(ValueError, match="a2c__X__seed0.json: not a valid result"):
        benchmark_report.load_results(tmp_path)


@pytest.mark.subprocess
def test_bench_run_module_needs_a_spec():
    proc = subprocess.run([sys.executable, "-m", "pgrad_app.experiments.benchmark.single_run"],
                          capture_output=True, text=True, env=launch.child_env(1), timeout=120)
    assert proc.returncode == 2 and "usage" in proc.stderr



# ---------------------------------------------------------------------------------------------
# A long run stopped part-way continues from its checkpoint.
# ---------------------------------------------------------------------------------------------

def _single_run(spec_file: Path) -> subprocess.Popen:
    env = launch.child_env(1)
    return subprocess.Popen([sys.executable, "-m", "pgrad_app.experiments.benchmark.single_run",
                             str(spec_file)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


@pytest.mark.subprocess
def test_a_stopped_run_continues_from_its_checkpoint_past_a_damaged_one(tmp_path):
    import signal
    import time

    budget = 40_000
    (spec,) = benchmark.plan(["a2c"], ["CartPole-v1"], [3], steps=budget, eval_episodes=3)
    results = tmp_path / "results"
    out = launch.result_path(results, spec)
    ckpt = results / "checkpoints" / spec.name
    spec_file = tmp_path / "spec.json"
    payload = {**launch.dataclasses.asdict(spec), "threads": 1, "out": str(out), "jobs": 1,
               "checkpoint_every_s": 0.5}
    spec_file.write_text(json.dumps(payload))

    # 1. SIGTERM once two periodic checkpoints exist: one more is written at the stop.
    proc = _single_run(spec_file)
    deadline = time.monotonic() + 180
    while len(list(ckpt.glob("step-*"))) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "stopped by SIGTERM at env step" in err and "run the command again" in err
    assert not out.exists()
    kept = sorted(ckpt.glob("step-*"))
    assert len(kept) == 2  # the newest two
    older, newest = (int(p.name.split("-")[1]) for p in kept)
    assert 0 < older < newest < budget

    # 2. The newest is damaged: the run continues from the one before, with a warning.
    data = next(kept[1].glob("ckpt.data-*"))
    data.write_bytes(data.read_bytes()[:-64] + b"\0" * 64)
    proc = _single_run(spec_file)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "is unusable (checksum mismatch" in err
    assert f"resumed from {kept[0]} at env step {older:,}" in err
    result = json.loads(out.read_text())
    assert result["resumed_from"] == [older]
    assert result["steps"] >= budget and result["budget"] == budget
    steps = [s for s, _ in result["curve"]]
    assert steps == sorted(steps) and steps[0] < older < steps[-1]  # before and after the stop
    assert result["episodes"] == len(result["curve"]) and result["eval"]["episodes"] == 3
    assert not ckpt.exists()  # the result holds what they did


def test_a_checkpoint_of_other_settings_is_refused_and_kept(tmp_path):
    import agents
    from agents.learning import progress_meta
    from agents.persistence.save_load import save_checkpoint
    from pgrad_app.experiments.benchmark import single_run

    (spec,) = benchmark.plan(["a2c"], ["CartPole-v1"], [3], steps=4000, eval_episodes=3)
    spec = {**launch.dataclasses.asdict(spec),
            "out": str(launch.result_path(tmp_path, spec))}
    ckpt = single_run.checkpoint_dir(spec)
    agent = agents.make("a2c", "CartPole-v1", seed=3, num_envs=2)
    try:
        assert single_run.resume(agent, spec, ckpt) == ([], [])  # nothing to continue
        agent.learn(20, progress=False)
        theirs = {**{k: spec[k] for k in single_run.SAME_RUN}, "budget": 8000}
        save_checkpoint(agent, ckpt, {**progress_meta(agent),
                                      single_run.META_KEY: {"run": theirs, "episodes": []}})
        with pytest.raises(SystemExit, match="checkpoint of this run with other budget; "
                                             "delete .* to start the run again"):
            single_run.resume(agent, spec, ckpt)
        assert list(ckpt.glob("step-*"))  # nothing deleted
        theirs["budget"] = spec["budget"]
        theirs["hyperparameters"] = {**spec["hyperparameters"], "gamma": 0.5}
        save_checkpoint(agent, ckpt, {**progress_meta(agent),
                                      single_run.META_KEY: {"run": theirs, "episodes": []}})
        with pytest.raises(SystemExit, match="other hyperparameter gamma; delete"):
            single_run.resume(agent, spec, ckpt)
        # A field a newer pgrad added (or dropped) does not make it another run; a checkpoint
        # written under the record's earlier key ("bench") is continued as well.
        theirs["hyperparameters"] = {**spec["hyperparameters"], "field_of_the_future": 1}
        del theirs["hyperparameters"]["gamma"]
        assert single_run.OLD_META_KEY == "bench"
        save_checkpoint(agent, ckpt, {**progress_meta(agent),
                                      "bench": {"run": theirs, "episodes": [[10, 9.0]]}})
        assert single_run.resume(agent, spec, ckpt) == ([(10, 9.0)], [int(agent.env_steps)])
    finally:
        agent.close()
