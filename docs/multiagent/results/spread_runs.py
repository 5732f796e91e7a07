"""``ippo`` / ``mappo`` learning runs on simple_spread_v3 (BenchMARL's task settings: 3 agents,
100-step episodes, ``local_ratio`` 0.5), one training process at a time.

Each run is ``pgrad-train`` with the agent's defaults (plus any ``--set``), then a greedy
``pgrad-evaluate`` on fresh episodes (seeds 10,000 ...); it writes
``spread_<algo>[_<tag>]_s<seed>_<frames>.json`` beside this file (the command, wall time, the
training curve, the mean team return of the training episodes that ended in the last tenth of
the budget, the evaluation). A run whose JSON exists is skipped::

    python docs/multiagent/results/spread_runs.py --frames 200000 --algos mappo ippo \
        --seeds 0 1 2 --eval-episodes 50
    python docs/multiagent/results/spread_runs.py --frames 200000 --algos ippo --tag vn \
        --set value_norm=true clip_range_vf=0.2
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ENV = "mpe2.simple_spread_v3:parallel_env"
GAME = ["--env-kwargs", "max_cycles=100", "N=3", "local_ratio=0.5"]
BIN = Path(sys.executable).parent


def last_tenth(curve: list[tuple[int, float, int]], frames: int) -> float:
    """The episode-weighted mean team return of the curve's points past 90% of ``frames``."""
    kept = [(r, n) for f, r, n in curve if f > 0.9 * frames and n > 0]
    return float(sum(r * n for r, n in kept) / sum(n for _, n in kept))


def curve_of(run: Path) -> list[tuple[int, float, int]]:
    """``(frames, mean team return, agent episodes)`` per logged step of ``episodes.csv`` (one
    row per agent and episode: their mean is the team return)."""
    by_step: dict[int, list[float]] = {}
    with open(run / "episodes.csv", newline="") as f:
        for row in csv.DictReader(f):
            by_step.setdefault(int(row["step"]), []).append(float(row["return"]))
    return [(s, float(np.mean(v)), len(v)) for s, v in sorted(by_step.items())]


def one_run(algo: str, seed: int, frames: int, episodes: int, sets: list[str]) -> dict:
    """Trains and evaluates one run; returns its record."""
    run = Path(tempfile.mkdtemp(prefix=f"spread-{algo}-s{seed}-")) / "run"
    train = [str(BIN / "pgrad-train"), "--agent", algo, "--env", ENV, *GAME, "--seed",
             str(seed), "--total-steps", str(frames), "--out", str(run), "--quiet"]
    for item in sets:  # one --set per key=value
        train += ["--set", item]
    env = {**os.environ, "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}
    start = time.perf_counter()
    done = subprocess.run(train, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"pgrad-train failed: {done.stderr[-2000:]}")
    evaluate = [str(BIN / "pgrad-evaluate"), str(run), "--episodes", str(episodes), "--env",
                ENV, "--seed", "10000"]
    done = subprocess.run(evaluate, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"pgrad-evaluate failed: {done.stderr[-2000:]}")
    result = json.loads((run / "eval.json").read_text())
    curve = curve_of(run)
    return {"algorithm": algo, "seed": seed, "frames": frames, "set": sets,
            "wall_s": round(wall, 1), "load_avg_1m_after": round(os.getloadavg()[0], 2),
            "command": " ".join(["pgrad-train", *train[1:]]), "run_dir": str(run),
            "train_last10pct": last_tenth(curve, frames),
            "eval": {k: result[k] for k in ("return_mean", "return_std", "episodes")},
            "curve": curve}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="spread_runs.py")
    parser.add_argument("--frames", type=int, required=True)
    parser.add_argument("--algos", nargs="+", default=["mappo", "ippo"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--eval-episodes", type=int, default=50)
    parser.add_argument("--set", nargs="*", default=[], dest="sets")
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)
    for algo in args.algos:
        for seed in args.seeds:
            name = f"spread_{algo}{'_' + args.tag if args.tag else ''}_s{seed}_{args.frames}"
            path = HERE / f"{name}.json"
            if path.is_file():
                continue
            record = one_run(algo, seed, args.frames, args.eval_episodes, args.sets)
            path.write_text(json.dumps(record, indent=1) + "\n")
            print(f"{path.name}: train {record['train_last10pct']:.1f}, greedy "
                  f"{record['eval']['return_mean']:.1f}, {record['wall_s']} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
