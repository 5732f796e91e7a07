"""What changes while recurrent PPO falls back late on CartPoleNoVel-v1 (measured, not guessed).

Trains the tuned entry (rl-zoo's ppo_lstm, ``pgrad_app/config/hyperparams/ppo.yaml``) for its
100k steps and, from ``--from`` on, logs after every update: the update's metrics (entropy,
value loss, approx-kl, clip fraction, explained variance, learning rate, clip range), the
observation normaliser's mean / var (the two visible dims) and the reward normaliser's var;
every ``--every`` env steps a greedy and a stochastic 10-episode evaluation (state carried,
normalisers frozen) and a save of the agent (``--saves DIR``); at the end, with saves, the
greedy return of the best save's weights and of the final weights under each one's observation
statistics (:func:`swapped_normalisers`).

    PYTHONPATH=. python docs/benchmarks/memory/fall_diagnostics.py SEED OUT.json \
        [--from 50000] [--every 2560] [--saves DIR]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import yaml

import agents
import pgrad
from pgrad_app.config import tuned

ENV = "CartPoleNoVel-v1"
KEYS = ("entropy", "value_loss", "approx_kl", "clip_fraction", "explained_variance",
        "learning_rate", "clip_range", "policy_loss", "grad_norm", "advantage_mean")


def evaluations(agent, episodes: int = 10) -> dict[str, float]:
    """Greedy and stochastic mean returns over ``episodes`` episodes (seeds 1000+)."""
    out = {}
    for name, greedy in (("greedy", True), ("stochastic", False)):
        res = pgrad.evaluate(agent, episodes=episodes, deterministic=greedy, seed=1000)
        out[name] = float(res["return_mean"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("seed", type=int)
    ap.add_argument("out")
    ap.add_argument("--from", dest="start", type=int, default=50_000)
    ap.add_argument("--every", type=int, default=2560)
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--saves", default=None)
    ap.add_argument("--set", action="append", default=[], help="key=value (YAML value)")
    args = ap.parse_args()
    hyper, _ = tuned.tuned("ppo", ENV)
    for item in args.set:
        key, value = item.split("=", 1)
        hyper[key] = yaml.safe_load(value)
    agent = agents.make("ppo", ENV, seed=args.seed, **hyper)
    rows: list[dict] = []
    episodes: list[tuple[int, float]] = []
    next_eval = [args.start]
    t0 = time.monotonic()

    def on_update(loop) -> None:
        episodes.extend((int(s), float(r)) for s, r, _ in loop.new_episodes)
        step = int(agent.env_steps)
        if step < args.start:
            return
        row = {"step": step, **{k: float(loop.metrics[k]) for k in KEYS if k in loop.metrics}}
        rms = agent.obs_norm.rms
        row["obs_mean"] = [float(rms.mean[0]), float(rms.mean[2])]  # cart x, pole angle
        row["obs_var"] = [float(rms.var[0]), float(rms.var[2])]
        row["reward_var"] = float(agent.reward_norm.rms.var)
        row["rolling20"] = loop.stats.rolling_return()
        if step >= next_eval[0]:
            next_eval[0] += args.every
            row.update(evaluations(agent))
            if args.saves:
                agent.save(Path(args.saves) / f"step{step}")
            print(f"{step} {time.monotonic() - t0:.0f}s {row}", flush=True)
        rows.append(row)

    agent.learn(args.steps, callbacks=on_update, progress=False)
    result = {"seed": args.seed, "hyper": {k: str(v) for k, v in hyper.items()},
              "episodes": episodes, "updates": rows}
    if args.saves:
        result["swap"] = swapped_normalisers(agent, rows, Path(args.saves))
        print("swap", result["swap"], flush=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    agent.close()


def swapped_normalisers(final, rows: list[dict], saves: Path, episodes: int = 20) -> dict:
    """Greedy returns of the best evaluated save's weights and the final weights, each with its
    own observation statistics and with the other's: separates a change of the inputs
    (normaliser drift) from a change of the weights."""
    best = max((r for r in rows if "greedy" in r), key=lambda r: (r["greedy"], r["step"]))
    peak = agents.load(saves / f"step{best['step']}")
    stats = {name: (a.obs_norm.rms.mean.copy(), a.obs_norm.rms.var.copy())
             for name, a in (("peak", peak), ("final", final))}
    out = {"peak_step": best["step"]}
    for wname, a in (("peak", peak), ("final", final)):
        for sname, (mean, var) in stats.items():
            a.obs_norm.rms.mean, a.obs_norm.rms.var = mean.copy(), var.copy()
            a.obs_norm.push()
            res = pgrad.evaluate(a, episodes=episodes, deterministic=True, seed=2000)
            out[f"weights_{wname}__stats_{sname}"] = float(res["return_mean"])
    peak.close()
    return out


if __name__ == "__main__":
    main()
