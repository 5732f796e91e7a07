"""Self-play on connect four (and tic-tac-toe): ``ippo`` with ``self_play=True``, 3 seeds,
through ``pgrad-train`` and ``pgrad-evaluate`` as a user runs them.

    .venv/bin/python docs/multiagent/self_play_games.py --game connect_four_v3 \
        --config lr3e-4_epochs4 --steps 200000 --episodes 500 --out docs/multiagent/results

For each seed it trains ``--steps`` env steps with the settings of ``--config``, evaluates the
greedy learner on ``--episodes`` games per opponent (a uniform random legal player, the fixed
earlier policy) and seat, and writes ``self_play_<game>_<config>_s<seed>.json`` (the commands,
the wall time, the learner's mean result over its last 2,000 training games, the evaluation's
``games``) and ``self_play_<game>_<config>_summary.json`` (mean, min and max over seeds).
``--runs DIR`` puts the runs there (default: ``--out``); ``--collect DIR`` reads runs made
already with these commands (``DIR/<game>_s<seed>`` and its ``.log``) instead of training.
``--eval-every N`` evaluates every N env steps while training (``--eval-games`` games a seat
against each opponent) and keeps the policy whose worse seat beat the random player most in
``best/``; that policy is then evaluated on ``--episodes`` games of other seeds
(:data:`HELD_OUT` + the seed), since the games it was chosen on flatter it.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

BIN = Path(sys.executable).parent
#: The first seed of the games ``best/`` is reported on (evaluations during training play
#: the run's seed + 10,000 onwards).
HELD_OUT = 50_000
#: The settings of each measured configuration (``--config``), beside ippo's defaults.
CONFIGS = {
    "lr1e-3_epochs10": ["self_play=true", "num_envs=16", "n_steps=64", "learning_rate=0.001",
                        "hidden=[128,128]"],
    "lr3e-4_epochs4": ["self_play=true", "num_envs=16", "n_steps=64", "learning_rate=0.0003",
                       "epochs=4", "hidden=[128,128]"],
    # One row in four is the learner's live move (2 seats, the learner's half of the moves):
    # num_minibatches=16 makes 4 minibatches of 128 decisions (4 gives one of 512).
    "mix25_mb16_lr1e-3": ["self_play=true", "num_envs=16", "n_steps=64", "learning_rate=0.001",
                          "epochs=4", "num_minibatches=16", "random_prob=0.25",
                          "hidden=[128,128]"],
    # Half the games against the random player, and gamma 0.9: a win now is worth much more
    # than a win later, and a loss put off worth more than a loss now (with 0.99 the greedy
    # learner missed 35-40% of its immediate wins against random, and 90% of the blocks).
    "mix50_g90_mb16_lr1e-3": ["self_play=true", "num_envs=16", "n_steps=64",
                              "learning_rate=0.001", "epochs=4", "num_minibatches=16",
                              "random_prob=0.5", "gamma=0.9", "hidden=[128,128]"],
    # the same with three games in four against the random player
    "mix75_g90_mb16_lr1e-3": ["self_play=true", "num_envs=16", "n_steps=64",
                              "learning_rate=0.001", "epochs=4", "num_minibatches=16",
                              "random_prob=0.75", "gamma=0.9", "hidden=[128,128]"],
    # Half the games against the random player, a quarter against the one-move-deep tactical
    # player (pgrad.rl.multiagent.tactics: it takes a win on the board, else blocks), which
    # punishes every open four the random player lets pass (mix75 still left 94% of the
    # needed blocks open).
    "mix50_tac25_g90_mb16_lr1e-3": ["self_play=true", "num_envs=16", "n_steps=64",
                                    "learning_rate=0.001", "epochs=4", "num_minibatches=16",
                                    "random_prob=0.5", "tactics_prob=0.25", "gamma=0.9",
                                    "hidden=[128,128]"],
    # ... with the other quarter against the tactical player too (no self-play games)
    "mix50_tac50_g90_mb16_lr1e-3": ["self_play=true", "num_envs=16", "n_steps=64",
                                    "learning_rate=0.001", "epochs=4", "num_minibatches=16",
                                    "random_prob=0.5", "tactics_prob=0.5", "gamma=0.9",
                                    "hidden=[128,128]"],
    # three games in four against the tactical player, the rest against random (no self-play
    # games): a block's advantage over a miss is largest against the tactical player
    "mix25_tac75_g90_mb16_lr1e-3": ["self_play=true", "num_envs=16", "n_steps=64",
                                    "learning_rate=0.001", "epochs=4", "num_minibatches=16",
                                    "random_prob=0.25", "tactics_prob=0.75", "gamma=0.9",
                                    "hidden=[128,128]"],
    # the tactics mix with the board CNN, the critic on its own CNN
    "mix50_tac25_g90_mb16_lr1e-3_cnn_sep": ["self_play=true", "num_envs=16", "n_steps=64",
                                            "learning_rate=0.001", "epochs=4",
                                            "num_minibatches=16", "random_prob=0.5",
                                            "tactics_prob=0.25", "gamma=0.9",
                                            "hidden=[128,128]", "encoder=board_cnn",
                                            "board_filters=[64,64]", "share_encoder=false"],
    "mix25_mb16_lr1e-3_h256": ["self_play=true", "num_envs=16", "n_steps=64",
                               "learning_rate=0.001", "epochs=4", "num_minibatches=16",
                               "random_prob=0.25", "hidden=[256,256]"],
    # The same with ippo's board CNN (pgrad.rl.multiagent.board): two 64-channel 3x3 'same'
    # convolutions over the (6, 7, 2) board, then the 128-128 MLP.
    "mix25_mb16_lr1e-3_cnn": ["self_play=true", "num_envs=16", "n_steps=64",
                              "learning_rate=0.001", "epochs=4", "num_minibatches=16",
                              "random_prob=0.25", "hidden=[128,128]", "encoder=board_cnn",
                              "board_filters=[64,64]"],
    # ... with the critic on its own CNN (share_encoder=false), as the MLP's actor and critic
    # are separate networks.
    "mix25_mb16_lr1e-3_cnn_sep": ["self_play=true", "num_envs=16", "n_steps=64",
                                  "learning_rate=0.001", "epochs=4", "num_minibatches=16",
                                  "random_prob=0.25", "hidden=[128,128]", "encoder=board_cnn",
                                  "board_filters=[64,64]", "share_encoder=false"],
    "mix25_mb16_lr3e-4_cnn_sep": ["self_play=true", "num_envs=16", "n_steps=64",
                                  "learning_rate=0.0003", "epochs=4", "num_minibatches=16",
                                  "random_prob=0.25", "hidden=[128,128]", "encoder=board_cnn",
                                  "board_filters=[64,64]", "share_encoder=false"],
}


def commands(game: str, config: str, seed: int, steps: int, run: Path, episodes: int,
             eval_every: int = 0, eval_games: int = 200) -> list[list[str]]:
    """``[train, evaluate]``, and with ``eval_every`` a third: ``best/`` evaluated on games of
    other seeds than the ones that chose it (:data:`HELD_OUT` + the seed)."""
    env = f"pettingzoo.classic.{game}:env"
    train = [str(BIN / "pgrad-train"), "--algo", "ippo", "--env", env, "--total-steps",
             str(steps), "--seed", str(seed), "--out", str(run), "--quiet"]
    for setting in CONFIGS[config]:
        train += ["--set", setting]
    evaluate = [str(BIN / "pgrad-evaluate"), str(run), "--episodes", str(episodes), "--env", env]
    if not eval_every:
        return [train, evaluate]
    train += ["--eval-every", str(eval_every), "--eval-episodes", str(eval_games)]
    best = [str(BIN / "pgrad-evaluate"), str(run / "best"), "--episodes", str(episodes), "--env",
            env, "--seed", str(HELD_OUT + seed)]
    return [train, evaluate, best]


def summary(game: str, config: str, seed: int, run: Path, cmds: list, wall: float) -> dict:
    with open(run / "episodes.csv", newline="") as f:
        results = np.array([float(r["return"]) for r in csv.DictReader(f)])
    evaluation = json.loads((run / "eval.json").read_text())
    return {"game": game, "config": config, "seed": seed,
            "commands": [" ".join([Path(c[0]).name, *c[1:]]) for c in cmds],
            "train_wall_s": round(wall, 1),
            "training_result_last_2000": float(results[-2000:].mean()),
            "games": evaluation["games"], "episodes": evaluation["episodes"],
            **_best(run)}


def _best(run: Path) -> dict:
    """``best/``'s evaluation on held-out games and the step that chose it, if it was kept."""
    if not (run / "best" / "eval.json").exists():
        return {}
    chosen = json.loads((run / "best" / "best.json").read_text())
    return {"best_step": chosen["step"], "best_score_in_training": chosen["score"],
            "best_games": json.loads((run / "best" / "eval.json").read_text())["games"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="connect_four_v3")
    parser.add_argument("--config", default="lr3e-4_epochs4", choices=sorted(CONFIGS))
    parser.add_argument("--steps", type=int, default=300_000)
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runs", type=Path, help="where the runs go (default: --out)")
    parser.add_argument("--collect", type=Path, help="runs made already: DIR/<game>_s<seed>")
    parser.add_argument("--eval-every", type=int, default=0,
                        help="evaluate every N env steps while training, keeping best/")
    parser.add_argument("--eval-games", type=int, default=200,
                        help="games per seat in each of those evaluations")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed in args.seeds:
        base = args.collect or args.runs or args.out
        base.mkdir(parents=True, exist_ok=True)
        run = base / f"{args.game}_s{seed}"
        cmds = commands(args.game, args.config, seed, args.steps, run, args.episodes,
                        args.eval_every, args.eval_games)
        if args.collect is None:
            t0 = time.monotonic()
            done = subprocess.run(cmds[0], check=True, capture_output=True, text=True)
            wall = time.monotonic() - t0
            (base / f"{args.game}_s{seed}.log").write_text(done.stdout + done.stderr)
        text = (base / f"{args.game}_s{seed}.log").read_text()
        if args.collect is None or not (run / "eval.json").exists():
            subprocess.run(cmds[1], check=True, capture_output=True)
        if len(cmds) > 2 and (args.collect is None or not (run / "best" / "eval.json").exists()):
            subprocess.run(cmds[2], check=True, capture_output=True)
        found = re.search(r"episodes in ([0-9.]+) s", text)  # the training's own wall time
        wall = float(found.group(1)) if found else wall if args.collect is None else float("nan")
        row = summary(args.game, args.config, seed, run, cmds, wall)
        name = f"self_play_{args.game}_{args.config}"
        (args.out / f"{name}_s{seed}.json").write_text(json.dumps(row, indent=1))
        rows.append(row)
    table = {}
    for prefix, key in (("", "games"), ("best_", "best_games")):
        if not all(key in r for r in rows):
            continue
        for opponent in ("random", "anchor", "tactics"):
            if not all(opponent in r[key] for r in rows):  # tactics: evaluated since Dec 7
                continue
            for seat in ("first", "second"):
                for what in ("win", "draw", "loss"):
                    values = [r[key][opponent][seat][what] for r in rows]
                    table[f"{prefix}{opponent}_{seat}_{what}"] = {
                        "mean": float(np.mean(values)), "min": float(np.min(values)),
                        "max": float(np.max(values))}
    (args.out / f"self_play_{args.game}_{args.config}_summary.json").write_text(json.dumps(
        {"config": CONFIGS[args.config], "seeds": args.seeds, "steps": args.steps,
         "episodes": args.episodes, **table},
        indent=1))


if __name__ == "__main__":
    main()
