"""Reference: sb3-contrib MaskablePPO on MaskedOffers-v0 (the env pgrad registers), with the
settings of pgrad's PPO rows in docs/benchmarks.md (PPO's defaults, which are Stable-Baselines3's:
1 env, 2048 steps per update, 10 epochs of 64-step minibatches, Adam 3e-4), 100k env steps, then
a deterministic masked 20-episode evaluation on seeds 10000 + seed and on (as pgrad's).

    pip install -c constraints.txt -e '.[bench]'   # sb3-contrib 2.9.2, stable-baselines3 2.9.2
    PYTHONPATH=. python docs/benchmarks/masks_sb3c/masks_sb3c.py SEED OUT.json

Writes the training episodes ([env step, return]) and the evaluation as JSON; the "env steps
to R" of docs/benchmarks.md are computed from the episodes the same way as pgrad's.
"""
import json
import sys
import time

import gymnasium as gym
import numpy as np
import sb3_contrib
import stable_baselines3
import torch
from sb3_contrib import MaskablePPO
from sb3_contrib.common.wrappers import ActionMasker
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.monitor import Monitor

from pgrad.rl.envs import masked as masked_envs
ENV_ID, STEPS, EVAL_EPISODES = "MaskedOffers-v0", 100_000, 20
torch.set_num_threads(1)
masked_envs.register()
seed, out = int(sys.argv[1]), sys.argv[2]


def legal(env: gym.Env) -> np.ndarray:
    return env.unwrapped.legal_actions()


class Episodes(BaseCallback):
    """Every finished training episode as [env step, return] (the Monitor's info)."""

    def __init__(self):
        super().__init__()
        self.rows = []

    def _on_step(self):
        for info in self.locals["infos"]:
            if "episode" in info:
                self.rows.append([int(self.num_timesteps), float(info["episode"]["r"])])
        return True


def steps_to(rows: list, target: float, window: int = 20) -> int | None:
    """The env step of the first episode after which the mean of the last 20 is >= target."""
    returns = [r for _, r in rows]
    for i in range(window - 1, len(rows)):
        if np.mean(returns[i - window + 1: i + 1]) >= target:
            return rows[i][0]
    return None


env = ActionMasker(Monitor(gym.make(ENV_ID)), legal)
model = MaskablePPO("MlpPolicy", env, seed=seed, device="cpu")
episodes = Episodes()
t = time.time()
model.learn(STEPS, callback=episodes)
wall = time.time() - t
ev = gym.make(ENV_ID)
returns = []
for i in range(EVAL_EPISODES):
    o, _ = ev.reset(seed=10_000 + seed + i)
    done, total = False, 0.0
    while not done:
        a, _ = model.predict(o, deterministic=True, action_masks=legal(ev))
        o, r, term, trunc, _ = ev.step(int(a))
        total += float(r)
        done = term or trunc
    returns.append(total)
result = {"library": "sb3-contrib MaskablePPO", "sb3_contrib": sb3_contrib.__version__,
          "stable_baselines3": stable_baselines3.__version__, "torch": torch.__version__,
          "env": ENV_ID, "seed": seed, "steps": STEPS, "wall_s": wall,
          "eval_mean": float(np.mean(returns)), "eval_std": float(np.std(returns)),
          "eval_returns": returns,
          "steps_to": {str(r): steps_to(episodes.rows, r) for r in (12, 14, 15, 16)},
          "episodes": episodes.rows}
with open(out, "w") as f:
    json.dump(result, f)
print(json.dumps({k: result[k] for k in ("seed", "eval_mean", "wall_s", "steps_to")}))
