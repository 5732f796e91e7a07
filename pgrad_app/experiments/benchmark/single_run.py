"""One benchmark run in its own process: train, evaluate, write the result JSON atomically.

    python -m pgrad_app.experiments.benchmark.single_run RESULTS/logs/NAME.spec.json

The spec is written by :func:`pgrad_app.experiments.benchmark.launch.run_one` (a ``RunSpec``
plus ``out``, ``threads``, ``command``, ``pgrad_commit``, ``jobs``); running this command again by
hand repeats
the run exactly. The run trains with the Python API (``agent.learn(budget)`` with callbacks that
record every finished training episode and log progress), then evaluates the final policy
deterministically (``pgrad.evaluate``, the evaluation protocol of
:func:`pgrad.rl.evaluation.evaluate_policy.eval_seed`: episodes reset from seed ``seed + 10_000``).
The result
(``SCHEMA`` 1)::

    {"schema": 1, "agent", "env", "seed", "budget", "steps" (env steps trained, >= budget),
     "hyperparameters": {every Config field}, "tuned_from": path | null, "overrides": {--set},
     "eval": {"episodes", "seed", "return_mean", "return_std", "returns": [...]},
     "eval_episodes", "episodes" (training episodes finished),
     "curve": [[env_step, return], ...]  (<= 2000 points; each the mean of curve_block
                                          consecutive training episodes, the step of the last),
     "curve_block", "wall_s" (training, after construction), "eval_s", "steps_per_s",
     "machine": {"cpu", "cores", "threads", "jobs", "tensorflow", "python", "platform"},
     "pgrad_commit", "command", "finished_at" (UTC, ISO 8601),
     "resumed_from": [env_step, ...]  (the checkpoints this run continued from; [] if none)}

Long runs survive being stopped: every ``checkpoint_every_s`` seconds of training (spec key,
default :data:`CHECKPOINT_EVERY_S`), when SIGTERM or SIGINT stops the run, and once the budget is
trained (a stop during the evaluation then costs only the evaluation), the agent and the
episodes recorded so far are written to ``RESULTS/checkpoints/NAME/`` (verified checkpoints,
:mod:`pgrad.rl.storage.checkpoint`, the newest two kept). Launching the run again continues from the
newest good one (a damaged one is skipped with a warning, the previous one is used) up to the
same budget; the checkpoints are deleted once the result is written. A resumed run is not
bit-identical to an uninterrupted one (the envs restart their episodes at the checkpoint; the
episode in progress is not counted). A checkpoint of other settings is refused in one line,
never overwritten.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

SCHEMA = 1
MAX_CURVE_POINTS = 2000
#: Seconds of training between two checkpoints of a benchmark run.
CHECKPOINT_EVERY_S = 300.0
#: What must match for a checkpoint to be continued (the rest, e.g. threads, may change).
SAME_RUN = ("agent", "env", "seed", "budget", "hyperparameters")
#: The checkpoint metadata key of the run's own record (checkpoints written before this name
#: hold it under OLD_META_KEY, still read).
META_KEY, OLD_META_KEY = "benchmark", "bench"


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


def checkpoint_dir(spec: dict[str, Any]) -> Path:
    """``RESULTS/checkpoints/NAME/``: where the run ``spec`` keeps its checkpoints."""
    out = Path(spec["out"])
    return out.parent / "checkpoints" / out.stem


class StopRequest:
    """SIGTERM / SIGINT while training: noted here, acted on after the current update (the
    agent's state is whole between updates), so the checkpoint written then is consistent."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> StopRequest:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._old[sig] = signal.signal(sig, self._note)
        return self

    def _note(self, signum, frame) -> None:
        self.signal = signum

    def __exit__(self, *exc) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


def resume(agent, spec: dict[str, Any], ckpt: Path) -> tuple[list[tuple[int, float]], list[int]]:
    """Restores the newest good checkpoint of this run into ``agent``; returns the episodes
    recorded before it and the steps of the checkpoints continued so far ([], [] if none).

    Raises:
      SystemExit: the checkpoint is of other settings (one line; nothing is deleted).
    """
    from agents.persistence.save_load import restore
    from pgrad.rl.storage.checkpoint import CheckpointStore

    if not CheckpointStore(ckpt).checkpoints():
        return [], []
    meta, path = restore(agent, ckpt, warn=lambda text: print(f"warning: {text}",
                                                                file=sys.stderr, flush=True))
    record = meta.get(META_KEY) or meta.get(OLD_META_KEY) or {}
    theirs = record.get("run") or {}
    changed = [k for k in SAME_RUN if k != "hyperparameters" and theirs.get(k) != spec.get(k)]
    ours_hp, their_hp = spec.get("hyperparameters") or {}, theirs.get("hyperparameters") or {}
    # A field only one side knows is one a newer pgrad added (at its default) or dropped:
    # it does not make this another run; a value both sides hold and that differs does.
    changed += [f"hyperparameter {k}" for k in sorted(set(ours_hp) & set(their_hp))
                if ours_hp[k] != their_hp[k]]
    if changed:
        raise SystemExit(f"error: {path} is a checkpoint of this run with other "
                         f"{', '.join(changed)}; delete {ckpt} to start the run again.")
    agent.learn_stats.load_meta(meta)
    episodes = [(int(s), float(r)) for s, r in record.get("episodes", [])]
    resumed = [*map(int, record.get("resumed_from", [])), int(agent.env_steps)]
    print(f"resumed from {path} at env step {int(agent.env_steps):,} "
          f"({len(episodes)} episodes before it)", file=sys.stderr, flush=True)
    return episodes, resumed


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Trains and evaluates one run; returns the result dict (see the module docstring).

    Raises:
      SystemExit: stopped by SIGTERM / SIGINT (code 128 + the signal) after a checkpoint.
    """
    limit_threads(int(spec["threads"]))
    import agents
    import pgrad
    from agents.learning import progress_meta
    from agents.persistence.save_load import save_checkpoint
    from pgrad.rl.evaluation.evaluate_policy import eval_seed
    from pgrad_app.config import plugins
    from pgrad_app.config import settings as config_lib

    env_id = plugins.resolve_env(spec["env"])
    cls = agents.get(spec["agent"])
    cfg = config_lib.build(cls.Config, spec["hyperparameters"], {})
    agent = cls(cfg, env_id=env_id, seed=int(spec["seed"]))
    budget = int(spec["budget"])
    every = float(spec.get("checkpoint_every_s", CHECKPOINT_EVERY_S))
    ckpt = checkpoint_dir(spec)
    start = time.perf_counter()
    next_report = [budget // 20]
    last_save = [time.monotonic()]

    def save(episodes, resumed) -> None:
        run_record = {k: spec.get(k) for k in SAME_RUN}
        record = {"run": run_record, "episodes": episodes, "resumed_from": resumed}
        save_checkpoint(agent, ckpt, {**progress_meta(agent), META_KEY: record}, keep=2)
        last_save[0] = time.monotonic()

    try:
        episodes, resumed = resume(agent, spec, ckpt)
        with StopRequest() as stop:
            def record(loop) -> bool:
                episodes.extend((int(step), float(ret)) for step, ret, _ in loop.new_episodes)
                if loop.env_steps >= next_report[0]:  # progress in the run's log, every 5%
                    next_report[0] = loop.env_steps + max(1, budget // 20)
                    recent = [r for _, r in episodes[-20:]]
                    mean = f"{sum(recent) / len(recent):.1f}" if recent else "-"
                    print(f"step {loop.env_steps} wall {time.perf_counter() - start:.0f} s "
                          f"last-20 return {mean}", file=sys.stderr, flush=True)
                if stop.signal is not None or time.monotonic() - last_save[0] >= every:
                    save(episodes, resumed)
                return stop.signal is None

            if budget > agent.env_steps:
                agent.learn(budget - int(agent.env_steps), callbacks=record, progress=False)
            if stop.signal is not None:
                name = signal.Signals(stop.signal).name
                print(f"stopped by {name} at env step {int(agent.env_steps):,}; checkpoint in "
                      f"{ckpt} (run the command again to continue)", file=sys.stderr, flush=True)
                raise SystemExit(128 + stop.signal)
            if not resumed or resumed[-1] < budget:  # trained here: keep it before evaluating
                save(episodes, resumed)  # (a stop during the evaluation then costs only that)
        wall = agent.learn_stats.wall_s  # every stretch of this run, resumed ones included
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
        "resumed_from": resumed,
    }


def write_atomic(path: Path, data: dict) -> None:
    """Writes JSON to ``path`` through a temporary file and a rename (never half a file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m pgrad_app.experiments.benchmark.single_run SPEC.json",
              file=sys.stderr)
        return 2
    spec = json.loads(Path(args[0]).read_text())
    result = run(spec)
    write_atomic(Path(spec["out"]), result)
    shutil.rmtree(checkpoint_dir(spec), ignore_errors=True)  # the result holds what they did
    return 0


if __name__ == "__main__":
    from pgrad_app.quiet import silence

    silence()  # this run's own process: before anything imports TensorFlow
    sys.exit(main())
