"""Does a token-task policy's first answer token depend on the prompt? Samples that token
``--samples`` times for each of ``--prompts`` prompts and prints the mean (and largest) total
variation distance between the prompts' distributions, and the tokens drawn more than 2% of
the time. A policy that ignores the prompt reads sampling noise alone: about 0.09 for a uniform
choice among 10 tokens at 300 samples.

    python docs/sequences/results/first_token.py RUN_DIR [--prompts 6] [--samples 300] [--seed 7]
"""
import argparse
from itertools import combinations
from pathlib import Path

import gymnasium as gym
import numpy as np
import yaml

import agents
from pgrad.rl.tokens import register


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run")
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    register()
    agent = agents.load(args.run)
    config = yaml.safe_load((Path(args.run) / "config.yaml").read_text())
    env = gym.make(config["env"], **(config.get("env_kwargs") or {}))
    vocab = int(env.action_space.n)
    rng = np.random.default_rng(args.seed)
    dists = []  # [prompts, V]: each prompt's empirical first-token distribution
    for _ in range(args.prompts):
        obs, _ = env.reset(seed=int(rng.integers(2**31)))
        tokens = [int(agent.predict(obs, deterministic=False)[0]) for _ in range(args.samples)]
        dists.append(np.bincount(tokens, minlength=vocab) / args.samples)
    tv = [0.5 * np.abs(p - q).sum() for p, q in combinations(dists, 2)]
    drawn = np.flatnonzero(np.mean(dists, axis=0) > 0.02).tolist()
    print(f"total variation between prompts' first-token distributions: mean {np.mean(tv):.3f}, "
          f"max {max(tv):.3f}; tokens drawn > 2%: {drawn}")


if __name__ == "__main__":
    main()
