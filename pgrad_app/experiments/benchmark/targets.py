"""The learning targets of docs/agents.md: env steps (and wall seconds) to a solve criterion.

Each row trains one agent on one env for several seeds, one run at a time, with ``agent.learn``
and the same callbacks as every other run (``StopAtReturn`` at the row's target: the mean return
of the last 20 training episodes), and reports the env steps and wall seconds to reach the
target or what it reached within the budget. Rows with evaluation episodes also evaluate the
policy deterministically before training and at the end (``pgrad.evaluate``, the evaluation
protocol of :data:`pgrad.rl.evaluation.evaluate_policy.EVAL_SEED_OFFSET`). The hyperparameters of
each row are
the agent's tuned entry for the env (``pgrad_app/config/hyperparams/AGENT.yaml``); a row adds the
budget and the target. The command line is ``python scripts/learning_targets.py``
(:mod:`pgrad_app.cli.targets`).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from agents.learning import says_stop
from pgrad_app.config import tuned

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
    entry = tuned.lookup(agent_name, env_id)
    return dict(entry.hyperparameters) if entry is not None else {}


class _Solved:
    """A callback noting when the last-20 training mean first reached ``target``; with ``stop``
    it also stops the run there (``StopAtReturn``'s criterion, kept for the report)."""

    name = "target"

    def __init__(self, target: float, stop: bool):
        from agents.callbacks import StopAtReturn

        self.rule, self.stop = StopAtReturn(target), stop
        self.at: int | None = None
        self.wall: float | None = None
        self.start = time.perf_counter()

    def __call__(self, loop) -> bool | None:
        if self.at is None and says_stop(self.rule.on_update(loop)):
            self.at, self.wall = loop.env_steps, time.perf_counter() - self.start
        return False if (self.stop and self.at is not None) else None


def run(row: str, seed: int, overrides: dict) -> dict[str, Any]:
    """One seed of one row; a JSON-ready dict (see the module docstring)."""
    import agents
    import pgrad
    from pgrad.rl.evaluation.evaluate_policy import eval_seed
    from pgrad_app.config.settings import build

    agent_name, env_id, budget, target, eval_eps = ROWS[row]
    cls = agents.get(agent_name)
    cfg = build(cls.Config, {**row_hyperparameters(row), **overrides},
                {key: f"--set {key}" for key in overrides})
    agent = cls(cfg, env_id=env_id, seed=seed)
    try:
        def evaluate() -> float:
            return float(pgrad.evaluate(agent, env_id=env_id, episodes=eval_eps,
                                        seed=eval_seed(seed))["return_mean"])

        before = evaluate() if eval_eps else None  # the untrained policy
        solved = _Solved(target, stop=row not in FULL_BUDGET)
        returns: list[float] = []
        start = time.perf_counter()
        agent.learn(budget, callbacks=[lambda loop: returns.extend(
            r for _, r, _ in loop.new_episodes), solved], progress=False)
        wall = time.perf_counter() - start
        out = {
            "row": row, "seed": seed, "solved": solved.at is not None,
            "steps_to_target": solved.at,
            "wall_to_target_s": None if solved.wall is None else round(solved.wall, 1),
            "env_steps": agent.env_steps, "wall_s": round(wall, 1),
            "last20_mean": round(float(np.mean(returns[-20:])), 1) if returns else None,
            "overrides": overrides,
        }
        if eval_eps:
            out["eval_untrained"] = round(before, 1)
            out["eval_mean"] = round(evaluate(), 1)
    finally:
        agent.close()
    return out


def markdown(results: list[dict]) -> str:
    """The table of docs/agents.md from :func:`run`'s results."""
    lines = ["| row | seed | target reached at (steps) | wall to target (s) | last-20 mean "
             "| eval (untrained -> trained) |", "|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['row']} | {r['seed']} | {r['steps_to_target'] or 'not reached'} | "
                     f"{r['wall_to_target_s'] or '-'} | {r['last20_mean']} | "
                     f"{r.get('eval_untrained', '-')} -> {r.get('eval_mean', '-')} |")
    return "\n".join(lines)
