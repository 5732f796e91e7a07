"""One-seed screens of self-play settings on connect four: one training run per setting, the
greedy learner evaluated against the uniform random legal player (``games`` per seat) every
``--every`` env steps; each run's curve is written into ``--out`` (a JSON holding every screen
run so far; a name already there is not run again).

    python docs/multiagent/screen_self_play.py NAME '{"hidden": [256, 256]}' \
        [--steps 300000] [--every 100000] [--seed 0] [--games 300] [--out FILE]

The settings in the JSON go on top of the best measured ones (``BASE``: the
``mix25_mb16_lr1e-3`` configuration of ``self_play_games.py``, the 3-seed runner beside it).
"""
import argparse
import json
import time
from pathlib import Path

import yaml
from self_play_games import CONFIGS

ENV = "pettingzoo.classic.connect_four_v3:env"
#: ``key=value`` settings as pgrad-train's ``--set`` reads them (values in YAML).
BASE = {k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in CONFIGS["mix25_mb16_lr1e-3"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name")
    parser.add_argument("settings", help="a JSON object of settings on top of BASE")
    parser.add_argument("--steps", type=int, default=300_000)
    parser.add_argument("--every", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--games", type=int, default=300)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"
                                             / "self_play_connect_four_v3_screens2_s0.json"))
    args = parser.parse_args()
    out = Path(args.out)
    table = json.loads(out.read_text()) if out.exists() else {
        "what": f"one-seed screens on connect_four_v3 ({Path(__file__).name}): the greedy "
                "learner's win rate against the uniform random legal player at each point of "
                "one training run; settings on top of BASE", "base": BASE, "runs": {}}
    if args.name in table["runs"]:
        print(f"{args.name}: already in {out}")
        return

    import agents

    hp = {**BASE, **json.loads(args.settings)}
    if isinstance(hp.get("hidden"), list):
        hp["hidden"] = tuple(hp["hidden"])
    agent = agents.make("ippo", ENV, seed=args.seed, **hp)
    curve, start, done = [], time.time(), 0
    try:
        while done < args.steps:
            agent.learn(min(args.every, args.steps - done), progress=False)
            done = int(agent.env_steps)
            games = agent.evaluate_team(args.games)["games"]["random"]
            point = {"steps": done, "wall": round(time.time() - start),
                     "first": games["first"]["win"], "second": games["second"]["win"]}
            curve.append(point)
            print(args.name, point, flush=True)
    finally:
        agent.close()
    if out.exists():  # another screen may have written it meanwhile
        table = json.loads(out.read_text())
    table["runs"][args.name] = {"settings": json.loads(args.settings), "seed": args.seed,
                                "games_per_seat": args.games, "curve": curve}
    out.write_text(json.dumps(table, indent=1) + "\n")


if __name__ == "__main__":
    main()
