"""Multi-seed benchmark: agents x envs x seeds, one subprocess per run, one JSON per finished run.

:func:`plan` resolves every run's hyperparameters in this process (defaults < the tuned entry of
``pgrad_app/config/hyperparams/AGENT.yaml`` < ``--set``) and checks them before anything starts;
:func:`launch` runs the runs that have no result yet, ``jobs`` at a time, each in its own
process (``python -m pgrad_app.experiments.benchmark.single_run SPEC``) with its BLAS/TensorFlow
thread pools sized to ``cores // jobs``, so concurrent runs don't oversubscribe the cores. A run
writes its result
atomically, so the results folder is resumable: a run whose JSON exists is skipped, one that
crashed leaves only its log (``logs/NAME.log``), and one that was stopped (a session's end, Ctrl-C,
``kill -9``) continues from its last checkpoint (``checkpoints/NAME/``, every few minutes of
training: :mod:`pgrad_app.experiments.benchmark.single_run`) when launched again.
:mod:`pgrad_app.experiments.benchmark.report` turns the folder into tables and plots.
:func:`run_and_report` is the whole command (``pgrad-benchmark``, and ``pgrad-sweep`` with its
own plan and launch).
Layout of a results folder::

    RESULTS/AGENT__ENV__seedS.json     one finished run (schema: benchmark/single_run.py)
    RESULTS/logs/AGENT__ENV__seedS.spec.json, .log   what was launched, and its output
    RESULTS/checkpoints/AGENT__ENV__seedS/  a run not finished yet (gone once its JSON is)
    RESULTS/README.md, curves_ENV.png  the report
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from pgrad_app.errors import UserError, command
from pgrad_app.experiments.benchmark import report
from pgrad_app.experiments.benchmark.plan import ROOT, RunSpec, check_existing, result_path

LOG_TAIL_LINES = 15


def threads_per_run(jobs: int) -> int:
    """Cores available to this process divided among ``jobs`` concurrent runs (>= 1)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores // max(1, jobs))


def git_commit() -> str | None:
    """``git rev-parse HEAD`` of the checkout holding this package (``+dirty`` if modified)."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty else "")


def child_env(threads: int) -> dict[str, str]:
    """The environment of a run: thread pools capped, this checkout's packages first."""
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
        env[var] = str(threads)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclasses.dataclass
class Finished:
    """How one launched run ended."""

    spec: RunSpec
    returncode: int
    result: dict | None  # the result JSON, if the run wrote it
    log: Path

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.rstrip().splitlines()[-lines:])


def run_one(spec: RunSpec, results: Path, threads: int, context: dict) -> Finished:
    """Runs ``spec`` in a child process; its stdout and stderr go to ``logs/NAME.log``."""
    logs = Path(results) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    spec_file = logs / f"{spec.name}.spec.json"
    payload = {**dataclasses.asdict(spec), **context, "threads": threads,
               "out": str(result_path(results, spec))}
    spec_file.write_text(json.dumps(payload, indent=1))
    log = logs / f"{spec.name}.log"
    with open(log, "a") as f:  # a run continued from its checkpoint keeps its earlier log
        proc = subprocess.run([sys.executable, "-m", "pgrad_app.experiments.benchmark.single_run",
                               str(spec_file)],
                              stdout=f, stderr=subprocess.STDOUT, env=child_env(threads),
                              stdin=subprocess.DEVNULL)
    out = result_path(results, spec)
    result = json.loads(out.read_text()) if proc.returncode == 0 and out.is_file() else None
    return Finished(spec, proc.returncode if result is not None else (proc.returncode or 1),
                    result, log)


def describe(done: Finished) -> str:
    """One progress line for a finished run."""
    s = done.spec
    head = f"{s.agent} {s.env} seed {s.seed}"
    if done.result is None:
        return f"FAILED {head} (exit {done.returncode}; log {done.log}):\n{done.tail()}"
    r, ev = done.result, done.result["eval"]
    return (f"{head}: eval {ev['return_mean']:.1f} ± {ev['return_std']:.1f} after "
            f"{r['steps']:,} steps, {r['wall_s']:.0f} s ({r['steps_per_s']:.0f} steps/s)")


def launch(specs: Sequence[RunSpec], results: Path, jobs: int = 2, command: str = "",
           echo: Callable[[str], None] = print) -> list[Finished]:
    """Runs ``specs`` (those without a result), ``jobs`` at a time; returns how each ended.

    ``echo`` gets one line per finished run (with the log's tail for a failed one).
    """
    results = Path(results)
    results.mkdir(parents=True, exist_ok=True)
    threads = threads_per_run(jobs)
    context = {"command": command, "pgrad_commit": git_commit(), "jobs": jobs}
    finished = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(run_one, spec, results, threads, context) for spec in specs]
        try:
            for i, future in enumerate(as_completed(futures), 1):
                done = future.result()
                finished.append(done)
                echo(f"[{i}/{len(specs)}] {describe(done)}")
        except BaseException:  # Ctrl-C: the children got SIGINT too; start no new ones
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return finished


def command_line(argv: Sequence[str], program: str = "benchmark") -> str:
    """The command as the user typed it, to type again (recorded in every result):
    ``python scripts/benchmark.py ...`` or ``pgrad-benchmark ...``."""
    return shlex.join([*command(program).split(), *argv])


def elapsed(start: float) -> str:
    seconds = int(time.perf_counter() - start)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def run_and_report(args: Any, plan: Callable[[], Sequence[RunSpec]],
                   launch: Callable[[list[RunSpec]], list[Finished] | None], noun: str,
                   how: str) -> int:
    """The flow of ``pgrad-benchmark`` and ``pgrad-sweep``: plan every run, skip the finished
    ones, launch the rest, print a summary, write the report (``--report-only``: the report only).

    Args:
      args: the parsed command line: ``agents``, ``envs``, ``results``, ``report_only``.
      plan: checks the command's own options and returns every run (called only when running).
      launch: runs the runs still to do and returns how each ended; None when it launched
        nothing (then no summary line).
      noun: what a run is called (``"run"``, ``"trial"``), in the lines printed and the report.
      how: how they run, the end of the first line (``"2 at a time"``).

    Returns:
      The exit code: 1 if any run failed, else 0.

    Raises:
      UserError: no ``--agents`` or ``--envs``, or what ``plan`` or the report raise.
    """
    results = Path(args.results)
    failed: list[Finished] = []
    if not args.report_only:
        if not args.agents or not args.envs:
            raise UserError("--agents and --envs are needed (or --report-only).")
        specs = plan()
        todo = check_existing(specs, results)
        print(f"{len(specs)} {noun}s, {len(specs) - len(todo)} already in {results}, "
              f"{len(todo)} to run, {how}", flush=True)
        start = time.perf_counter()
        finished = launch(todo)
        if finished is not None:
            failed = [f for f in finished if f.result is None]
            print(f"done in {elapsed(start)}: {len(finished) - len(failed)} finished, "
                  f"{len(failed)} failed", flush=True)
    return report.finish(results, failed, noun)
