"""What the update of a connect-four self-play run tells its learner where a block is needed:
collects training rollouts of the run's policy (its own sampling, opponents as set on the
command line) and, at each learner decision where the opponent threatens an immediate win and
the learner has none, the one-step advantage ``r + gamma V(s') - V(s)`` under the run's critic,
split by whether the learner blocked.

    .venv/bin/python docs/multiagent/c4_block_signal.py RUN --random-prob 0 --tactics-prob 1

Prints the count and mean advantage of blocks and of misses, and the critic's mean value at
those decisions against all others (the critic sees the threat if it is lower there).
"""

from __future__ import annotations

import argparse

import numpy as np

import agents
from pgrad.rl.multiagent.tactics import LINE_GAMES

ENV = "pettingzoo.classic.connect_four_v3:env"
GAME = LINE_GAMES["connect_four_v3"]


def block_signal(agent, rollouts: int, gamma: float) -> dict:
    advantages: dict[str, list] = {"blocked": [], "missed": []}
    values: dict[str, list] = {"threat": [], "other": []}
    for _ in range(rollouts):
        traj = agent._rollout()[0]  # [T, 2 B], compacted: each row's live steps first
        live = traj.mask > 0
        obs = np.asarray(traj.observations)
        V = agent.net.value(obs.reshape(-1, obs.shape[-1]).astype(np.float32)).numpy()
        V = V.reshape(live.shape)
        actions = np.asarray(traj.actions).astype(int)
        T, B = live.shape
        for b in range(B):
            for k in np.flatnonzero(live[:, b]):
                legal = traj.action_mask[k, b]
                board = GAME.board(obs[k, b])
                if GAME.winning_moves(board, 1, legal).size:
                    continue
                threats = GAME.winning_moves(board, 2, legal).tolist()
                values["threat" if threats else "other"].append(V[k, b])
                if not threats:
                    continue
                if traj.terminated[k, b]:
                    ahead = 0.0
                elif traj.truncated[k, b] or k + 1 >= T or not live[k + 1, b]:
                    continue  # cut by the rollout's end: no next decision in this rollout
                else:
                    ahead = gamma * V[k + 1, b]
                kind = "blocked" if actions[k, b] in threats else "missed"
                advantages[kind].append(traj.rewards[k, b] + ahead - V[k, b])
    return {**{k: len(v) for k, v in advantages.items()},
            **{f"{k}_advantage": float(np.mean(v)) if v else None
               for k, v in advantages.items()},
            **{f"value_{k}": float(np.mean(v)) for k, v in values.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a self-play run directory of connect four")
    parser.add_argument("--random-prob", type=float, default=0.0)
    parser.add_argument("--tactics-prob", type=float, default=1.0)
    parser.add_argument("--rollouts", type=int, default=4)
    args = parser.parse_args()
    agent = agents.load(args.run, env_id=ENV, random_prob=args.random_prob,
                        tactics_prob=args.tactics_prob)
    try:
        out = block_signal(agent, args.rollouts, float(agent.cfg.gamma))
    finally:
        agent.close()
    print(", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                    for k, v in out.items()))


if __name__ == "__main__":
    main()
