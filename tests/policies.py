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


def assert_same_trajectory(traj, ref, log_probs_atol=None):
    """Every field of two ``pgrad.rl.collection.rollout.Trajectory`` s equal: same dtype, shape and
    values
    (a tuple field part by part); ``log_probs`` to ``log_probs_atol`` when given (a network that
    saw other batch sizes: float round-off)."""
    for name in type(ref)._fields:
        got, want = getattr(traj, name), getattr(ref, name)
        if want is None:
            assert got is None, name
            continue
        for g, w in zip(*(x if isinstance(x, tuple) else (x,) for x in (got, want))):
            assert g.dtype == w.dtype and g.shape == w.shape, name
            if name == "log_probs" and log_probs_atol is not None:
                np.testing.assert_allclose(g, w, rtol=0, atol=log_probs_atol, err_msg=name)
            else:
                np.testing.assert_array_equal(g, w, err_msg=name)


class ImageEnv(gym.Env):
    """Random image observations (a cheap stand-in for Atari frames in tests and measurements).

    Observations are random ``shape`` frames of ``dtype`` (uint8 0..255, or bool planes); with
    ``vector`` > 0 a ``Dict`` of ``{"image": frame, "vector": float32 [vector]}``. The reward is
    1 when the action equals the frame's first value modulo the number of actions (so a policy
    that reads the image can learn it), and episodes are truncated after ``length`` steps.
    """

    metadata = {"render_modes": []}

    def __init__(self, shape=(84, 84, 4), dtype=np.uint8, actions=3, length=16, vector=0,
                 action_space=None):
        high = 1 if dtype == np.bool_ else 255
        image = gym.spaces.Box(0, high, shape, dtype)
        self.observation_space = image if not vector else gym.spaces.Dict(
            {"image": image, "vector": gym.spaces.Box(-1, 1, (vector,), np.float32)})
        self.action_space = action_space or gym.spaces.Discrete(actions)
        self.shape, self.dtype, self.length, self.vector, self.t = shape, dtype, length, vector, 0

    def _obs(self):
        rng = self.np_random
        if self.dtype == np.bool_:
            frame = rng.random(self.shape) < 0.2
        else:
            frame = rng.integers(0, 256, self.shape, np.uint8)
        self._first = int(frame.flat[0])
        if not self.vector:
            return frame
        return {"image": frame, "vector": rng.uniform(-1, 1, self.vector).astype(np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        n = getattr(self.action_space, "n", 2)
        reward = float(int(np.asarray(action).reshape(-1)[0]) % n == self._first % n)
        return self._obs(), reward, False, self.t >= self.length, {}


class KerasPolicy:
    """A Categorical policy over a user's Keras layers on ``[T, *obs_shape]`` observations.

    ``obs`` of an integer ``kind`` ("ids": token ids in ``[0, vocab)``, "uint8": pixels scaled by
    1/255 inside ``log_prob``) or float ("float", standard normal).
    """

    def __init__(self, layers, obs_shape, kind="float", vocab=0, num_actions=3, seed=0):
        import keras

        tf.keras.utils.set_random_seed(seed)
        dtype = {"float": "float32", "uint8": "float32", "ids": "int32"}[kind]
        self.net = keras.Sequential([keras.layers.Input(obs_shape, dtype=dtype), *layers,
                                     keras.layers.Dense(num_actions)])
        self.head = make_head(gym.spaces.Discrete(num_actions))
        self.variables = self.net.trainable_variables
        self.obs_shape, self.kind, self.vocab = tuple(obs_shape), kind, vocab

    def log_prob(self, obs, act):
        if self.kind == "uint8":
            obs = tf.cast(obs, tf.float32) / 255.0
        return self.head(self.net(obs)).log_prob(act)

    def batch(self, t, seed=1):
        rng = np.random.default_rng(seed)
        shape = (t, *self.obs_shape)
        if self.kind == "ids":
            obs = tf.constant(rng.integers(0, self.vocab, shape), tf.int32)
        elif self.kind == "uint8":
            obs = tf.constant(rng.integers(0, 256, shape), tf.uint8)
        else:
            obs = tf.constant(rng.normal(size=shape), tf.float32)
        return obs, self.head(self.net(obs if self.kind != "uint8" else
                                       tf.cast(obs, tf.float32) / 255.0)).sample(seed=seed)


def reference_norms(rows):
    """``[T]`` global norms of per-step gradient rows (e.g. from :func:`jacobian_reference`)."""
    t = rows[0].shape[0]
    return np.sqrt(sum(np.sum(np.reshape(np.square(r), (t, -1)), 1) for r in rows))


def reference_update(chain, variables, rows, context):
    """A chain applied to reference per-step rows by its own (materialised) ``update``."""
    return chain.update(list(rows), chain.init(variables), **context)[0]
