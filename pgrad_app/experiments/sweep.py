"""Sweeps on Ray: agents x envs x seeds x a grid of ``--set`` values, each trial a run directory.

:func:`plan` builds on :func:`pgrad_app.experiments.plan.plan` (hyperparameters resolved and checked
before anything starts: defaults < tuned entry < ``--set`` < the trial's grid point); a trial is a
:class:`Trial` (a benchmark ``RunSpec`` plus its grid point). :func:`launch` runs the trials that
have no result yet as plain Ray tasks, each reserving ``cpus_per_trial`` CPUs, so Ray runs as many
at a time as the cluster's CPUs allow. A task runs, as a user would, ``pgrad-train``
(``python -m pgrad_app train``) into ``RESULTS/runs/NAME`` (an ordinary run directory; ``--resume``
if an earlier attempt left
checkpoints), evaluates it as ``pgrad-evaluate`` would (in the task's own process;
deterministic, episodes from seed ``10_000 + seed``, as the benchmark), then writes
``RESULTS/NAME.json`` in the benchmark's result schema (``pgrad_app/experiments/single_run.py``)
with the grid point in its agent label, so ``pgrad_app.experiments.report`` draws the same tables
and curves.
Finished trials (their JSON exists, made with the same settings) are skipped. On a cluster of
several machines ``RESULTS`` must be a folder every node sees (a shared file system).

Plain tasks rather than Ray Tune: a trial here is exactly a pgrad-train run and its result a file,
which makes resuming a matter of files and keeps the report the benchmark's own; Tune would add
its own trial folders and experiment state next to ours, and its value -- schedulers that stop
or mutate trials early (ASHA, PBT), search algorithms -- is not what a grid of seeds needs.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from pgrad_app.config import settings as config_lib
from pgrad_app.errors import EXIT_SIGTERM, Interrupted, UserError
from pgrad_app.experiments import launch as benchmark
from pgrad_app.experiments import plan as planning
from pgrad_app.experiments import single_run as bench_run
from pgrad_app.run.layout import RunLayout


@dataclasses.dataclass(frozen=True)
class Trial(planning.RunSpec):
    """One trial: a benchmark run plus the grid point it tries (``"key=value ..."``)."""

    point: str = ""

    @property
    def label(self) -> str:
        """The agent column of the report: ``a2c`` or ``a2c learning_rate=1e-3``."""
        return f"{self.agent} {self.point}".strip()

    @property
    def name(self) -> str:
        env = self.env.split(":")[-1].replace("/", "_")
        point = re.sub(r"[^A-Za-z0-9.+-]+", "-", self.point).strip("-")
        return "__".join(p for p in (self.agent, env, point, f"seed{self.seed}") if p)


def split_values(text: str) -> list[str]:
    """``"1e-3,3e-3"`` -> ``["1e-3", "3e-3"]``; commas inside ``[...]`` stay (``[64,64]``)."""
    out, depth, current = [], 0, ""
    for ch in text:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(current.strip())
            current = ""
        else:
            current += ch
    out.append(current.strip())
    return [v for v in out if v]


def grid_points(grid: Sequence[str]) -> list[list[str]]:
    """``["a=1,2", "b=x,y"]`` -> every combination as ``--set`` pairs, in order."""
    axes = []
    for item in grid:
        key, sep, values = item.partition("=")
        if not sep or not key.strip() or not split_values(values):
            raise UserError(f"--grid {item!r}: expected key=value1,value2 "
                            "(e.g. --grid learning_rate=1e-3,3e-3).")
        axes.append([f"{key.strip()}={v}" for v in split_values(values)])
    return [list(p) for p in itertools.product(*axes)] if axes else [[]]


def plan(agents: Sequence[str], envs: Sequence[str], seeds: Sequence[int],
         steps: int | None = None, sets: Sequence[str] = (), grid: Sequence[str] = (),
         no_tuned: bool = False, eval_episodes: int = 20) -> list[Trial]:
    """Every trial, hyperparameters resolved and validated (see the module docstring).

    Raises:
      UserError: as :func:`pgrad_app.experiments.plan.plan`, or a malformed ``--grid``.
    """
    trials = []
    for point in grid_points(grid):
        for spec in planning.plan(agents, envs, seeds, steps, [*sets, *point], no_tuned,
                                   eval_episodes):
            trials.append(Trial(**dataclasses.asdict(spec), point=" ".join(point)))
    names = [t.name for t in trials]
    if len(set(names)) != len(names):
        raise UserError("two trials would share a name; give each --grid value once.")
    return trials


def _resumes(out: Path) -> bool:
    """Whether :func:`run_trial` resumes the run in ``out`` (an earlier attempt checkpointed)."""
    checkpoints = RunLayout(out).checkpoints
    return checkpoints.is_dir() and any(checkpoints.iterdir())


def check_started(trials: Sequence[Trial], results: Path) -> None:
    """Refuses trials whose run directory an earlier sweep started with other settings (other
    ``--set`` values, another budget): resuming it would train on under the old settings and
    label the result with the new ones. Checked before anything starts (files only).

    Raises:
      UserError: naming the first such run directory and what differs.
    """
    from pgrad_app.config import yamlfile

    for trial in trials:
        out = Path(results) / "runs" / trial.name
        if not _resumes(out):
            continue  # run_trial starts it afresh (--overwrite)
        config = RunLayout(out).config
        try:
            values = yamlfile.load_yaml(config)
            stored = dict(values.get(config_lib.HYPER_KEY) or {})
        except (UserError, OSError, AttributeError, TypeError, ValueError):
            raise UserError(f"{config}: unreadable, so the trial {trial.name} cannot be resumed "
                            "safely; delete its run directory to rerun it.") from None
        plain = json.loads(json.dumps(stored, default=str))  # YAML's lists, the plan's tuples
        ours = json.loads(json.dumps(trial.hyperparameters, default=str))
        keys = [k for k in ours if plain.get(k) != ours[k]]
        diff = (f"hyperparameter {keys[0]} {plain.get(keys[0])!r} there, {ours[keys[0]]!r} now"
                if keys else None)
        if values.get("total_steps") != trial.budget:
            diff = f"budget {values.get('total_steps')!r} there, {trial.budget!r} now"
        if diff:
            raise UserError(f"{out} was started with other settings ({diff}); resuming it "
                            "would mix them. Use another --results folder, or delete it to "
                            "rerun.")


def _run(cmd: list[str], log, threads: int) -> int:
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    return subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                          env=benchmark.child_env(threads)).returncode


def _read_csv(path: Path) -> list[dict]:
    import csv

    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _evaluate(trial: Trial, out: Path, log) -> int:
    """``pgrad-evaluate OUT`` done in this (Ray worker) process: it is light, and a worker
    imports TensorFlow once for all its trials. Writes ``OUT/eval.json``; returns an exit code."""
    from pgrad_app.quiet import silence

    silence()  # the Ray worker's process: before TensorFlow
    from pgrad.rl.evaluation import eval_seed
    from pgrad_app.errors import PgradError, one_line
    from pgrad_app.run.evaluate import evaluate_run

    seed = eval_seed(trial.seed)
    log.write(f"$ pgrad-evaluate {out} --episodes {trial.eval_episodes} "
              f"--seed {seed}  (in the Ray worker)\n")
    try:
        ev = evaluate_run(out, episodes=trial.eval_episodes, seed=seed, trust_run_code=True)
    except PgradError as err:
        log.write(f"error: {one_line(err)}\n")
        return err.exit_code
    log.write(f"return {ev['return_mean']:.2f} +- {ev['return_std']:.2f}\n")
    return 0


def run_trial(trial: Trial, results: Path, threads: int, context: dict) -> benchmark.Finished:
    """Trains and evaluates one trial in child processes; writes its result JSON."""
    results = Path(results)
    logs, out = results / "logs", results / "runs" / trial.name
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{trial.name}.spec.json").write_text(json.dumps(
        {**dataclasses.asdict(trial), **context, "threads": threads, "run": str(out)}, indent=1))
    config = logs / f"{trial.name}.config.yaml"
    config.write_text(yaml.safe_dump({
        "agent": trial.agent, "env": trial.env, "seed": trial.seed, "total_steps": trial.budget,
        config_lib.HYPER_KEY: trial.hyperparameters}, sort_keys=False))
    log_path = logs / f"{trial.name}.log"
    py = sys.executable
    with open(log_path, "w") as log:
        if _resumes(out):  # check_started made sure it has this trial's settings
            train = [py, "-m", "pgrad_app", "train", "--resume", str(out), "--quiet"]
        else:  # --no-tuned: the config already holds every resolved value
            train = [py, "-m", "pgrad_app", "train", "--config", str(config), "--no-tuned",
                     "--out", str(out), "--quiet", *(["--overwrite"] if out.exists() else [])]
        code = _run(train, log, threads)
        if code == 0:
            code = _evaluate(trial, out, log)
    if code != 0:
        return benchmark.Finished(trial, code, None, log_path)
    result = trial_result(trial, out, threads, context)
    bench_run.write_atomic(planning.result_path(results, trial), result)
    return benchmark.Finished(trial, 0, result, log_path)


def trial_result(trial: Trial, out: Path, threads: int, context: dict) -> dict[str, Any]:
    """The benchmark result (``bench_run`` schema) of a finished, evaluated run directory."""
    import datetime

    episodes = [(int(r["step"]), float(r["return"]), float(r["wall_s"]))
                for r in _read_csv(RunLayout(out).episodes)]
    updates = _read_csv(RunLayout(out).updates)
    ev = json.loads(RunLayout(out).evaluation.read_text())
    steps = int(updates[-1]["step"]) if updates else 0
    wall = episodes[-1][2] if episodes else 0.0  # the trainer's clock: training only
    curve, block = bench_run.downsample([(s, r) for s, r, _ in episodes])
    return {
        "schema": bench_run.SCHEMA, "agent": trial.label, "env": trial.env, "seed": trial.seed,
        "budget": trial.budget, "steps": steps, "hyperparameters": trial.hyperparameters,
        "tuned_from": trial.tuned_from, "overrides": trial.overrides, "point": trial.point,
        "run_dir": str(out),
        "eval": {"episodes": len(ev["returns"]), "seed": ev["seed"],
                 "return_mean": float(ev["return_mean"]), "return_std": float(ev["return_std"]),
                 "returns": [float(r) for r in ev["returns"]]},
        "eval_episodes": trial.eval_episodes, "episodes": len(episodes),
        "curve": curve, "curve_block": block, "wall_s": round(wall, 3),
        "steps_per_s": round(steps / wall, 1) if wall > 0 else None,
        "machine": bench_run.machine(threads, int(context.get("jobs", 1))),
        "pgrad_commit": context.get("pgrad_commit"), "command": context.get("command", ""),
        "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def launch(trials: Sequence[Trial], results: Path, cpus_per_trial: int = 1, command: str = "",
           echo: Callable[[str], None] = print) -> list[benchmark.Finished]:
    """Runs ``trials`` as Ray tasks of ``cpus_per_trial`` CPUs each (needs a Ray connection,
    e.g. :func:`pgrad_app.distributed.session.ray_session`); ``echo`` gets a line per finished
    one."""
    import ray

    from pgrad_app.distributed.session import worker_runtime_env

    results = Path(results).resolve()
    results.mkdir(parents=True, exist_ok=True)
    cpus = ray.cluster_resources().get("CPU", 1)
    if cpus_per_trial > cpus:
        raise UserError(f"--cpus-per-trial {cpus_per_trial}: the Ray cluster has {cpus:g} CPUs.")
    context = {"command": command, "pgrad_commit": benchmark.git_commit(),
               "jobs": max(1, int(cpus // cpus_per_trial))}
    task = ray.remote(run_trial).options(num_cpus=cpus_per_trial, max_retries=0,
                                         runtime_env=worker_runtime_env())
    pending = {task.remote(t, results, cpus_per_trial, context): t for t in trials}
    finished = []
    # SIGTERM ends the sweep as Ctrl-C does (tasks cancelled, Ray shut down, one line, 143);
    # left to Ray's own handler it aborts the driver with a C++ stack dump (exit 134).
    # The handler only notes the signal: raised inside ray.wait's C code it would surface as a
    # SystemError; the loop raises it between waits of at most a second.
    signals: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: signals.append(signum))
    try:
        while pending:
            if signals:
                raise Interrupted("SIGTERM: the sweep stopped; its unfinished trials were "
                                  "cancelled (their run directories resume when the sweep "
                                  "runs again).", EXIT_SIGTERM)
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            if not ready:
                continue
            trial = pending.pop(ready[0])
            try:
                done = ray.get(ready[0])
            except ray.exceptions.RayError as err:  # the task itself died
                log = results / "logs" / f"{trial.name}.log"
                done = benchmark.Finished(trial, 1, None, log)
                echo(f"task of {trial.name} failed: {type(err).__name__}")
            finished.append(done)
            echo(f"[{len(finished)}/{len(trials)}] {describe(done)}")
    except BaseException:  # Ctrl-C, SIGTERM: cancel what has not finished (their logs stay)
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    return finished


def describe(done: benchmark.Finished) -> str:
    """One progress line (the benchmark's, with the grid point)."""
    text = benchmark.describe(done)
    point = getattr(done.spec, "point", "")
    return text.replace(f"seed {done.spec.seed}", f"{point} seed {done.spec.seed}".strip(), 1) \
        if point else text

