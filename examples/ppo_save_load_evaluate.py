"""Train a PPO agent, save it, load it back and evaluate it: the Stable-Baselines3 workflow.

1. ``agents.make("ppo", env, **hyperparameters)`` and ``agent.learn(N)`` with a callback that
   stops at a mean training return.
2. ``agent.save(dir)``: networks, optimizer, normaliser statistics, counters, the exported policy.
3. ``agents.load(dir)`` restores it exactly: the same greedy actions, the same step counter, and
   ``learn`` continues from there.
4. ``pgrad.evaluate(dir)`` runs greedy episodes of the saved policy (``policy/``, a plain
   TensorFlow SavedModel that loads without pgrad).

Run: ``python examples/ppo_save_load_evaluate.py`` (CartPole-v1, up to 100k steps, about a
minute on 2 CPU cores; ``--steps 2000 --episodes 2`` for a smoke run).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

# isort: off
from pgrad_app.quiet import silence  # noqa: I001

silence()  # first: TensorFlow's start-up noise off (what pgrad's commands do)
import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import agents  # noqa: E402
import pgrad  # noqa: E402

# isort: on


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000, help="env steps to train at most")
    parser.add_argument("--episodes", type=int, default=10, help="evaluation episodes")
    parser.add_argument("--out", type=Path, default=None,
                        help="save directory (default: a new temporary one)")
    args = parser.parse_args(argv)

    # 1. Train. Keywords are fields of agents.PPOConfig; unknown ones raise a TypeError.
    agent = agents.make("ppo", "CartPole-v1", seed=0, num_envs=4, n_steps=128,
                        minibatch_size=128, epochs=4, learning_rate=1e-3)
    agent.learn(args.steps, callbacks=agents.callbacks.StopAtReturn(475), progress=False)
    print(f"trained {agent.env_steps} env steps")

    # 2. Save.
    out = args.out or Path(tempfile.mkdtemp(prefix="pgrad-ppo-"))
    agent.save(out)
    print(f"saved to {out}: {sorted(p.name for p in out.iterdir())}")

    # 3. Load: the same policy (greedy actions on a batch of observations) and counters.
    loaded = agents.load(out)
    space = gym.make("CartPole-v1").observation_space
    space.seed(0)
    obs = np.stack([space.sample() for _ in range(64)])  # [64, 4]
    same = np.array_equal(agent.predict(obs)[0], loaded.predict(obs)[0])  # (action, state)
    print(f"loaded: env_steps {loaded.env_steps}, same greedy actions on 64 observations: {same}")
    assert same and loaded.env_steps == agent.env_steps
    loaded.learn(256, progress=False)  # training continues from the saved counters
    assert loaded.env_steps > agent.env_steps
    agent.close()
    loaded.close()

    # 4. Evaluate the saved policy (episode i resets with seed + i; greedy actions).
    result = pgrad.evaluate(out, episodes=args.episodes)
    print(f"evaluation over {args.episodes} episodes: "
          f"{result['return_mean']:.1f} +- {result['return_std']:.1f}")
    return {"env_steps": float(agent.env_steps), "return_mean": result["return_mean"]}


if __name__ == "__main__":
    main()
