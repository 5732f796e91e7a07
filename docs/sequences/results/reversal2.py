"""The grpo/rloo table of docs/sequences/agents.md: 2-digit reversal with partial credit, 100k
tokens, 3 seeds per variant, greedy evaluation on 200 episodes; writes reversal2.json here.

    python docs/sequences/results/reversal2.py
"""
import json
import sys
import time
from pathlib import Path

import gymnasium as gym

import agents
import pgrad
from pgrad.rl.tokens import register

register()
OUT = Path(__file__).with_name("reversal2.json")
VARIANTS = {"grpo (dapo)": ("grpo", {}), "grpo (grpo)": ("grpo", {"loss_type": "grpo"}),
            "dr_grpo": ("grpo", {"loss_type": "dr_grpo", "scale_rewards": "none",
                                 "max_completion_length": 3}),
            "rloo": ("rloo", {"group_size": 8})}
results = json.loads(OUT.read_text()) if OUT.exists() else {}
for label, (name, options) in VARIANTS.items():
    for seed in (0, 1, 2):
        key = f"{label} seed {seed}"
        if key in results:
            continue
        agent = agents.make(name, lambda: gym.make("pgrad/Reversal-v0", min_digits=2,
                                                   max_digits=2, shaping=True),
                            seed=seed, num_envs=32, d_model=32, num_layers=1, **options)
        start = time.time()
        agent.learn(100_000, progress=False)
        wall = time.time() - start
        result = pgrad.evaluate(agent, episodes=200)
        results[key] = {"variant": label, "seed": seed, "tokens": agent.env_steps,
                        "greedy_return": result["return_mean"], "wall_s": round(wall, 1)}
        agent.close()
        OUT.write_text(json.dumps(results, indent=1))
        print(key, results[key], flush=True, file=sys.stderr)
