"""Replays the late fall on CartPoleNoVel-v1: from a save of a policy at 500
(``fall_diagnostics.py --saves``), train on unchanged with the run's own schedule (budget 100k)
to ``--until``, evaluating greedily every ``--every`` env steps: does the same state fall again?

    PYTHONPATH=. python docs/benchmarks/memory/fall_replay.py SAVE OUT.json [--until 70000]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import agents
import pgrad

BUDGET = 100_000  # the run's: lr and clip anneal linearly to 0 over it


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("save")
    ap.add_argument("out")
    ap.add_argument("--until", type=int, default=70_000)
    ap.add_argument("--every", type=int, default=2560)
    args = ap.parse_args()
    agent = agents.load(args.save)
    rows: list[dict] = []
    start = int(agent.env_steps)
    nxt = [start]

    def on_update(loop) -> bool:
        step = int(agent.env_steps)
        if step >= nxt[0]:
            nxt[0] += args.every
            res = pgrad.evaluate(agent, episodes=10, deterministic=True, seed=1000)
            rows.append({"step": step, "greedy": float(res["return_mean"]),
                         "rolling20": loop.stats.rolling_return(),
                         "clip_fraction": float(loop.metrics["clip_fraction"]),
                         "approx_kl": float(loop.metrics["approx_kl"])})
            print(rows[-1], flush=True)
        return step < args.until

    agent.learn(BUDGET - start, callbacks=on_update, progress=False)
    Path(args.out).write_text(json.dumps({"save": args.save, "rows": rows}, indent=1))
    agent.close()


if __name__ == "__main__":
    main()
