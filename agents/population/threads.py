"""TensorFlow's intra-op threads for a population of small networks.

A population's update thread runs while the main thread collects (:mod:`agents.population.loop`),
on a machine of a few cores. TensorFlow's intra-op pool splits each op of a small update (a
batched ``[N, 80, 64]`` matmul of the vectorized update, :mod:`agents.update.vectorized`) over
its threads; for ops this small the hand-off costs more than it saves and the pool's threads
compete with collection. With one intra-op thread each op runs where the executor schedules it
(the inter-op pool still runs independent ops side by side). Measured here (2 cores, Intel Xeon,
docs/populations.md): 10 seeds of A2C CartPole at 100k took 16.5 s against 18.5 s, 10 seeds of
PPO CartPole at 50k 26.1 s against 38.8 s. Convolutional updates have ops large enough to split;
they keep TensorFlow's default.
"""

from __future__ import annotations

import os

import gymnasium as gym


def flat_observations(space: gym.Space) -> bool:
    """Whether ``space`` has no image part (the policy is a small dense network)."""
    from pgrad.rl.observations.spaces import is_image_space

    if isinstance(space, gym.spaces.Dict):
        return all(flat_observations(s) for s in space.spaces.values())
    if isinstance(space, gym.spaces.Tuple):
        return all(flat_observations(s) for s in space.spaces)
    return not is_image_space(space)


def one_intra_op_thread() -> bool:
    """Sets TensorFlow's intra-op pool to one thread (module docstring), unless the user set
    ``TF_NUM_INTRAOP_THREADS`` or TensorFlow's runtime has started (it can be set only before).
    Returns whether it was set."""
    if os.environ.get("TF_NUM_INTRAOP_THREADS"):
        return False
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
    except RuntimeError:  # the runtime is up: its pool stays as it is
        return False
    return True
