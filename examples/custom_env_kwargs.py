"""Train on your own environment, configured by keyword arguments.

1. Write a ``gymnasium.Env`` whose constructor takes options (here a corridor of ``length``
   cells with a ``step_cost``; the goal at the far end pays 1).
2. Register it once with ``gymnasium.register`` and give its options as ``env_kwargs``:
   ``agents.make("a2c", "Corridor-v0", env_kwargs={"length": 8})``. The agent keeps the id with
   its options (an ``EnvRecipe``), so ``pgrad.evaluate``, ``EvalCallback`` and ``agent.save``
   rebuild the same env. A factory works too, without registering:
   ``agents.make("a2c", functools.partial(Corridor, length=8))``.
3. Check it learned: the greedy policy walks straight to the goal, ``length - 1`` steps.

Run: ``python examples/custom_env_kwargs.py`` (A2C, corridor of 8 cells, a few seconds;
``--length 12`` for a longer one).
"""

from __future__ import annotations

import argparse

# isort: off
from pgrad_app.quiet import silence  # noqa: I001

silence()  # first: TensorFlow's start-up noise off (what pgrad's commands do)
import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import agents  # noqa: E402
import pgrad  # noqa: E402

# isort: on

ENV_ID = "examples/Corridor-v0"


class Corridor(gym.Env):
    """Cells ``0 .. length-1``; start at 0, actions 0 = left, 1 = right; reaching the last cell
    pays 1 and ends the episode, every other step costs ``step_cost``. Observation: the one-hot
    cell, ``[length]`` float32."""

    def __init__(self, length: int = 5, step_cost: float = 0.01):
        if int(length) < 2:
            raise ValueError(f"Corridor: length must be >= 2; got {length}.")
        self.length, self.step_cost = int(length), float(step_cost)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.length,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._cell = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.length, np.float32)
        obs[self._cell] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._cell = 0
        return self._obs(), {}

    def step(self, action):
        self._cell = min(max(self._cell + (1 if int(action) == 1 else -1), 0), self.length - 1)
        done = self._cell == self.length - 1
        return self._obs(), 1.0 if done else -self.step_cost, done, False, {}


def register() -> None:
    """Once per process; ``max_episode_steps`` makes Gymnasium truncate long episodes."""
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point=Corridor, max_episode_steps=100)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=8, help="cells in the corridor")
    parser.add_argument("--step-cost", type=float, default=0.01)
    parser.add_argument("--steps", type=int, default=30_000, help="env steps to train at most")
    args = parser.parse_args(argv)

    register()
    options = {"length": args.length, "step_cost": args.step_cost}
    agent = agents.make("a2c", ENV_ID, seed=0, env_kwargs=options, num_envs=8, n_steps=16,
                        learning_rate=3e-3)
    print(f"env {agent.env_id!r}: observation {agent.observation_space.shape}")
    optimum = 1.0 - (args.length - 2) * args.step_cost  # length - 1 steps, the last one pays 1
    # Stop once the last 20 training episodes average within 0.05 of the best return.
    agent.learn(args.steps, callbacks=agents.callbacks.StopAtReturn(optimum - 0.05),
                progress=False)
    # Evaluation builds the env from the agent's recipe: the same id with the same options.
    result = pgrad.evaluate(agent, episodes=3)
    print(f"{agent.env_steps} env steps; greedy return {result['return_mean']:.3f} "
          f"(best possible {optimum:.3f}), episode length {result['length_mean']:.0f} "
          f"(shortest {args.length - 1})")
    agent.close()
    return {"env_steps": float(agent.env_steps), "return_mean": result["return_mean"],
            "length_mean": result["length_mean"], "optimum": optimum,
            "obs_size": float(agent.observation_space.shape[0])}


if __name__ == "__main__":
    main()
