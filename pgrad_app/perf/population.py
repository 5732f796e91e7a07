"""``population_vs_sweep``: ten seeds in one process against ten processes (pgrad-sweep).

Three commands, each timed from its start to its exit (TensorFlow's start-up included), one
after the other on the same machine, A2C on CartPole-v1 (its tuned settings: 16 envs, 5 steps
per update) to the same budget per seed:

* the population: ``pgrad-train --seeds 0..9 --total-steps N`` (one process, one traced
  update of all ten per round);
* the sweep: ``pgrad-sweep --agents a2c --envs CartPole-v1 --seeds 0 ... 9 --steps N`` (a Ray
  task per seed, one CPU each: as many at a time as the machine has cores; each trial also
  evaluates its policy, with ``--eval-episodes 1`` here to keep that small);
* one seed alone: ``pgrad-train --seed 0 --total-steps N``, before and after the other two
  (its wall the mean of both).

The value is the population's wall over the sweep's (goal <= 0.4); the details hold its wall
over one seed's (goal <= 2.5), each side's wall and CPU seconds (the sweep's CPU is its own
process's only: Ray runs the trials in its workers), the population's CPU over ten single runs',
and peak resident memory: the
population's process against ten single runs' (10 x one run's peak, what they hold when they
run side by side). Peak memory is read by ``/usr/bin/time`` (its ``%M``) where it exists. The
machine's load average is recorded beside them: the machine may be shared.

    python scripts/bench.py --only population_vs_sweep --steps 100000
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from pgrad_app.perf.common import figure, timed_process

#: Env steps per seed unless ``--steps`` says otherwise.
STEPS = 100_000
SEEDS = tuple(range(10))
GOAL = "<= 0.4 x the sweep's wall (and <= 2.5 x one seed's)"
TIME = "/usr/bin/time"


def _timed(argv: list[str]) -> dict:
    """Runs ``argv`` (under /usr/bin/time for its peak RSS where it exists): wall, CPU, MiB."""
    wrapped = [TIME, "-f", "PEAK_RSS_KB %M", *argv] if shutil.which(TIME) else argv
    done, wall, cpu = timed_process(wrapped)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): "
                           f"{done.stderr[-2000:]}")
    rss = None
    for line in done.stderr.splitlines():
        if line.startswith("PEAK_RSS_KB "):
            rss = round(int(line.split()[1]) / 1024, 1)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "peak_rss_mb": rss}


def commands(steps: int, folder: Path) -> dict[str, list[str]]:
    """The three command lines, writing under ``folder``."""
    py = [sys.executable, "-m", "pgrad_app"]
    common = ["--agent", "a2c", "--env", "CartPole-v1", "--total-steps", str(steps), "--quiet"]
    return {
        "population": [*py, "train", *common, "--seeds", f"{SEEDS[0]}..{SEEDS[-1]}",
                       "--out", str(folder / "population")],
        "sweep": [*py, "sweep", "--agents", "a2c", "--envs", "CartPole-v1", "--seeds",
                  *map(str, SEEDS), "--steps", str(steps), "--eval-episodes", "1",
                  "--results", str(folder / "sweep")],
        "one_seed": [*py, "train", *common, "--seed", str(SEEDS[0]),
                     "--out", str(folder / "one")],
    }


def population_vs_sweep(repeats: int = 1, steps: int | None = None) -> dict:
    """The figure (``repeats`` is unused: each side is one long run)."""
    steps = STEPS if steps is None else int(steps)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="pgrad-population-") as tmp:
        cmds = commands(steps, Path(tmp))
        # one seed before and after the others (the mean of the two): a shared machine's load
        # drifts over the minutes the population and the sweep take
        first = _timed(cmds["one_seed"])
        shutil.rmtree(Path(tmp) / "one", ignore_errors=True)  # the second writes it again
        pop, sweep = _timed(cmds["population"]), _timed(cmds["sweep"])
        last = _timed(cmds["one_seed"])
    one = {k: (None if first[k] is None else round((first[k] + last[k]) / 2, 2))
           for k in first}
    one["runs_wall_s"] = [first["wall_s"], last["wall_s"]]
    vs_sweep = pop["wall_s"] / sweep["wall_s"]
    vs_one = pop["wall_s"] / one["wall_s"]
    rss_ten = None if one["peak_rss_mb"] is None else round(10 * one["peak_rss_mb"], 1)
    return figure("population_vs_sweep", vs_sweep, GOAL, vs_sweep <= 0.4 and vs_one <= 2.5,
                  steps_per_seed=steps, seeds=len(SEEDS), population=pop, sweep=sweep,
                  one_seed=one, population_over_one_seed=round(vs_one, 3),
                  population_peak_rss_mb=pop["peak_rss_mb"], ten_single_runs_rss_mb=rss_ten,
                  population_cpu_over_ten_single=round(pop["cpu_s"] / (10 * one["cpu_s"]), 3),
                  load_avg_before=[round(x, 2) for x in load_before],
                  load_avg_after=[round(x, 2) for x in os.getloadavg()])
