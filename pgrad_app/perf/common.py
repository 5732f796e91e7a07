"""What every figure shares: interleaved timing, ratios, peak memory, the result record, the table.

A figure is a dict ``{name, value, goal, met, details}`` (:func:`figure`); timed ratios
interleave the two sides (A, B, A, B, ...) after a warm-up and report the median of the
per-round ratios, so machine load shared by both sides cancels. Figures whose sides are whole
processes (:mod:`pgrad_app.perf.peers`) alternate them the same way with
:func:`alternate_rounds`.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

T = 2048  # steps in the batch of every gradient figure


def interleaved(fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 3):
    """``{name: [seconds per call]}``; calls alternate between the functions every round.

    Odd rounds run the functions in reverse order, so neither side always follows the other.
    """
    for f in fns.values():
        for _ in range(warmup):
            f()
    times: dict[str, list[float]] = {k: [] for k in fns}
    order = list(fns.items())
    for i in range(repeats):
        for name, f in order if i % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - start)
    return {k: np.asarray(v) for k, v in times.items()}


def ratio(times, num: str, den: str) -> float:
    """Median over rounds of ``time[num] / time[den]``."""
    return float(np.median(times[num] / times[den]))


def ms(times, name: str) -> float:
    return round(float(np.median(times[name])) * 1e3, 3)


def figure(name: str, value: float, goal: str, met: bool, **details) -> dict:
    return {"name": name, "value": round(float(value), 3), "goal": goal, "met": bool(met),
            "details": details}


def rounds(fn: Callable[[], object], calls: int) -> Callable[[], None]:
    """``fn`` called ``calls`` times (one timed round of a fast call)."""

    def run():
        for _ in range(calls):
            fn()

    return run


@dataclass
class Rounds:
    """What :func:`alternate_rounds` measured.

    Attributes:
      runs: ``{side: [its run of each round]}``, both sides' lists ``rounds`` long.
      ratios: ``{measure: [the first side's rate over the second's, one per round]}``.
      load_avg_1m: the 1-minute load average before the first run and after every run
        (``2 * rounds + 1`` values, 2 decimals).
    """

    runs: dict[str, list[dict]]
    ratios: dict[str, list[float]]
    load_avg_1m: list[float]

    def median(self, measure: str) -> float:
        """The median over rounds of ``measure``'s ratios."""
        return float(np.median(self.ratios[measure]))

    def side_median(self, side: str, rate: Callable[[dict], float]) -> float:
        """The median of ``rate`` over ``side``'s runs, to 1 decimal."""
        return round(float(np.median([rate(r) for r in self.runs[side]])), 1)


def alternate_rounds(sides: dict[str, Callable[[], dict]], rounds: int,
                     rates: dict[str, Callable[[dict], float]]) -> Rounds:
    """Runs two sides one after the other for ``rounds`` rounds, the order reversed every other
    round (A, B, B, A, A, B, ...), so that machine load falls on both alike.

    Args:
      sides: ``{name: run}``, exactly two; the first is pgrad's (the ratios' numerator). Each
        ``run()`` does one whole run (typically a fresh process) and returns its record.
      rounds: how many rounds, >= 1.
      rates: ``{measure: rate}``: each round's ratio of ``measure`` is ``rate(first side's run)
        / rate(second side's run)`` (env steps or tokens per second, by wall or CPU time).

    Returns:
      :class:`Rounds`: the runs, the per-round ratios and the load average around every run.

    Raises:
      ValueError: not two sides, or ``rounds`` < 1.
    """
    if len(sides) != 2:
        raise ValueError(f"alternate_rounds: sides must name exactly two runs; got {list(sides)}")
    if rounds < 1:
        raise ValueError(f"alternate_rounds: rounds must be >= 1; got {rounds}")
    ours, theirs = sides
    runs: dict[str, list[dict]] = {ours: [], theirs: []}
    ratios: dict[str, list[float]] = {m: [] for m in rates}
    load = [round(os.getloadavg()[0], 2)]
    for k in range(rounds):
        for side in (ours, theirs) if k % 2 == 0 else (theirs, ours):
            runs[side].append(sides[side]())
            load.append(round(os.getloadavg()[0], 2))
        for measure, rate in rates.items():
            ratios[measure].append(rate(runs[ours][-1]) / rate(runs[theirs][-1]))
    return Rounds(runs, ratios, load)


def timed_process(argv: list[str]) -> tuple[subprocess.CompletedProcess, float, float]:
    """Runs ``argv`` to the end, output captured: ``(result, wall s, CPU s)``, the CPU of the
    whole process and its own children (which machine load inflates far less than the wall)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return done, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def side_process(argv: list[str], what: str) -> dict:
    """One side's run in a fresh process (:func:`timed_process`): the JSON of the last line of
    its output that starts with ``{"side"``, plus ``process_wall_s`` and ``process_cpu_s`` of
    the whole process (2 decimals).

    Raises:
      RuntimeError: ``"{what} failed (exit N):"`` and the end of its stderr, when the process
        exits non-zero or prints no such line.
    """
    done, wall, cpu = timed_process(argv)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith('{"side"')]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{what} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return {**json.loads(lines[-1]), "process_wall_s": round(wall, 2),
            "process_cpu_s": round(cpu, 2)}


def interpreter_missing(python: Path, project: str, packages: str, env_var: str) -> str | None:
    """The one-line reason another project's side cannot run under ``python`` (no executable
    file there), or None; it names ``packages`` (what that venv holds) and ``env_var`` (the
    variable naming another interpreter)."""
    if not python.is_file() or not os.access(python, os.X_OK):
        return (f"no {project} interpreter at {python} (a venv with {packages}; {env_var} names "
                "another)")
    return None


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM; ru_maxrss would include a parent's at fork)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def table(results: list[dict]) -> str:
    rows = [("figure", "value", "goal", "met")]
    for r in results:
        met = "skipped" if "skipped" in r["details"] else ("yes" if r["met"] else "NO")
        rows.append((r["name"], f"{r['value']:g}", r["goal"], met))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)

