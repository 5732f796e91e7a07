"""Continuous control with a tuned config: PPO on Pendulum-v1.

A ``Box`` action space gets a diagonal Gaussian head (``agents.make`` picks it from the space).
The tuned entry ``pgrad_app/config/hyperparams/ppo.yaml: Pendulum-v1`` is what ``pgrad-train
--agent ppo --env Pendulum-v1`` uses: ``gamma`` 0.9, a linearly decayed learning rate and
``squash: true`` (samples squashed into the bounds with tanh, log-probs corrected for it),
200k env steps; measured there at -145 (seed 0, 10 greedy episodes; the zoo's PPO: -172).

The script trains with those settings (``--set KEY=VALUE`` overrides one), then checks what
a continuous policy must do: greedy actions are the squashed mean and stay inside the bounds,
sampled ones spread around it; it prints the Gaussian's std (``train/std``) before and after.

Run: ``python examples/continuous_tuned.py`` (the tuned 200k steps: about 10 minutes on 2 CPU
cores); ``--steps 4096 --set epochs=1`` for a smoke run. The command-line equivalent:
``pgrad-train --agent ppo --env Pendulum-v1 --out runs/pendulum``.
"""

from __future__ import annotations

import argparse

# isort: off
from pgrad_app.quiet import silence  # noqa: I001

silence()  # first: TensorFlow's start-up noise off (what pgrad's commands do)
import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import yaml  # noqa: E402
import agents  # noqa: E402
import pgrad  # noqa: E402
from agents.logger import policy_std  # noqa: E402
from pgrad_app.config.tuned import budget, tuned  # noqa: E402

# isort: on

ENV = "Pendulum-v1"


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="default: the tuned budget")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a tuned setting (a YAML value), e.g. --set epochs=5")
    parser.add_argument("--episodes", type=int, default=10, help="greedy evaluation episodes")
    args = parser.parse_args(argv)

    found = tuned("ppo", ENV)
    assert found is not None, "the tuned table ships a Pendulum-v1 entry"
    settings, path = found
    for item in args.set:
        key, _, value = item.partition("=")
        settings[key] = yaml.safe_load(value)
    steps = args.steps or budget("ppo", ENV) or 200_000
    print(f"PPO on {ENV}, {steps} env steps, tuned settings from {path.name}: "
          + ", ".join(f"{k}={v}" for k, v in sorted(settings.items())))

    agent = agents.make("ppo", ENV, seed=0, **settings)
    std_before = policy_std(agent)  # exp(log_std): state-independent, learned
    agent.learn(steps, progress=False)
    std_after = policy_std(agent)

    # Greedy actions (the squashed mean) and sampled ones on the same observations.
    space = gym.make(ENV).action_space
    obs_space = gym.make(ENV).observation_space
    obs_space.seed(1)
    obs = np.stack([obs_space.sample() for _ in range(256)])  # [256, 3]
    greedy, _ = agent.predict(obs, deterministic=True)
    sampled, _ = agent.predict(obs, deterministic=False)
    inside = bool(np.all(greedy >= space.low) and np.all(greedy <= space.high)
                  and np.all(sampled >= space.low) and np.all(sampled <= space.high))
    spread = float(np.abs(sampled - greedy).mean())
    print(f"actions {greedy.shape} inside [{space.low[0]}, {space.high[0]}]: {inside}; "
          f"mean |sampled - greedy| {spread:.3f}; Gaussian std {std_before:.3f} -> "
          f"{std_after:.3f}")

    result = pgrad.evaluate(agent, episodes=args.episodes)
    print(f"{agent.env_steps} env steps; greedy return {result['return_mean']:.1f} "
          f"+- {result['return_std']:.1f} over {args.episodes} episodes")
    agent.close()
    return {"env_steps": float(agent.env_steps), "return_mean": result["return_mean"],
            "inside": float(inside), "spread": spread, "std_before": float(std_before or 0),
            "std_after": float(std_after or 0), "action_dim": float(greedy.shape[-1])}


if __name__ == "__main__":
    main()
