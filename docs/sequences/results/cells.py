"""Where a token-task policy is right: greedy answers' accuracy per prompt length and answer
position, for a run directory of pgrad/Reversal-v0 (3-5 digits) or pgrad/Addition-v0.

    python docs/sequences/results/cells.py RUN_DIR [--episodes 300] [--seed 123]

Prints one line per prompt length: its count, exact answers, mean answer length and the
fraction right at each answer position (a digit missing counts wrong).
"""
import argparse
from collections import defaultdict
from pathlib import Path

import gymnasium as gym
import numpy as np
import yaml

import agents
from pgrad.rl.tokens import register


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run")
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--seed", type=int, default=123)
    args = parser.parse_args()
    register()
    agent = agents.load(args.run)
    config = yaml.safe_load((Path(args.run) / "config.yaml").read_text())
    env = gym.make(config["env"], **(config.get("env_kwargs") or {}))
    rng = np.random.default_rng(args.seed)
    right, seen = defaultdict(lambda: np.zeros(8)), defaultdict(lambda: np.zeros(8))
    exact, lengths = defaultdict(int), defaultdict(list)
    for _ in range(args.episodes):
        obs, info = env.reset(seed=int(rng.integers(2**31)))
        done = False
        while not done:
            action, _ = agent.predict(obs, deterministic=True)
            obs, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        answer, written = env.unwrapped.prompt.columns["answer"], info["completion"]
        n = len(info["prompt"]) - 1  # prompt characters before "="
        exact[n] += written == answer
        lengths[n].append(len(written))
        for k, ch in enumerate(answer):
            seen[n][k] += 1
            right[n][k] += k < len(written) and written[k] == ch
    for n in sorted(seen):
        count = len(lengths[n])
        cells = right[n][seen[n] > 0] / seen[n][seen[n] > 0]
        print(f"prompt {n} chars: {count} episodes, exact {exact[n] / count:.2f}, answer length "
              f"{np.mean(lengths[n]):.2f}, right per position {np.round(cells, 2).tolist()}")


if __name__ == "__main__":
    main()
