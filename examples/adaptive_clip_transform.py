"""A custom gradient transform, written from scratch and composed with pgrad's clipping.

``adaptive_clip(k)`` is a stateful :class:`pgrad.GradientTransform` (``init`` and ``update``,
optax's shape): it keeps a running average of the per-step gradient norms and scales down every
step whose norm is more than ``k`` times that average, so one outlier step cannot dominate an
update however the scale of the gradients drifts during training. It sees the full per-step
gradients ``[T, *shape]`` (one row per step; the engine materialises them for a transform with no
fused form) and its state goes into checkpoints with the agent's.

It is composed with the built-ins into A2C's policy-gradient chain::

    chain(weight_by("advantages"), adaptive_clip(3.0), mean_steps(), clip_by_global_norm(0.5))

and checked against a plain loop over the steps before training with it.

Run: ``python examples/adaptive_clip_transform.py`` (CartPole-v1, 50k steps, about a minute;
``--steps 1000`` for a smoke run).
"""

from __future__ import annotations

import argparse
from typing import NamedTuple

# isort: off
from pgrad_app.quiet import silence  # noqa: I001

silence()  # first: TensorFlow's start-up noise off (what pgrad's commands do)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import agents  # noqa: E402
import pgrad  # noqa: E402

# isort: on


class AdaptiveClipState(NamedTuple):
    """Running average of the per-step gradient norm, and what the last update clipped."""

    norm_average: tf.Tensor  # [] float32, exponential moving average of ||g_t||
    clip_fraction: tf.Tensor  # [] fraction of the last update's steps scaled down

    METRICS = ("norm_average", "clip_fraction")  # the agent reports clip_fraction unprefixed


def adaptive_clip(k: float = 3.0, decay: float = 0.99) -> pgrad.GradientTransform:
    """Scales step ``t``'s gradient to norm at most ``k`` times the running average norm."""

    def init(variables):
        del variables
        return AdaptiveClipState(tf.constant(0.0), tf.constant(0.0))

    def update(grads, state, **context):
        # One global norm per step over every variable: [T].
        squares = [tf.reduce_sum(tf.reshape(tf.square(g), [tf.shape(g)[0], -1]), axis=1)
                   for g in grads]
        norms = tf.sqrt(tf.add_n(squares))  # [T]
        batch_mean = tf.reduce_mean(norms)
        average = tf.where(state.norm_average > 0.0,
                           decay * state.norm_average + (1.0 - decay) * batch_mean, batch_mean)
        limit = k * average
        factor = limit / tf.maximum(norms, limit)  # [T], exactly 1 where the norm is small
        clipped = [g * tf.reshape(factor, [-1] + [1] * (len(g.shape) - 1)) for g in grads]
        fraction = tf.reduce_mean(tf.cast(norms > limit, tf.float32))
        return clipped, AdaptiveClipState(average, fraction)

    return pgrad.GradientTransform(init, update, name="adaptive_clip", step_axis="per_step")


def check_against_loop(k: float = 1.5) -> float:
    """The transform on random per-step gradients vs the same maths, one step at a time."""
    rng = np.random.default_rng(0)
    grads = [tf.constant(rng.normal(size=(16, 3, 2)), tf.float32),
             tf.constant(rng.normal(size=(16, 2)), tf.float32)]  # T = 16 steps
    grads[0] = tf.tensor_scatter_nd_update(grads[0], [[3]], [10.0 * grads[0][3]])  # an outlier
    transform = adaptive_clip(k)
    out, state = transform.update(grads, transform.init(None))
    norms = [np.sqrt(sum(float(np.sum(g[t].numpy() ** 2)) for g in grads)) for t in range(16)]
    limit = k * np.mean(norms)
    worst = 0.0
    for t in range(16):
        factor = min(1.0, limit / norms[t])
        for g, o in zip(grads, out):
            worst = max(worst, float(np.max(np.abs(o[t].numpy() - factor * g[t].numpy()))))
    assert worst < 1e-5, worst
    assert float(state.clip_fraction) > 0  # the outlier step was scaled down
    return worst


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50_000, help="env steps to train")
    parser.add_argument("--k", type=float, default=3.0, help="clip at k x the average norm")
    args = parser.parse_args(argv)

    worst = check_against_loop()
    print(f"adaptive_clip vs a plain loop over the steps: max difference {worst:.1e}")

    transform = pgrad.chain(pgrad.weight_by("advantages"), adaptive_clip(args.k),
                            pgrad.mean_steps(), pgrad.clip_by_global_norm(0.5))
    agent = agents.make("a2c", "CartPole-v1", seed=0, transform=transform)
    agent.learn(args.steps, progress=False)
    metrics = agent.step()["metrics"]
    print(f"{agent.env_steps} env steps: pg_grad_norm {metrics['pg_grad_norm']:.3f} (<= 0.5), "
          f"running norm {metrics['adaptive_clip/norm_average']:.3f}, "
          f"clipped {metrics['clip_fraction']:.0%} of the last update's steps")
    assert metrics["pg_grad_norm"] <= 0.5 + 1e-5
    rolling = agent.learn_stats.rolling_return()
    print(f"mean return of the last 20 training episodes: {rolling}")
    agent.close()
    return {"max_difference": worst, "pg_grad_norm": float(metrics["pg_grad_norm"]),
            "norm_average": float(metrics["adaptive_clip/norm_average"]),
            "clip_fraction": float(metrics["clip_fraction"])}


if __name__ == "__main__":
    main()
