"""Test helpers shared by the unit tests: small policies, the spaces they cover, references.

A plain module (not conftest.py): pytest loads several conftest files, and ``from conftest
import`` would pick whichever one ``sys.path`` finds first.
"""

import gymnasium as gym
import numpy as np
import tensorflow as tf

from pgrad import make_head, mlp


class SmallPolicy:
    """A tiny MLP policy with a distribution head; ``log_prob(obs [T, D], act [T, ...]) -> [T]``."""

    def __init__(self, action_space, obs_dim=4, hidden=(8, 8), seed=0):
        tf.keras.utils.set_random_seed(seed)
        self.head = make_head(action_space)
        self.net = mlp(obs_dim, hidden, self.head.param_size, output_gain=1.0)
        self.head.build(None)
        self.variables = self.net.trainable_variables + self.head.trainable_variables
        self.obs_dim = obs_dim

    def log_prob(self, obs, act):
        return self.head(self.net(obs)).log_prob(act)

    def batch(self, t, seed=1):
        """Random observations and actions sampled from the policy, ``[T, ...]``."""
        rng = np.random.default_rng(seed)
        obs = tf.constant(rng.normal(size=(t, self.obs_dim)), tf.float32)
        act = self.head(self.net(obs)).sample(seed=seed)
        return obs, act


SPACES = {
    "categorical": gym.spaces.Discrete(3),
    "gaussian": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
    "multidiscrete": gym.spaces.MultiDiscrete([2, 3]),
    "multibinary": gym.spaces.MultiBinary(3),
}


def jacobian_reference(fn, variables, *args):
    """The O(T^2) reference: ``tape.jacobian`` of the batched ``[T]`` output."""
    with tf.GradientTape(persistent=True) as tape:
        out = fn(*args)
    jac = tape.jacobian(out, variables, experimental_use_pfor=False)
    return [tf.zeros([out.shape[0], *v.shape]) if j is None else j for j, v in zip(jac, variables)]


def assert_all_close(actual, expected, atol=1e-5, rtol=1e-4):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), atol=atol, rtol=rtol)
