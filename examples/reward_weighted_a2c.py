"""A custom reward-weighting transform plugged into A2C: advantage-weighted policy gradients.

A2C weights step ``t``'s policy gradient ``g_t = ∇θ log π(a_t | s_t)`` by its advantage ``A_t``
(its chain is ``chain(weight_by("advantages"), mean_steps())``). This example replaces that
weight with the exponentiated advantage of AWR (Peng et al. 2019), centred so that steps worse
than the batch's average still push their action down::

    w_t = min(exp(Â_t / β), w_max) - mean_t(min(exp(Â_t / β), w_max))

with ``Â`` the batch-standardised advantages. Because the weight is one scalar per step, the
transform is a :func:`pgrad.per_step_scale`: the engine computes ``mean_t w_t · g_t`` with one
backward pass and never materialises the per-step gradients. It reports its largest weight as a
metric (``agent.step()["metrics"]["awr_weights/max_weight"]``).

Run: ``python examples/reward_weighted_a2c.py`` (CartPole-v1, up to 150k steps, about a minute;
``--steps 2000`` for a smoke run).
"""

from __future__ import annotations

import argparse
from typing import NamedTuple

# isort: off
from pgrad_app.quiet import silence  # noqa: I001

silence()  # first: TensorFlow's start-up noise off (what pgrad's commands do)
import tensorflow as tf  # noqa: E402
import agents  # noqa: E402
import pgrad  # noqa: E402

# isort: on


class WeightStats(NamedTuple):
    """What the last update's weighting did (reported as metrics)."""

    max_weight: tf.Tensor  # [] the largest w_t before centring

    METRICS = ("max_weight",)


def awr_weights(beta: float = 1.0, max_weight: float = 20.0) -> pgrad.GradientTransform:
    """``[T]`` advantages -> per-step weights ``w_t`` (centred, clipped exponential)."""

    def init(variables):
        del variables
        return WeightStats(tf.constant(0.0))

    def scale(norms, state, *, num_steps, advantages, **context):
        a = tf.cast(advantages, tf.float32)  # [T]
        a = (a - tf.reduce_mean(a)) / (tf.math.reduce_std(a) + 1e-8)
        w = tf.minimum(tf.exp(a / beta), max_weight)  # [T]
        return w - tf.reduce_mean(w), WeightStats(tf.reduce_max(w))

    return pgrad.per_step_scale(scale, init, name="awr_weights")


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150_000, help="env steps to train at most")
    parser.add_argument("--beta", type=float, default=1.0, help="temperature of the weights")
    args = parser.parse_args(argv)

    transform = pgrad.chain(awr_weights(beta=args.beta), pgrad.mean_steps())
    agent = agents.make("a2c", "CartPole-v1", seed=0, transform=transform)
    info = agent.step()  # one rollout and one update, to show the metrics
    print(f"first update: max weight {info['metrics']['awr_weights/max_weight']:.2f}, "
          f"path fused: {bool(info['metrics']['path_fused'])}")
    returns: list[float] = []
    agent.learn(args.steps, progress=False, callbacks=[
        lambda loop: returns.extend(r for _, r, _ in loop.new_episodes),
        agents.callbacks.StopAtReturn(475),
    ])
    recent = sum(returns[-20:]) / max(len(returns[-20:]), 1)
    print(f"{agent.env_steps} env steps, {len(returns)} episodes, "
          f"mean return of the last 20: {recent:.1f}")
    evaluation = pgrad.evaluate(agent, episodes=5)
    print(f"greedy evaluation: {evaluation['return_mean']:.1f}")
    agent.close()
    return {"env_steps": float(agent.env_steps), "recent_return": recent,
            "max_weight": float(info["metrics"]["awr_weights/max_weight"])}


if __name__ == "__main__":
    main()
