"""PPO with shared parameters (IPPO) on MPE simple_spread_v3 through agent rows, against the
uniform random policy: the team return (the mean over the agents of each agent's return in a
25-step episode) as training goes.

    .venv/bin/python docs/multiagent/ippo_spread.py --steps 100000 --out /tmp/ippo_spread.json

Writes ``{"random": {...}, "curve": [[env_step, team_return], ...], "final": {...}}``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def random_team_return(episodes: int, seed: int) -> dict:
    """Mean and std of the team return of the uniform random policy over ``episodes``."""
    from mpe2 import simple_spread_v3

    env = simple_spread_v3.parallel_env()
    rng = np.random.default_rng(seed)
    teams = []
    for ep in range(episodes):
        env.reset(seed=seed + ep)
        total = dict.fromkeys(env.possible_agents, 0.0)
        while env.agents:
            _, rew, _, _, _ = env.step({a: int(rng.integers(5)) for a in env.agents})
            for a, r in rew.items():
                total[a] += r
        teams.append(float(np.mean(list(total.values()))))
    return {"mean": float(np.mean(teams)), "std": float(np.std(teams)), "episodes": episodes}


def greedy_team_return(agent, episodes: int, seed: int) -> dict:
    """The trained policy's team return, acting greedily, on fresh episodes."""
    from mpe2 import simple_spread_v3

    env = simple_spread_v3.parallel_env()
    teams = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=10_000 + seed + ep)
        total = dict.fromkeys(env.possible_agents, 0.0)
        while env.agents:
            names = list(env.agents)
            acts = agent.act(np.stack([obs[a] for a in names]), deterministic=True)
            obs, rew, _, _, _ = env.step({a: int(x) for a, x in zip(names, acts)})
            for a, r in rew.items():
                total[a] += r
        teams.append(float(np.mean(list(total.values()))))
    return {"mean": float(np.mean(teams)), "std": float(np.std(teams)), "episodes": episodes}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--copies", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="ippo_spread.json")
    args = parser.parse_args()

    from mpe2 import simple_spread_v3

    import agents
    from pgrad.rl import multiagent

    out: dict = {"random": random_team_return(200, args.seed), "steps": args.steps,
                 "copies": args.copies, "seed": args.seed}
    hp = dict(n_steps=50, epochs=10, minibatch_size=300, learning_rate=7e-4, ent_coef=0.01,
              gamma=0.99, gae_lambda=0.95)
    out["hyperparameters"] = hp
    envs = multiagent.make_agent_rows(simple_spread_v3.parallel_env, args.copies)
    agent = multiagent.use_agent_rows(agents.make("ppo", envs, seed=args.seed, **hp))
    n = envs.n_agents
    curve, t0 = [], time.monotonic()
    while agent.env_steps < args.steps:
        info = agent.step()
        returns = [r for _, r, _ in info["episodes"]]  # one per agent: their mean is the team's
        if returns:
            curve.append([info["env_steps"], float(np.mean(returns)), len(returns) // n])
    out["wall_s"] = time.monotonic() - t0
    out["curve"] = curve
    last = [r for _, r, _ in curve[-10:]]
    out["final_training"] = float(np.mean(last))
    out["final_greedy"] = greedy_team_return(agent, 50, args.seed)
    agent.close()
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({k: v for k, v in out.items() if k != "curve"}, indent=1))


if __name__ == "__main__":
    main()
