"""COMA's counterfactual advantage against MAPPO's and IPPO's baselines on the cue game
(:mod:`pgrad.rl.multiagent.cue_game`), 3 seeds each, through ``pgrad-train`` and
``pgrad-evaluate`` as a user runs them.

    .venv/bin/python docs/multiagent/credit_cue.py --out docs/multiagent/results

For each game (``parallel_env``: 8 agents, 8 copies; ``crowd_env``: 24 agents, 4 copies), each
variant and seed it trains ``--steps`` env steps, evaluates the greedy policy on 100 fresh
episodes, and writes ``credit_<game>_<algo>_<credit>_s<seed>.json`` (the command, the training
team return per window of env steps, the evaluation, the wall time) and ``credit_summary.json``
(mean and std over seeds). Runs go two at a time (one per core).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BIN = Path(sys.executable).parent
GAMES = {"parallel_env": 8, "crowd_env": 4}  # factory -> copies (num_envs)
VARIANTS = {"parallel_env": [("ippo", "gae"), ("mappo", "gae"), ("mappo", "coma")],
            "crowd_env": [("mappo", "gae"), ("mappo", "coma")]}
WINDOWS = (2000, 4000, 8000)  # the training team return over the episodes ending in each


def commands(game: str, algo: str, credit: str, seed: int, steps: int, run: str) -> list:
    env = f"pgrad.rl.multiagent.cue_game:{game}"
    train = [str(BIN / "pgrad-train"), "--algo", algo, "--env", env, "--set", f"credit={credit}",
             "--num-envs", str(GAMES[game]), "--total-steps", str(steps), "--seed", str(seed),
             "--out", run, "--quiet"]
    evaluate = [str(BIN / "pgrad-evaluate"), run, "--episodes", "100", "--env", env]
    return [train, evaluate]


def one(game: str, algo: str, credit: str, seed: int, steps: int, out: Path) -> dict:
    run = tempfile.mkdtemp(prefix=f"credit_{game}_{algo}_{credit}_{seed}_")
    train, evaluate = commands(game, algo, credit, seed, steps, run)
    t0 = time.monotonic()
    subprocess.run(train, check=True, capture_output=True, env={**os.environ,
                                                                 "TF_CPP_MIN_LOG_LEVEL": "3"})
    wall = time.monotonic() - t0
    subprocess.run(evaluate, check=True, capture_output=True)
    with open(Path(run) / "episodes.csv", newline="") as f:
        table = list(csv.DictReader(f))
    rows = {k: np.array([float(r[k]) for r in table]) for k in ("step", "return")}
    windows, low = {}, 0
    for high in (*WINDOWS, steps):  # one row per agent and episode: their mean is the team's
        if high <= low:
            continue
        pick = (rows["step"] > low) & (rows["step"] <= high)
        windows[f"{low}-{high}"] = float(rows["return"][pick].mean())
        low = high
    evaluation = json.loads((Path(run) / "eval.json").read_text())
    result = {"game": game, "algo": algo, "credit": credit, "seed": seed, "steps": steps,
              "train_wall_s": round(wall, 1),
              "command": " ".join(["pgrad-train", *train[1:]]).replace(run, "RUN"),
              "evaluate": " ".join(["pgrad-evaluate", *evaluate[1:]]).replace(run, "RUN"),
              "train_team_return": windows,
              "greedy_return_mean": evaluation["return_mean"],
              "greedy_return_std": evaluation["return_std"]}
    (out / f"credit_{game}_{algo}_{credit}_s{seed}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", default="docs/multiagent/results")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = [(g, a, c, s) for g in GAMES for a, c in VARIANTS[g] for s in args.seeds]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda j: one(*j, args.steps, out), jobs))
    summary = {}
    for g in GAMES:
        for a, c in VARIANTS[g]:
            mine = [r for r in results if (r["game"], r["algo"], r["credit"]) == (g, a, c)]
            keys = mine[0]["train_team_return"]
            summary[f"{g}/{a}/{c}"] = {
                "train_team_return": {k: [round(float(np.mean([r["train_team_return"][k]
                                                             for r in mine])), 3),
                                          round(float(np.std([r["train_team_return"][k]
                                                              for r in mine])), 3)]
                                      for k in keys},
                "greedy_return": [round(float(np.mean([r["greedy_return_mean"] for r in mine])), 3),
                                  round(float(np.std([r["greedy_return_mean"] for r in mine])), 3)],
                "train_wall_s": round(float(np.mean([r["train_wall_s"] for r in mine])), 1),
                "seeds": [r["seed"] for r in mine]}
    (out / "credit_summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
