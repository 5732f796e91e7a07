"""sb3-contrib's TRPO beside pgrad's on MuJoCo at 1M steps: rl-zoo's hyperparameters
(hyperparams/trpo.yml, the same values pgrad_app/config/hyperparams/trpo.yaml holds in pgrad's
names), resumable: a checkpoint (model, VecNormalize statistics, step count) every 50k steps,
and a run that finds one continues from it. At the end, 20 deterministic episodes with the
final policy (the observation statistics frozen), as the pgrad rows are evaluated; one JSON per
run here, ``sb3c_trpo__ENV__seedS.json`` (``sb3c_trpo_kl0.04__...`` for a ``--target-kl 0.04``
variant). Run under an interpreter with sb3-contrib and gymnasium[mujoco] (not pgrad's):

    pip install torch sb3-contrib "gymnasium[mujoco]"   # (torch's CPU index makes it smaller)
    python docs/benchmarks/trpo_mujoco/sb3c_trpo.py Hopper-v5 0 [--ckpt DIR] [--target-kl X]
"""
import argparse
import json
import time
from pathlib import Path

HERE = Path(__file__).parent
TOTAL = 1_000_000
EVERY = 50_000
#: rl-zoo hyperparams/trpo.yml for HalfCheetah/Hopper/Walker2d (v4), sb3-contrib's names;
#: target_kl is per env (``zoo_settings``): 0.04 for HalfCheetah, sb3-contrib's 0.01 otherwise.
ZOO = {"n_steps": 1024, "batch_size": 128, "gamma": 0.99, "gae_lambda": 0.95,
       "cg_max_steps": 25, "cg_damping": 0.1, "n_critic_updates": 20, "learning_rate": 1e-3,
       "sub_sampling_factor": 1}


def zoo_settings(env_id: str, target_kl: float | None = None) -> dict:
    """rl-zoo's settings for ``env_id``; ``target_kl`` overrides the env's (a variant run)."""
    if target_kl is None:
        target_kl = 0.04 if env_id.startswith("HalfCheetah") else 0.01
    return {**ZOO, "target_kl": target_kl}


def main() -> None:
    import gymnasium as gym
    import numpy as np
    import torch
    from sb3_contrib import TRPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    parser = argparse.ArgumentParser()
    parser.add_argument("env")
    parser.add_argument("seed", type=int)
    parser.add_argument("--ckpt", default="runs/sb3c_trpo")
    parser.add_argument("--total", type=int, default=TOTAL, help="env steps (a smoke test)")
    parser.add_argument("--out", default=str(HERE), help="where the JSON goes")
    parser.add_argument("--target-kl", type=float, default=None,
                        help="a variant's KL bound (default: rl-zoo's for the env)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    settings = zoo_settings(args.env, args.target_kl)
    variant = "" if args.target_kl is None else f"_kl{args.target_kl:g}"
    ckpt = Path(args.ckpt) / f"{args.env}__seed{args.seed}{variant}"
    ckpt.mkdir(parents=True, exist_ok=True)
    venv = VecNormalize(make_vec_env(args.env, n_envs=2, seed=args.seed))
    model_file, stats_file = ckpt / "model.zip", ckpt / "vecnormalize.pkl"
    if model_file.exists() and stats_file.exists():  # resume
        venv = VecNormalize.load(str(stats_file), make_vec_env(args.env, n_envs=2,
                                                                 seed=args.seed + 1000))
        model = TRPO.load(str(model_file), env=venv, device="cpu")
    else:
        model = TRPO("MlpPolicy", venv, seed=args.seed, device="cpu", **settings)
    start = time.time()
    while model.num_timesteps < args.total:
        model.learn(min(EVERY, args.total - model.num_timesteps), reset_num_timesteps=False,
                    progress_bar=False)
        model.save(str(model_file))  # model.zip is written whole by zipfile into a new file
        venv.save(str(stats_file))
        print(f"{args.env} seed {args.seed}: {model.num_timesteps:,} steps", flush=True)
    venv.training, venv.norm_reward = False, False
    returns = []
    env = gym.make(args.env)
    for episode in range(20):
        obs, _ = env.reset(seed=10_000 + episode)
        done, total = False, 0.0
        while not done:
            action, _ = model.predict(venv.normalize_obs(obs[None]), deterministic=True)
            obs, reward, term, trunc, _ = env.step(action[0])
            total += float(reward)
            done = term or trunc
        returns.append(total)
    row = {"env": args.env, "seed": args.seed, "steps": int(model.num_timesteps),
           "eval_mean": float(np.mean(returns)), "eval_std": float(np.std(returns)),
           "hyperparameters": settings, "n_envs": 2, "normalize": True,
           "wall_s_last_call": round(time.time() - start, 1)}
    out = Path(args.out) / f"sb3c_trpo{variant}__{args.env}__seed{args.seed}.json"
    out.write_text(json.dumps(row, indent=1))
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
