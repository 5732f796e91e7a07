"""Reproduces the learning-targets table in docs/agents.md.

Each row trains one agent on one env for several seeds, one run at a time, and reports the env
steps and wall seconds to reach the target (mean return of the last 20 training episodes), or
what it reached within the budget; some rows add a deterministic evaluation of the policy at
the end of training (at the target, or at the budget).

    python scripts/learning_targets.py                      # every row (hours)
    python scripts/learning_targets.py --rows a2c-cartpole  # one row
    python scripts/learning_targets.py --rows a2c-cartpole --seeds 0 1 2 --set n_steps=8

Prints one JSON object per run and a markdown table at the end. The hyperparameters of each row
are the agent's tuned entry for the env (pgrad_app/configs/AGENT.yaml, the rl-zoo-style tables
that train.py and benchmark.py use too); the rows here add the budget and the target. For the
multi-seed final-evaluation benchmark, see scripts/benchmark.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pgrad_app.quiet  # noqa: E402,F401,I001  (silences TensorFlow first)
import agents  # noqa: E402
from pgrad_app import hyperparams  # noqa: E402

#: name -> (agent, env, max env steps, target last-20 training mean, eval episodes)
ROWS: dict[str, tuple[str, str, int, float, int]] = {
    "a2c-cartpole": ("a2c", "CartPole-v1", 150_000, 475.0, 0),
    "reinforce-cartpole": ("reinforce", "CartPole-v1", 300_000, 475.0, 0),
    "a2c-acrobot": ("a2c", "Acrobot-v1", 500_000, -100.0, 10),
    "a2c-lunarlander": ("a2c", "LunarLander-v3", 300_000, 100.0, 10),
    "a2c-pendulum": ("a2c", "Pendulum-v1", 300_000, -200.0, 10),
    "a2c-invertedpendulum": ("a2c", "InvertedPendulum-v5", 300_000, 1000.0, 10),
}


#: Rows whose target is a deterministic evaluation after the whole budget, not a training mean.
FULL_BUDGET = ("a2c-lunarlander",)


def row_hyperparameters(row: str) -> dict:
    """The tuned hyperparameters of a row's agent on its env ({} if the table has none)."""
    agent_name, env_id = ROWS[row][:2]
    found = hyperparams.tuned(agent_name, env_id)
    return dict(found[0]) if found else {}


def evaluate(agent, env_id: str, episodes: int, seed: int) -> float:
    """Mean undiscounted return of the deterministic policy over ``episodes`` episodes."""
    import gymnasium as gym

    env = gym.make(env_id)
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=10_000 + seed * 100 + i)
        total, done = 0.0, False
        while not done:
            action = agent.act(np.asarray(obs)[None], deterministic=True)[0]
            obs, r, term, trunc, _ = env.step(action)
            total += float(r)
            done = term or trunc
        returns.append(total)
    env.close()
    return float(np.mean(returns))


def run(row: str, seed: int, overrides: dict) -> dict:
    agent_name, env_id, budget, target, eval_eps = ROWS[row]
    cls = agents.get(agent_name)
    cfg = cls.Config(**{**row_hyperparameters(row), **overrides})
    agent = cls(cfg, env_id=env_id, seed=seed)
    before = evaluate(agent, env_id, eval_eps, seed) if eval_eps else None  # untrained policy
    returns: list[float] = []
    solved_at, solved_wall = None, None
    start = time.perf_counter()
    while agent.env_steps < budget:
        info = agent.step()
        for step, ret, _ in info["episodes"]:
            returns.append(ret)
            if solved_at is None and len(returns) >= 20 and np.mean(returns[-20:]) >= target:
                solved_at, solved_wall = step, time.perf_counter() - start
        if solved_at is not None and row not in FULL_BUDGET:  # stop at the target
            break
    wall = time.perf_counter() - start
    out = {
        "row": row, "seed": seed, "solved": solved_at is not None, "steps_to_target": solved_at,
        "wall_to_target_s": None if solved_wall is None else round(solved_wall, 1),
        "env_steps": agent.env_steps, "wall_s": round(wall, 1),
        "last20_mean": round(float(np.mean(returns[-20:])), 1) if returns else None,
        "overrides": overrides,
    }
    if eval_eps:
        out["eval_untrained"] = round(before, 1)
        out["eval_mean"] = round(evaluate(agent, env_id, eval_eps, seed), 1)
    agent.close()
    return out


def rollout_ratio(repeats: int = 7, vector_steps: int = 400) -> dict:
    """Collection speed / raw random stepping of the same 8-env CartPole vector env.

    Interleaved repeats, median of per-repeat ratios. Also measures the naive alternative (one
    ``tf.function`` policy call per env step) to show what the numpy mirror buys.
    """
    import tensorflow as tf

    agent = agents.get("a2c")(agents.get("a2c").Config(num_envs=8), "CartPole-v1", seed=0)
    envs, rng = agent.collector.envs, np.random.default_rng(0)
    net, head = agent.net, agent.head

    @tf.function
    def tf_act(obs, seed):
        dist = head.distribution(net.params(obs))
        return dist.sample(seed=seed), dist.log_prob(dist.sample(seed=seed))

    def naive_fn(obs):
        a, lp = tf_act(tf.constant(obs), tf.constant([0, 1]))
        a = a.numpy()
        return a, head.to_env(a), lp.numpy(), None

    def timed(fn):
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    policy_fn = agent.acting_fn(rng)
    agent.collector.collect(naive_fn, 5)  # trace
    ratios, naive = [], []
    for _ in range(repeats):
        raw = timed(lambda: [envs.step(rng.integers(0, 2, 8)) for _ in range(vector_steps)])
        ours = timed(lambda: agent.collector.collect(policy_fn, vector_steps))
        slow = timed(lambda: agent.collector.collect(naive_fn, vector_steps))
        ratios.append(raw / ours)
        naive.append(raw / slow)
    agent.close()
    return {"rollout_ratio": round(float(np.median(ratios)), 2),
            "naive_tf_per_step_ratio": round(float(np.median(naive)), 2),
            "raw_steps_per_s": round(8 * vector_steps / raw)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="*", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override (value parsed as JSON, else a string)")
    parser.add_argument("--rollout-ratio", action="store_true",
                        help="only measure rollout speed against raw env stepping")
    args = parser.parse_args()
    if args.rollout_ratio:
        print(json.dumps(rollout_ratio()))
        return
    overrides = {}
    for pair in args.set:
        key, value = pair.split("=", 1)
        try:
            overrides[key] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key] = value
    results = []
    for row in args.rows:
        for seed in args.seeds:
            res = run(row, seed, overrides)
            print(json.dumps(res), flush=True)
            results.append(res)
    print("\n| row | seed | target reached at (steps) | wall to target (s) | last-20 mean "
          "| eval (untrained -> trained) |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['row']} | {r['seed']} | {r['steps_to_target'] or 'not reached'} | "
              f"{r['wall_to_target_s'] or '-'} | {r['last20_mean']} | "
              f"{r.get('eval_untrained', '-')} -> {r.get('eval_mean', '-')} |")


if __name__ == "__main__":
    main()
