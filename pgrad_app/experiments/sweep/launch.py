"""Running a sweep on Ray: each trial a plain Ray task, each a run directory and a result JSON.

:func:`launch` runs the trials of :func:`pgrad_app.experiments.sweep.plan.plan` that have no
result yet as plain Ray tasks, each reserving ``cpus_per_trial`` CPUs, so Ray runs as many at a
time as the cluster's CPUs allow. A task runs, as a user would, ``pgrad-train``
(``python -m pgrad_app train``) into ``RESULTS/runs/NAME`` (an ordinary run directory;
``--resume`` if an earlier attempt left checkpoints), evaluates it as ``pgrad-evaluate`` would
(in the task's own process; deterministic, episodes from seed ``10_000 + seed``, as the
benchmark), then writes ``RESULTS/NAME.json`` in the benchmark's result schema
(``pgrad_app/experiments/benchmark/single_run.py``) with the grid point in its agent label, so
:mod:`pgrad_app.experiments.benchmark.report` draws the same tables and curves. Finished trials
(their JSON exists, made with the same settings) are skipped. On a cluster of several machines
``RESULTS`` must be a folder every node sees (a shared file system).

Plain tasks rather than Ray Tune: a trial here is exactly a pgrad-train run and its result a file,
which makes resuming a matter of files and keeps the report the benchmark's own; Tune would add
its own trial folders and experiment state next to ours, and its value -- schedulers that stop
or mutate trials early (ASHA, PBT), search algorithms -- is not what a grid of seeds needs.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from pgrad_app.config import settings as config_lib
from pgrad_app.errors import EXIT_SIGTERM, Interrupted, UserError
from pgrad_app.experiments.benchmark import launch as benchmark
from pgrad_app.experiments.benchmark import single_run
from pgrad_app.experiments.benchmark.plan import result_path
from pgrad_app.experiments.sweep.plan import Trial, resumes
from pgrad_app.run.layout import RunLayout


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
    from pgrad.rl.evaluation.evaluate_policy import eval_seed
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
        if resumes(out):  # plan.check_started made sure it has this trial's settings
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
    single_run.write_atomic(result_path(results, trial), result)
    return benchmark.Finished(trial, 0, result, log_path)


def trial_result(trial: Trial, out: Path, threads: int, context: dict) -> dict[str, Any]:
    """The benchmark result (:mod:`~pgrad_app.experiments.benchmark.single_run`'s schema) of a
    finished, evaluated run directory."""
    import datetime

    episodes = [(int(r["step"]), float(r["return"]), float(r["wall_s"]))
                for r in _read_csv(RunLayout(out).episodes)]
    updates = _read_csv(RunLayout(out).updates)
    ev = json.loads(RunLayout(out).evaluation.read_text())
    steps = int(updates[-1]["step"]) if updates else 0
    wall = episodes[-1][2] if episodes else 0.0  # the trainer's clock: training only
    curve, block = single_run.downsample([(s, r) for s, r, _ in episodes])
    return {
        "schema": single_run.SCHEMA, "agent": trial.label, "env": trial.env, "seed": trial.seed,
        "budget": trial.budget, "steps": steps, "hyperparameters": trial.hyperparameters,
        "tuned_from": trial.tuned_from, "overrides": trial.overrides, "point": trial.point,
        "run_dir": str(out),
        "eval": {"episodes": len(ev["returns"]), "seed": ev["seed"],
                 "return_mean": float(ev["return_mean"]), "return_std": float(ev["return_std"]),
                 "returns": [float(r) for r in ev["returns"]]},
        "eval_episodes": trial.eval_episodes, "episodes": len(episodes),
        "curve": curve, "curve_block": block, "wall_s": round(wall, 3),
        "steps_per_s": round(steps / wall, 1) if wall > 0 else None,
        "machine": single_run.machine(threads, int(context.get("jobs", 1))),
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
