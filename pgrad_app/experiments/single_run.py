"""One benchmark run in its own process: train, evaluate, write the result JSON atomically.

    python -m pgrad_app.experiments.single_run RESULTS/logs/NAME.spec.json

The spec is written by :func:`pgrad_app.experiments.launch.run_one` (a :class:`RunSpec`
plus ``out``, ``threads``, ``command``, ``pgrad_commit``, ``jobs``); running this command again by
hand repeats
the run exactly. The run trains with the Python API (``agent.learn(budget)`` with callbacks that
record every finished training episode and log progress), then evaluates the final policy
deterministically (``pgrad.evaluate``, the evaluation protocol of
:func:`pgrad.rl.evaluation.eval_seed`: episodes reset from seed ``seed + 10_000``). The result
(``SCHEMA`` 1)::

    {"schema": 1, "agent", "env", "seed", "budget", "steps" (env steps trained, >= budget),
     "hyperparameters": {every Config field}, "tuned_from": path | null, "overrides": {--set},
     "eval": {"episodes", "seed", "return_mean", "return_std", "returns": [...]},
     "eval_episodes", "episodes" (training episodes finished),
     "curve": [[env_step, return], ...]  (<= 2000 points; each the mean of curve_block
                                          consecutive training episodes, the step of the last),
     "curve_block", "wall_s" (training, after construction), "eval_s", "steps_per_s",
     "machine": {"cpu", "cores", "threads", "jobs", "tensorflow", "python", "platform"},
     "pgrad_commit", "command", "finished_at" (UTC, ISO 8601)}
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

SCHEMA = 1
MAX_CURVE_POINTS = 2000


def limit_threads(threads: int) -> None:
    """Caps TensorFlow's thread pools (the parent also set the env vars before TF loaded)."""
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:  # already initialised: the env vars did it
        pass


def downsample(episodes: list[tuple[int, float]],
               max_points: int = MAX_CURVE_POINTS) -> tuple[list[list[float]], int]:
    """``[(step, return)]`` -> at most ``max_points`` points and the episodes per point.

    Each point averages ``block`` consecutive episodes (the last block may be shorter) and
    carries the step of its last episode; ``block`` is 1 (every episode) when they fit.
    """
    if not episodes:
        return [], 1
    block = max(1, math.ceil(len(episodes) / max_points))
    points = []
    for start in range(0, len(episodes), block):
        chunk = episodes[start:start + block]
        points.append([int(chunk[-1][0]), float(np.mean([r for _, r in chunk]))])
    return points, block


def machine(threads: int, jobs: int) -> dict[str, Any]:
    """The machine a run ran on (CPU model from /proc/cpuinfo where there is one)."""
    import tensorflow as tf

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "threads": threads, "jobs": jobs,
            "tensorflow": tf.__version__, "python": platform.python_version(),
            "platform": platform.platform()}


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Trains and evaluates one run; returns the result dict (see the module docstring)."""
    limit_threads(int(spec["threads"]))
    import agents
    import pgrad
    from pgrad.rl.evaluation import eval_seed
    from pgrad_app.config import plugins
    from pgrad_app.config import settings as config_lib

    env_id = plugins.resolve_env(spec["env"])
    cls = agents.get(spec["agent"])
    cfg = config_lib.build(cls.Config, spec["hyperparameters"], {})
    agent = cls(cfg, env_id=env_id, seed=int(spec["seed"]))
    episodes: list[tuple[int, float]] = []
    budget = int(spec["budget"])
    start = time.perf_counter()
    next_report = [budget // 20]

    def record(loop) -> None:
        episodes.extend((int(step), float(ret)) for step, ret, _ in loop.new_episodes)
        if loop.env_steps >= next_report[0]:  # progress in the run's log, every 5%
            next_report[0] += max(1, budget // 20)
            recent = [r for _, r in episodes[-20:]]
            mean = f"{sum(recent) / len(recent):.1f}" if recent else "-"
            print(f"step {loop.env_steps} wall {time.perf_counter() - start:.0f} s "
                  f"last-20 return {mean}", file=sys.stderr, flush=True)

    try:
        agent.learn(budget, callbacks=record, progress=False)
        wall = time.perf_counter() - start
        steps = int(agent.env_steps)
        start = time.perf_counter()
        ev = pgrad.evaluate(agent, env_id=env_id, episodes=int(spec["eval_episodes"]),
                            deterministic=True, seed=eval_seed(int(spec["seed"])))
        eval_s = time.perf_counter() - start
    finally:
        agent.close()
    curve, block = downsample(episodes)
    return {
        "schema": SCHEMA, "agent": spec["agent"], "env": spec["env"], "seed": int(spec["seed"]),
        "budget": int(spec["budget"]), "steps": steps,
        "hyperparameters": spec["hyperparameters"], "tuned_from": spec.get("tuned_from"),
        "overrides": spec.get("overrides", {}),
        "eval": {"episodes": len(ev["returns"]), "seed": ev["seed"],
                 "return_mean": float(ev["return_mean"]), "return_std": float(ev["return_std"]),
                 "returns": [float(r) for r in ev["returns"]]},
        "eval_episodes": int(spec["eval_episodes"]), "episodes": len(episodes),
        "curve": curve, "curve_block": block,
        "wall_s": round(wall, 3), "eval_s": round(eval_s, 3),
        "steps_per_s": round(steps / wall, 1) if wall > 0 else None,
        "machine": machine(int(spec["threads"]), int(spec.get("jobs", 1))),
        "pgrad_commit": spec.get("pgrad_commit"), "command": spec.get("command", ""),
        "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def write_atomic(path: Path, data: dict) -> None:
    """Writes JSON to ``path`` through a temporary file and a rename (never half a file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m pgrad_app.experiments.single_run SPEC.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(args[0]).read_text())
    result = run(spec)
    write_atomic(Path(spec["out"]), result)
    return 0


if __name__ == "__main__":
    from pgrad_app.quiet import silence

    silence()  # this run's own process: before anything imports TensorFlow
    sys.exit(main())
