"""Tuned hyperparameters from Python: the settings ``pgrad-train`` applies, and your overrides.

``pgrad_app.config.tuned.tuned(agent, env)`` reads the rl-zoo-style table shipped with pgrad
(``pgrad_app/config/hyperparams/<agent>.yaml``): typed values (a ``lin_1e-3`` learning rate
becomes a linear schedule), checked against the agent's ``Config``, with the file they come
from. ``budget`` is the entry's ``n_timesteps``. ``pgrad-train`` applies the same entry between
the defaults and ``--config``; from Python you pass it to ``agents.make`` and override what you
like. A ``pgrad-tune`` study's best settings (``best_config.yaml``) load the same way with
``yaml.safe_load`` into keywords.

Run: ``python examples/tuned_settings.py`` (PPO on CartPole-v1 with its tuned settings for the
tuned budget, 100k steps, a few minutes; ``--steps 1000`` for a smoke run).
"""

from __future__ import annotations

import argparse

# isort: off
from pgrad_app.quiet import silence  # noqa: I001

silence()  # first: TensorFlow's start-up noise off (what pgrad's commands do)
import yaml  # noqa: E402
import agents  # noqa: E402
import pgrad  # noqa: E402
from pgrad_app.config.tuned import budget, tuned  # noqa: E402

# isort: on


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="ppo")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--steps", type=int, default=None, help="default: the tuned budget")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a tuned setting (a YAML value), e.g. --set gamma=0.99")
    args = parser.parse_args(argv)

    found = tuned(args.agent, args.env)
    if found is None:
        raise SystemExit(f"no tuned settings for {args.agent} on {args.env}")
    hyperparameters, path = found
    print(f"tuned settings for {args.agent} on {args.env} ({path.name}):")
    for key, value in sorted(hyperparameters.items()):
        print(f"  {key}: {value}")
    steps = args.steps or budget(args.agent, args.env) or 100_000

    # Overrides go on top of the tuned settings (as --config goes over the tuned table).
    settings = dict(hyperparameters)
    for item in args.set:
        key, _, value = item.partition("=")
        settings[key] = yaml.safe_load(value)
    agent = agents.make(args.agent, args.env, seed=0, **settings)
    print(f"config: {type(agent.cfg).__name__}, learning rate {agent.cfg.learning_rate}")
    agent.learn(steps, progress=False)
    result = pgrad.evaluate(agent, episodes=5)
    print(f"{agent.env_steps} env steps; greedy evaluation {result['return_mean']:.1f}")
    agent.close()
    return {"env_steps": float(agent.env_steps), "return_mean": result["return_mean"],
            "settings": float(len(hyperparameters))}


if __name__ == "__main__":
    main()
