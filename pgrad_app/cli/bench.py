"""``scripts/bench.py``: pgrad's speed figures, each in a fresh process, then a table.

The figures are speed (pgrad_app/perf/); the learning benchmark (returns over seeds) is
``pgrad-benchmark``.

    python scripts/bench.py                 # every default figure, then a table
    python scripts/bench.py --only clip_ratio --repeats 50
    python scripts/bench.py --only ppo_mujoco_vs_sb3 --steps 1000000   # opt-in, long
    python scripts/bench.py --only population_vs_sweep --steps 100000  # 10 seeds, one process
    python scripts/bench.py --only mappo_vs_benchmarl --rounds 2       # opt-in, vs BenchMARL

Prints one JSON object per figure (``name``, ``value``, ``goal``, ``met``, ``details``) as it is
measured, then a readable table. The figures are :data:`pgrad_app.perf.driver.FIGURES`; see
docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from pgrad_app.errors import command
from pgrad_app.perf import population
from pgrad_app.perf.common import table
from pgrad_app.perf.driver import FIGURES, OPT_IN, run_figure
from pgrad_app.perf.peers import mappo_benchmarl

# Registered here (opt-in, minutes): ten seeds as one population against pgrad-sweep.
OPT_IN.setdefault("population_vs_sweep", population.population_vs_sweep)
# Registered here (opt-in, minutes): MAPPO through pgrad-train against BenchMARL's MAPPO.
OPT_IN.setdefault("mappo_vs_benchmarl", mappo_benchmarl.mappo_vs_benchmarl)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=command("bench"), description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted({**FIGURES, **OPT_IN}), action="append",
                        help="run only this figure (repeatable); opt-in figures: "
                        + ", ".join(OPT_IN))
    parser.add_argument("--repeats", type=int, default=60, help="interleaved rounds per figure")
    parser.add_argument("--max-steps", type=int, default=300_000,
                        help="a2c_cartpole: env-step budget per run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2],
                        help="a2c_cartpole: seeds (one pgrad and one SB3 run each)")
    parser.add_argument("--steps", type=int, default=None,
                        help="ppo_mujoco_vs_sb3 / a2c_mujoco_vs_sb3 / command_overhead / "
                        "ppo_minatar_vs_sb3 / recurrent_ppo_vs_sb3c: env steps per side "
                        "(default: each figure's own, 50000, ppo_minatar_vs_sb3 500000, "
                        "recurrent_ppo_vs_sb3c 100000; the SB3 goals are for 1000000 / 300000)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="ppo_mujoco_vs_sb3 / a2c_mujoco_vs_sb3 / ppo_minatar_vs_sb3 / "
                        "recurrent_ppo_vs_sb3c: rounds of the runs (three; two for "
                        "recurrent_ppo_vs_sb3c), every other one in reverse order; the value is "
                        "the median over rounds (a machine whose speed drifts favours neither "
                        "side)")
    parser.add_argument("--figure-worker", default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Every figure asked for, each in a fresh process (``--figure-worker``), then the table."""
    args = build_parser().parse_args(argv)
    if args.figure_worker is not None:
        if args.figure_worker == "population_vs_sweep":  # --steps: env steps per seed
            out = population.population_vs_sweep(args.repeats, args.steps)
            out["details"]["figure_process_peak_rss_mb"] = None  # its runs are children
            print(json.dumps(out), flush=True)
            return 0
        if args.figure_worker == "mappo_vs_benchmarl":  # --steps: frames per run
            out = mappo_benchmarl.mappo_vs_benchmarl(
                args.repeats, **({} if args.steps is None else {"steps": args.steps}),
                rounds=max(args.rounds, mappo_benchmarl.ROUNDS))
            out["details"]["figure_process_peak_rss_mb"] = None  # its runs are children
            print(json.dumps(out), flush=True)
            return 0
        for r in run_figure(args.figure_worker, args):
            print(json.dumps(r), flush=True)
        return 0
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in lscpu.splitlines()
                  if ln.startswith("Model name")), "unknown")
    print(json.dumps({"machine": model, "cpus": os.cpu_count(), "tensorflow": _tf_version(),
                      "load_avg_1m_5m_15m": os.getloadavg()}), flush=True)
    results = []
    passthrough = ["--repeats", str(args.repeats), "--max-steps", str(args.max_steps),
                   *(["--steps", str(args.steps)] if args.steps is not None else []),
                   "--seeds", *map(str, args.seeds), "--rounds", str(args.rounds)]
    for name in args.only or list(FIGURES):
        # Each figure in a fresh process: its peak memory is its own.
        proc = subprocess.run([sys.executable, "-m", "pgrad_app", "bench", "--figure-worker", name,
                               *passthrough], capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"figure {name} failed:\n{proc.stderr[-3000:]}", file=sys.stderr)
            return 1
        for line in proc.stdout.strip().splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                print(json.dumps(r), flush=True)
                results.append(r)
    print(json.dumps({"load_avg_1m_5m_15m_at_end": os.getloadavg()}))
    print()
    print(table(results))
    return 0


def _tf_version() -> str:
    import tensorflow as tf

    return tf.__version__
