"""Diagnostic: Stable-Baselines3 PPO on Hopper-v5 with rl-zoo's Hopper settings, 1M steps, then a
deterministic 20-episode evaluation (obs normalised with the training statistics)."""
import json, sys, time
import numpy as np, torch, gymnasium as gym
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize
torch.set_num_threads(1)
seed = int(sys.argv[1]); steps = int(sys.argv[2])
env = VecNormalize(make_vec_env("Hopper-v5", n_envs=1, seed=seed), gamma=0.999)
model = PPO("MlpPolicy", env, batch_size=32, n_steps=512, gamma=0.999, learning_rate=9.80828e-05,
            ent_coef=0.00229519, clip_range=0.2, n_epochs=5, gae_lambda=0.99, max_grad_norm=0.7,
            vf_coef=0.835671, seed=seed, device="cpu",
            policy_kwargs=dict(log_std_init=-2, ortho_init=False, activation_fn=torch.nn.ReLU,
                               net_arch=dict(pi=[256, 256], vf=[256, 256])))
t = time.time(); model.learn(steps); wall = time.time() - t
env.training = False; env.norm_reward = False
ev = gym.make("Hopper-v5"); rets = []
for i in range(20):
    o, _ = ev.reset(seed=10000 + seed + i); done = False; R = 0.0
    while not done:
        a, _ = model.predict(env.normalize_obs(o[None]), deterministic=True)
        o, r, term, trunc, _ = ev.step(a[0]); R += r; done = term or trunc
    rets.append(R)
print(json.dumps({"seed": seed, "steps": steps, "wall_s": wall, "eval_mean": float(np.mean(rets)),
                  "eval_std": float(np.std(rets))}))
