"""What every figure shares: interleaved timing, ratios, peak memory, the result record, the table.

A figure is a dict ``{name, value, goal, met, details}`` (:func:`figure`); timed ratios
interleave the two sides (A, B, A, B, ...) after a warm-up and report the median of the
per-round ratios, so machine load shared by both sides cancels.
"""

from __future__ import annotations

import resource
import subprocess
import time
from collections.abc import Callable

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


def timed_process(argv: list[str]) -> tuple[subprocess.CompletedProcess, float, float]:
    """Runs ``argv`` to the end, output captured: ``(result, wall s, CPU s)``, the CPU of the
    whole process and its own children (which machine load inflates far less than the wall)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return done, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


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

