"""The 3-seed self-play rows of docs/multiagent/self_play.md: each seed through ``pgrad-train``
(a run cut short resumes from its checkpoint on the next call) then ``pgrad-evaluate`` with
``--episodes`` games per opponent and seat; one JSON per seed here
(``self_play_connect_four_v3_NAME_sS.json``, a seed already written is not run again) and a
summary over the seeds written (``..._NAME_summary.json``).

    python docs/multiagent/results/self_play_seeds.py NAME --set hidden=[256,256] ... \
        [--seeds 0 1 2] [--steps 300000] [--episodes 500] [--runs DIR]

``--set`` values go on top of ``BASE`` (the ``mix25_mb16_lr1e-3`` row's settings).
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent
GAME = "connect_four_v3"
ENV = f"pettingzoo.classic.{GAME}:env"
BASE = ["self_play=true", "num_envs=16", "n_steps=64", "learning_rate=0.001", "epochs=4",
        "num_minibatches=16", "random_prob=0.25", "hidden=[128,128]"]


def settings(extra: list[str]) -> list[str]:
    """BASE with the keys of ``extra`` replaced (``key=value`` strings), in BASE's order."""
    given = dict(s.split("=", 1) for s in extra)
    out = [f"{k}={given.pop(k)}" if k in given else s
           for s in BASE for k in [s.split("=", 1)[0]]]
    return out + [f"{k}={v}" for k, v in given.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name")
    parser.add_argument("--set", dest="sets", action="append", default=[])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=300_000)
    parser.add_argument("--episodes", type=int, default=500)
    parser.add_argument("--runs", default="runs/self_play")
    args = parser.parse_args()
    config = settings(args.sets)
    for seed in args.seeds:
        out = HERE / f"self_play_{GAME}_{args.name}_s{seed}.json"
        if out.exists():
            continue
        run = Path(args.runs) / args.name / f"{GAME}_s{seed}"
        sets = [x for s in config for x in ("--set", s)]
        if (run / "checkpoints").exists():
            train = [str(BIN / "pgrad-train"), "--resume", str(run), "--env", ENV, "--quiet"]
        else:
            train = [str(BIN / "pgrad-train"), "--algo", "ippo", "--env", ENV, "--total-steps",
                     str(args.steps), "--seed", str(seed), "--out", str(run), "--quiet", *sets]
        evaluate = [str(BIN / "pgrad-evaluate"), str(run), "--episodes", str(args.episodes),
                    "--env", ENV]
        start = time.time()
        subprocess.run(train, check=train[1] != "--resume")  # a finished run says so: evaluate
        wall = round(time.time() - start, 1)
        subprocess.run(evaluate, check=True, stdout=subprocess.DEVNULL)
        ev = json.loads((run / "eval.json").read_text())
        row = {"game": GAME, "config": args.name, "seed": seed,
               "commands": [" ".join(["pgrad-train", *train[1:]]),
                            " ".join(["pgrad-evaluate", *evaluate[1:]])],
                "train_wall_s": wall, "games": ev["games"], "episodes": args.episodes}
        out.write_text(json.dumps(row, indent=1) + "\n")
        print(out.name, json.dumps(ev["games"]["random"]), flush=True)
    rows = [json.loads((HERE / f"self_play_{GAME}_{args.name}_s{s}.json").read_text())
            for s in args.seeds]
    summary: dict = {"config": config, "seeds": args.seeds, "steps": args.steps,
                     "episodes": args.episodes}
    for opponent in ("random", "anchor"):
        for seat in ("first", "second"):
            for what in ("win", "draw", "loss"):
                x = [r["games"][opponent][seat][what] for r in rows]
                summary[f"{opponent}_{seat}_{what}"] = {"mean": sum(x) / len(x), "min": min(x),
                                                        "max": max(x)}
    (HERE / f"self_play_{GAME}_{args.name}_summary.json").write_text(
        json.dumps(summary, indent=1) + "\n")
    print({k: round(v["mean"], 3) for k, v in summary.items() if k.endswith("_win")})


if __name__ == "__main__":
    main()
