"""Rollout workers on Ray: the same synchronous algorithm, its envs spread over processes.

``distribute(agent, workers=N)`` swaps the agent's collector for one that steps its
``num_envs`` envs on ``N`` Ray actors (``num_envs / N`` each) with a copy of the policy, sent
the new weights after every update; the update stays in this process. With one worker the run
is the in-process run exactly (same weights after the same updates: checked below); with more,
the same algorithm on the same number of envs. ``pgrad-train ... --workers N`` does this from
the command line (``--ray-address auto`` for a running cluster), ``pgrad-tune --workers N``
runs trials as Ray tasks. Workers pay off where env steps are expensive
(docs/distributed.md has the measured scaling); CartPole's 11-microsecond steps are not.

Run: ``python examples/ray_workers.py`` (A2C on CartPole-v1 with 2 workers to a rolling return of
475: a few minutes on 2 CPU cores); ``--target 30 --steps 5000`` for a smoke run. Needs
``pip install 'pgrad[ray]'``.
"""

from __future__ import annotations

import argparse
import time

# isort: off
from pgrad_app.quiet import silence  # noqa: I001

silence()  # first: TensorFlow's start-up noise off (what pgrad's commands do)
import numpy as np  # noqa: E402
import agents  # noqa: E402
import pgrad  # noqa: E402
from pgrad_app.distributed.session import ray_session  # noqa: E402
from pgrad_app.distributed.workers import distribute  # noqa: E402

# isort: on

SETTINGS = {"num_envs": 8, "n_steps": 8, "learning_rate": 1e-3}


def weights(agent) -> np.ndarray:
    """Every policy and value variable, flattened into one vector."""
    return np.concatenate([np.ravel(v.numpy()) for v in agent.net.variables])


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--target", type=float, default=475.0,
                        help="rolling training return to stop at")
    parser.add_argument("--steps", type=int, default=200_000, help="env steps to train at most")
    args = parser.parse_args(argv)

    with ray_session(num_cpus=max(2, args.workers)):  # a local Ray, shut down on exit
        # 1. One worker is the in-process algorithm: the same weights after 3 updates.
        local = agents.make("a2c", "CartPole-v1", seed=0, **SETTINGS)
        remote = distribute(agents.make("a2c", "CartPole-v1", seed=0, **SETTINGS), workers=1)
        for _ in range(3):
            local.step()
            remote.step()
        gap = float(np.max(np.abs(weights(local) - weights(remote))))
        print(f"1 worker vs in-process after 3 updates: largest weight difference {gap:.2e}")
        local.close()
        remote.close()

        # 2. Training on N workers, then a greedy evaluation in this process.
        agent = distribute(agents.make("a2c", "CartPole-v1", seed=0, **SETTINGS),
                           workers=args.workers)
        start = time.perf_counter()
        agent.learn(args.steps, callbacks=agents.callbacks.StopAtReturn(args.target),
                    progress=False)
        wall = time.perf_counter() - start
        agent.close()  # stops the actors
    result = pgrad.evaluate(agent, episodes=5)
    print(f"{args.workers} workers: {agent.env_steps} env steps in {wall:.1f} s "
          f"({agent.env_steps / wall:,.0f} steps/s); greedy return {result['return_mean']:.1f}")
    return {"gap": gap, "env_steps": float(agent.env_steps), "return_mean": result["return_mean"],
            "steps_per_s": agent.env_steps / wall}


if __name__ == "__main__":
    main()
