"""The ten-seed MinAtar table of docs/populations.md: PPO's `minatar` entry, 500k env steps a
seed, one population per game, 20 deterministic episodes a seed (seeds 10000 + the seed).

    # in a scratch folder, per game (resumable: --resume GAME continues a killed population)
    pgrad-train --agent ppo --env MinAtar/SpaceInvaders-v1 --seeds 0..9 --total-steps 500000 \
        --out SpaceInvaders
    for d in SpaceInvaders/seed*; do pgrad-evaluate $d --episodes 20; done
    # then, from that folder, for the games done:
    python PGRAD/docs/benchmarks/populations/minatar_500k/assemble.py SpaceInvaders Freeway ...

Writes evals.json here (per game and seed: the evaluation's mean and std, the training wall of
the population from its episodes.csv) and runs pgrad-compare on each game into GAME/ here
(compare.json, the figures; its paths relative to the scratch folder).
"""
import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
COMPARE = Path(sys.executable).with_name("pgrad-compare")


def last_wall(run: Path) -> float:
    with open(run / "episodes.csv", newline="") as f:
        return float(list(csv.DictReader(f))[-1]["wall_s"])


def main(games: list[str]) -> None:
    path = HERE / "evals.json"
    table = json.loads(path.read_text()) if path.exists() else {}
    for game in games:
        seeds = sorted(Path(game).glob("seed*"), key=lambda p: int(p.name[4:]))
        evals = {p.name[4:]: json.loads((p / "eval.json").read_text()) for p in seeds}
        scores = [e["return_mean"] for e in evals.values()]
        table[game] = {
            "env": f"MinAtar/{game}-v1", "steps": 500_000, "episodes": 20,
            "seeds": {s: {"eval_mean": e["return_mean"], "eval_std": e["return_std"]}
                      for s, e in evals.items()},
            "mean": float(np.mean(scores)), "std": float(np.std(scores, ddof=1)),
            "training_wall_s": max(last_wall(p) for p in seeds),
        }
        subprocess.run([str(COMPARE), f"ppo={game}/seed*", "--out", str(HERE / game)],
                       check=True)
        print(game, " / ".join(f"{s:g}" for s in scores),
              f"mean {table[game]['mean']:.1f} ± {table[game]['std']:.1f}")
    path.write_text(json.dumps(table, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
