"""pgrad's performance figures, each a ratio of two things measured side by side.

    python scripts/bench.py                 # every default figure, then a table
    python scripts/bench.py --only clip_ratio --repeats 50
    python scripts/bench.py --only ppo_mujoco_vs_sb3 --steps 1000000   # opt-in, long

Prints one JSON object per figure (``name``, ``value``, ``goal``, ``met``, ``details``) as it is
measured, then a readable table. Each figure runs in a fresh process, whose peak memory (VmHWM)
is in its details (``figure_process_peak_rss_mb``; both sides of an in-process ratio share it).
Timed ratios interleave the two sides (A, B, A, B, ...) after a warm-up and report the median
of the per-round ratios, so machine load shared by both sides cancels. Gradient shapes: a 64-64
tanh MLP with a Categorical head on CartPole shapes (obs 4, 2 actions), T = 2048 steps.
Figures against Stable-Baselines3 (``pip install 'pgrad[bench]'``) run each training run in its
own process (scripts/bench_runs.py) and report each side's peak memory; without SB3 they are
marked skipped. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

# isort: off
import pgrad_app.quiet  # noqa: F401  (first: silences TensorFlow and picks its allocator)
import tensorflow as tf
from pgrad_app.bench import collection, gradients, sb3, scaling, speed
from pgrad_app.bench.common import peak_rss_mb, table
# isort: on

ROOT = Path(__file__).resolve().parents[2]  # the folder holding pgrad_app/ and scripts/


FIGURES: dict[str, Callable] = {
    "per_step_ratio": gradients.per_step_ratio,
    "fused_ratio": gradients.fused_ratio,
    "clip_ratio": gradients.clip_ratio,
    "jacobian_ratio": gradients.jacobian_ratio,
    "diagnostics_ratio": gradients.diagnostics_ratio,
    "rollout_ratio": collection.rollout_ratio,
    "update_overhead": speed.update_overhead,
    "a2c_speed_ratio": speed.a2c_speed_ratio,
    "collection_envpool_cartpole": collection.collection_backends,
    "collection_envpool_cartpole_64envs": collection.collection_cartpole_64,
    "collection_envpool_halfcheetah": collection.collection_cheetah,
    "a2c_cartpole": sb3.a2c_cartpole,
    "ray_scaling": scaling.ray_scaling,
}
#: Figures run only when named with --only (long).
OPT_IN: dict[str, Callable] = {"ppo_mujoco_vs_sb3": sb3.ppo_mujoco_vs_sb3,
                               "a2c_mujoco_vs_sb3": sb3.a2c_mujoco_vs_sb3}


def run_figure(name: str, args) -> list[dict]:
    """Runs one figure here; adds this process's peak memory to each result."""
    fn = {**FIGURES, **OPT_IN}[name]
    kwargs = {}
    if name == "a2c_cartpole":
        kwargs = {"max_steps": args.max_steps, "seeds": tuple(args.seeds)}
    elif name in ("ppo_mujoco_vs_sb3", "a2c_mujoco_vs_sb3"):
        kwargs = {"steps": args.steps}
    out = fn(args.repeats, **kwargs)
    out = out if isinstance(out, list) else [out]
    for r in out:
        r["details"]["figure_process_peak_rss_mb"] = round(peak_rss_mb(), 1)
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted({**FIGURES, **OPT_IN}), action="append",
                        help="run only this figure (repeatable); opt-in figures: "
                        + ", ".join(OPT_IN))
    parser.add_argument("--repeats", type=int, default=60, help="interleaved rounds per figure")
    parser.add_argument("--max-steps", type=int, default=300_000,
                        help="a2c_cartpole: env-step budget per run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2],
                        help="a2c_cartpole: seeds (one pgrad and one SB3 run each)")
    parser.add_argument("--steps", type=int, default=50_000,
                        help="ppo_mujoco_vs_sb3 / a2c_mujoco_vs_sb3: env steps per side (the "
                        "goals are for 1000000 / 300000)")
    parser.add_argument("--figure-worker", default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Every figure asked for, each in a fresh process (``--figure-worker``), then the table."""
    args = build_parser().parse_args(argv)
    if args.figure_worker is not None:
        for r in run_figure(args.figure_worker, args):
            print(json.dumps(r), flush=True)
        return 0
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in lscpu.splitlines()
                  if ln.startswith("Model name")), "unknown")
    print(json.dumps({"machine": model, "cpus": os.cpu_count(), "tensorflow": tf.__version__,
                      "load_avg_1m_5m_15m": os.getloadavg()}), flush=True)
    results = []
    passthrough = ["--repeats", str(args.repeats), "--max-steps", str(args.max_steps),
                   "--steps", str(args.steps), "--seeds", *map(str, args.seeds)]
    for name in args.only or list(FIGURES):
        # Each figure in a fresh process: its peak memory is its own. Run from ROOT, the child
        # imports this copy of pgrad_app.
        proc = subprocess.run([sys.executable, "-m", "pgrad_app.bench", "--figure-worker", name,
                               *passthrough], capture_output=True, text=True, cwd=ROOT)
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
