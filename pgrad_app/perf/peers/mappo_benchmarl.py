"""MAPPO and IPPO side by side with BenchMARL on PettingZoo's ``simple_spread_v3`` (``mpe2``).

``mappo_vs_benchmarl`` (opt-in: BenchMARL runs under its own interpreter, :data:`MARL_PYTHON`): env
steps per second (one step of the parallel game, every agent acting: BenchMARL's frames) of
``pgrad-train --algo mappo`` (the command, in its own process, with its run directory, logging,
checkpoints and export) against a process that builds BenchMARL's MAPPO ``Experiment`` and calls
``run`` (:mod:`pgrad_app.perf.peers.benchmarl_side`), on the same sizes (:data:`MATCHED`): 3 agents,
8 copies of the game x 50 steps = 400 frames per batch, 10 epochs of 4 minibatches (BenchMARL:
minibatches of 100 frames, 40 minibatch iterations per batch), a 64-64 tanh MLP for the actor and
one for the critic (which reads the game's state on both sides), discrete actions, Adam at 7e-4,
gradient norm 10, GAE lambda 0.95, entropy 0.01, 25 steps per episode. Runs alternate (pgrad,
BenchMARL, BenchMARL, pgrad, ...: :func:`pgrad_app.perf.common.alternate_rounds`) so that machine
load falls on both alike; the value is the median over rounds of pgrad's env steps/s over
BenchMARL's, each by its whole process wall (start-up included); ``loop_ratio`` compares the
training loops alone, ``cpu_ratio`` the same by process CPU time. The 1-minute load average is
recorded around every run. Without the interpreter the figure is marked skipped.

The learning table (docs/multiagent/benchmarl.md) comes from :func:`learning_runs`: MAPPO and
IPPO, pgrad's defaults against BenchMARL's published YAML, on one budget, each run's JSON under
``docs/multiagent/results/`` (a finished run is skipped, so the driver resumes)::

    python -m pgrad_app.perf.peers.mappo_benchmarl learn --frames 60000 --seeds 0 1 2 --jobs 2
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from pgrad_app.perf.common import (
    alternate_rounds,
    figure,
    interpreter_missing,
    side_process,
    timed_process,
)
from pgrad_app.perf.peers.sb3 import ENV_STEP_RATES, env_step_details, train_run

#: The interpreter with benchmarl, torchrl and mpe2; ``PGRAD_MARL_PYTHON`` overrides it.
MARL_PYTHON = Path(os.environ.get("PGRAD_MARL_PYTHON", "/work/venv-marl/bin/python"))
#: BenchMARL's side, run as a file by :data:`MARL_PYTHON`.
MARL_SCRIPT = Path(__file__).with_name("benchmarl_side.py")
ENV = "mpe2.simple_spread_v3:parallel_env"
#: The game's settings on both sides (BenchMARL's task keys; pgrad's ``--env-kwargs``).
GAME = {"max_cycles": 25, "N": 3, "local_ratio": 0.5}
#: Matched sizes: pgrad's ``--set`` values and BenchMARL's spec keys for the same work.
MATCHED = {
    "pgrad": {"num_envs": 8, "n_steps": 50, "epochs": 10, "num_minibatches": 4,
              "hidden": [64, 64], "learning_rate": 7e-4, "max_grad_norm": 10.0,
              "gae_lambda": 0.95, "ent_coef": 0.01, "critic_input": "state"},
    "benchmarl": {"n_envs": 8, "frames_per_batch": 400, "minibatch_size": 100,
                  "minibatch_iters": 40, "hidden": [64, 64], "lr": 7e-4, "clip_grad": 10.0,
                  "lmbda": 0.95, "entropy_coef": 0.01, "continuous": False, **GAME},
}
#: Frames per run of the speed figure (``--steps``): 5 batches of 400.
STEPS = 2000
#: Rounds of the figure, and threads per side: on a shared 2-core machine a torch or TensorFlow
#: process with one thread per core slows both sides down; one thread each is the fair match.
ROUNDS, THREADS = 2, 1
GOAL = ">= 2 x BenchMARL MAPPO's env steps/s (pgrad-train's whole process)"
RESULTS = Path(__file__).resolve().parents[3] / "docs" / "multiagent" / "results"


def marl_missing(python: Path | None = None) -> str | None:
    """The one-line reason BenchMARL's side cannot run, or None."""
    return interpreter_missing(Path(python or MARL_PYTHON), "BenchMARL",
                               "benchmarl, torchrl and mpe2", "PGRAD_MARL_PYTHON")


def benchmarl_run(spec: dict, python: Path | None = None) -> dict:
    """BenchMARL's side in a fresh process: its JSON plus the whole process's wall and CPU."""
    return side_process([str(python or MARL_PYTHON), str(MARL_SCRIPT), json.dumps(spec)],
                        f"the BenchMARL run {spec}")


def game_argv(game: dict) -> list[str]:
    """``--env-kwargs`` for the game's settings."""
    return ["--env-kwargs", *(f"{k}={v}" for k, v in game.items())]


def pgrad_run(algo: str, steps: int, seed: int, hp: dict, game: dict) -> dict:
    """``pgrad-train`` in a fresh process (:func:`pgrad_app.perf.peers.side_by_side.
    command_run`)."""
    return train_run("command", {"agent": algo, "env": ENV, "seed": int(seed),
                                 "max_steps": int(steps), "hp": hp, "argv": game_argv(game)})


def one_thread_each(threads: int) -> None:
    """Caps the thread pools of the runs this process starts: TensorFlow's (intra- and
    inter-op, read from the environment) and torch's (the BenchMARL spec's ``threads``); 0
    leaves each framework's default (one per core)."""
    if threads:
        os.environ["TF_NUM_INTRAOP_THREADS"] = os.environ["TF_NUM_INTEROP_THREADS"] = str(threads)


def mappo_vs_benchmarl(repeats: int, steps: int = STEPS, rounds: int = ROUNDS, seed: int = 0,
                       python: Path | None = None, threads: int = THREADS) -> dict:
    """pgrad-train's MAPPO env steps/s over BenchMARL MAPPO's on simple_spread_v3, in
    ``rounds`` rounds of one run per side (the order reversed every other round), with
    ``threads`` threads per side (0: each framework's default)."""
    del repeats
    one_thread_each(threads)
    reason = marl_missing(python)
    if reason is not None:
        return figure("mappo_vs_benchmarl", float("nan"), GOAL, False, skipped=reason)
    batch = MATCHED["benchmarl"]["frames_per_batch"]
    if rounds < 1 or steps < batch or steps % batch:
        raise ValueError(f"mappo_vs_benchmarl: rounds must be >= 1 and steps a multiple of "
                         f"{batch} (one batch); got rounds={rounds}, steps={steps}")
    spec = {**MATCHED["benchmarl"], "algorithm": "mappo", "frames": int(steps), "seed": seed,
            "threads": int(threads)}

    def theirs() -> dict:
        run = benchmarl_run(spec, python)
        run.pop("curve", None)
        return run

    measured = alternate_rounds(
        {"pgrad": lambda: pgrad_run("mappo", steps, seed, MATCHED["pgrad"], GAME),
         "benchmarl": theirs}, rounds, ENV_STEP_RATES)
    value = measured.median("process")
    return figure("mappo_vs_benchmarl", value, GOAL, value >= 2.0,
                  **env_step_details(measured, "benchmarl"), threads=threads, steps=steps,
                  matched=MATCHED, load_avg_1m=measured.load_avg_1m, runs=measured.runs,
                  note="fresh process per run, one after the other (odd rounds reversed); "
                  "value = pgrad-train's env steps per second of whole-process wall over "
                  "BenchMARL's (a process building its Experiment and calling run); loop_ratio "
                  "= the training loops alone; cpu_ratio = the same by process CPU time")


# --- the learning table ---------------------------------------------------------------------

#: BenchMARL's published task settings (its conf/task/pettingzoo/simple_spread.yaml), on both
#: sides of the learning table.
PUBLISHED_GAME = {"max_cycles": 100, "N": 3, "local_ratio": 0.5}


def last_fraction(points: list[tuple[int, float, int]], frames: int, fraction: float = 0.1
                  ) -> float:
    """The episode-weighted mean team return of the ``(frames, mean return, episodes)`` points
    in the last ``fraction`` of the budget."""
    kept = [(r, n) for f, r, n in points if f > (1 - fraction) * frames and n > 0]
    if not kept:
        return float("nan")
    returns, counts = np.asarray(kept, dtype=float).T
    return float((returns * counts).sum() / counts.sum())


def _pgrad_learning(algo: str, frames: int, seed: int, eval_episodes: int) -> dict:
    """pgrad-train with the agent's defaults on BenchMARL's task settings, then pgrad-evaluate
    (greedy); ``curve`` from episodes.csv (one row per agent and episode: their mean is the
    team return)."""
    out = Path(tempfile.mkdtemp(prefix=f"pgrad-{algo}-s{seed}-")) / "run"
    train = [sys.executable, "-m", "pgrad_app", "train", "--agent", algo, "--env", ENV,
             *game_argv(PUBLISHED_GAME), "--seed", str(seed), "--total-steps", str(frames),
             "--out", str(out), "--quiet"]
    done, wall, cpu = timed_process(train)
    if done.returncode != 0:
        raise RuntimeError(f"pgrad-train failed ({done.returncode}): {done.stderr[-2000:]}")
    evaluate = [sys.executable, "-m", "pgrad_app", "evaluate", str(out), "--episodes",
                str(eval_episodes), "--env", ENV, "--seed", "10000"]
    done, _, _ = timed_process(evaluate)
    if done.returncode != 0:
        raise RuntimeError(f"pgrad-evaluate failed ({done.returncode}): {done.stderr[-2000:]}")
    result = json.loads((out / "eval.json").read_text())
    with open(out / "episodes.csv", newline="") as f:
        rows = [(int(r["step"]), float(r["return"])) for r in csv.DictReader(f)]
    by_step: dict[int, list[float]] = {}
    for step, ret in rows:
        by_step.setdefault(step, []).append(ret)
    curve = [(s, float(np.mean(v)), len(v)) for s, v in sorted(by_step.items())]
    return {"side": "pgrad", "algorithm": algo, "seed": seed, "frames": frames,
            "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "run_dir": str(out),
            "command": " ".join(train[2:]).replace("pgrad_app train", "pgrad-train"),
            "train_last10pct": last_fraction(curve, frames),
            "eval": {"return_mean": result["return_mean"], "return_std": result["return_std"],
                     "episodes": result["episodes"]},
            "curve": curve}


def _benchmarl_learning(algo: str, frames: int, seed: int, eval_episodes: int) -> dict:
    """BenchMARL's published YAML (algorithm, experiment, model, task), discrete actions."""
    spec = {"algorithm": algo, "frames": frames, "seed": seed, "published": True,
            "continuous": False, "eval_episodes": eval_episodes, "threads": THREADS}
    run = benchmarl_run(spec)
    return {"side": "benchmarl", "algorithm": algo, "seed": seed, "frames": frames,
            "wall_s": run["process_wall_s"], "cpu_s": run["process_cpu_s"],
            "command": f"{MARL_PYTHON} {MARL_SCRIPT.name} '{json.dumps(spec)}'",
            "settings": run["settings"], "train_last10pct": last_fraction(run["curve"], frames),
            "eval": run["eval"], "curve": run["curve"]}


def learning_runs(frames: int, seeds: list[int], algos: list[str], sides: list[str],
                  jobs: int = 2, eval_episodes: int = 20, results: Path = RESULTS) -> list[Path]:
    """Every (side, algorithm, seed) run not yet in ``results`` (``benchmarl_<side>_<algo>_
    s<seed>_<frames>.json``), ``jobs`` at a time; returns the JSON paths written."""
    results.mkdir(parents=True, exist_ok=True)
    one_thread_each(THREADS)
    todo = [(side, algo, seed) for seed in seeds for algo in algos for side in sides
            if not (results / f"benchmarl_{side}_{algo}_s{seed}_{frames}.json").is_file()]

    def one(job: tuple[str, str, int]) -> Path:
        side, algo, seed = job
        fn = _pgrad_learning if side == "pgrad" else _benchmarl_learning
        record = {**fn(algo, frames, seed, eval_episodes),
                  "load_avg_1m_after": round(os.getloadavg()[0], 2)}
        path = results / f"benchmarl_{side}_{algo}_s{seed}_{frames}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=1) + "\n")
        tmp.replace(path)
        print(f"{path.name}: train {record['train_last10pct']:.2f}, eval "
              f"{record['eval']['return_mean']:.2f}, {record['wall_s']} s", flush=True)
        return path

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, todo))


def main(argv: list[str]) -> int:
    """``python -m pgrad_app.perf.peers.mappo_benchmarl learn ...``: the learning table's runs."""
    parser = argparse.ArgumentParser(prog="python -m pgrad_app.perf.peers.mappo_benchmarl")
    sub = parser.add_subparsers(dest="what", required=True)
    learn = sub.add_parser("learn", help="MAPPO/IPPO runs of both sides (resumable)")
    learn.add_argument("--frames", type=int, required=True, help="env steps per run")
    learn.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    learn.add_argument("--algos", nargs="+", default=["mappo", "ippo"],
                       choices=["mappo", "ippo"])
    learn.add_argument("--sides", nargs="+", default=["pgrad", "benchmarl"],
                       choices=["pgrad", "benchmarl"])
    learn.add_argument("--jobs", type=int, default=2, help="runs at a time")
    learn.add_argument("--eval-episodes", type=int, default=20)
    args = parser.parse_args(argv)
    reason = marl_missing() if "benchmarl" in args.sides else None
    if reason is not None:
        print(f"error: {reason}", file=sys.stderr)
        return 2
    learning_runs(args.frames, args.seeds, args.algos, args.sides, args.jobs, args.eval_episodes)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
