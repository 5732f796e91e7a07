"""Reference: sb3-contrib RecurrentPPO with rl-zoo's ppo_lstm entry (CartPoleNoVel-v1 or
PendulumNoVel-v1, the same velocity-masked envs pgrad registers), then a deterministic
10-episode evaluation carrying the LSTM state (obs normalised with the frozen training stats).

    pip install -c constraints.txt -e '.[bench]'   # sb3-contrib 2.9.2, stable-baselines3 2.9.2
    PYTHONPATH=. python docs/benchmarks/memory/sb3c_ppo_lstm.py ENV SEED OUT.json

Writes the training episodes (step, return) and the evaluation as JSON.
"""
import json
import sys
import time

import gymnasium as gym
import numpy as np
import sb3_contrib
import stable_baselines3
import torch
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.utils import LinearSchedule
from stable_baselines3.common.vec_env import VecNormalize

from pgrad.rl.envs import novel as novel_envs
torch.set_num_threads(1)
novel_envs.register()
env_id, seed, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lin = lambda x: LinearSchedule(x, 0.0, 1.0)  # noqa: E731  rl-zoo's lin_X
arch = dict(ortho_init=False, activation_fn=torch.nn.ReLU, lstm_hidden_size=64,
            enable_critic_lstm=True, net_arch=dict(pi=[64], vf=[64]))
if env_id == "CartPoleNoVel-v1":    # rl-zoo hyperparams/ppo_lstm.yml, "Tuned"
    n_envs, steps, gamma = 8, 100_000, 0.98
    hp = dict(n_steps=32, batch_size=256, gae_lambda=0.8, gamma=gamma, n_epochs=20, ent_coef=0.0,
              learning_rate=lin(1e-3), clip_range=lin(0.2))
else:                               # PendulumNoVel-v1
    n_envs, steps, gamma = 4, 100_000, 0.9
    hp = dict(n_steps=1024, gae_lambda=0.95, gamma=gamma, n_epochs=10, ent_coef=0.0,
              learning_rate=1e-3, clip_range=0.2, use_sde=True, sde_sample_freq=4)


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


env = VecNormalize(make_vec_env(env_id, n_envs=n_envs, seed=seed), gamma=gamma)
model = RecurrentPPO("MlpLstmPolicy", env, seed=seed, device="cpu", policy_kwargs=arch, **hp)
episodes = Episodes()
t = time.time()
model.learn(steps, callback=episodes)
wall = time.time() - t
env.training = False
ev = gym.make(env_id)
returns = []
for i in range(10):
    o, _ = ev.reset(seed=10_000 + seed + i)
    state, start, done, total = None, np.ones((1,), bool), False, 0.0
    while not done:
        a, state = model.predict(env.normalize_obs(o[None]), state=state, episode_start=start,
                                 deterministic=True)
        o, r, term, trunc, _ = ev.step(a[0])
        total += float(r)
        start, done = np.zeros((1,), bool), term or trunc
    returns.append(total)
with open(out, "w") as f:
    json.dump({"library": "sb3-contrib RecurrentPPO", "sb3_contrib": sb3_contrib.__version__,
               "stable_baselines3": stable_baselines3.__version__, "torch": torch.__version__,
               "env": env_id, "seed": seed,
               "steps": steps, "wall_s": wall, "eval_mean": float(np.mean(returns)),
               "eval_std": float(np.std(returns)), "eval_returns": returns,
               "episodes": episodes.rows}, f)
print(json.dumps({"seed": seed, "eval_mean": float(np.mean(returns)), "wall_s": wall}))
