"""Action-space -> TFP distribution heads.

A head turns the policy network's ``[N, param_size]`` output into a ``tfd.Distribution`` with
batch shape ``[N]`` (so ``log_prob`` and ``entropy`` are ``[N]``) and maps sampled actions to
what the env accepts. Heads are Keras layers so their own variables (the Gaussian log-std) are
tracked, trained and checkpointed with the policy.
"""

from __future__ import annotations

import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from pgrad.core.taps import per_step_variable

tfd = tfp.distributions

SUPPORTED = "Discrete, Box, MultiDiscrete, MultiBinary"
_PAD_LOGIT = -1e9  # unused categories of a ragged MultiDiscrete: probability exactly 0 in float32


class ActionHead(keras.layers.Layer):
    """Base class: ``param_size``, ``distribution(params)``, ``to_env(actions)``.

    Attributes:
      param_size: width of the network output this head consumes.
      action_shape: shape of one action as stored in trajectories.
      action_dtype: ``tf.int32`` or ``tf.float32``.
    """

    param_size: int
    action_shape: tuple[int, ...]
    action_dtype: tf.DType

    def distribution(self, params: tf.Tensor) -> tfd.Distribution:
        raise NotImplementedError

    def call(self, params):
        return self.distribution(params)

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        """``[N, *action_shape]`` sampled actions -> actions for a vector env."""
        return np.asarray(actions)


class CategoricalHead(ActionHead):
    """``Discrete(n, start)``: Categorical over n logits."""

    def __init__(self, n: int, start: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.n, self.start = int(n), int(start)
        self.param_size, self.action_shape, self.action_dtype = self.n, (), tf.int32

    def distribution(self, params):
        return tfd.Categorical(logits=params, dtype=tf.int32)

    def to_env(self, actions):
        return np.asarray(actions, dtype=np.int64) + self.start


class GaussianHead(ActionHead):
    """``Box``: diagonal Gaussian, state-independent learned log-std.

    Log-probs are of the unclipped sample; the env receives the sample clipped to the bounds.
    """

    def __init__(self, low: np.ndarray, high: np.ndarray, log_std_init: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.low = np.asarray(low, np.float32)
        self.high = np.asarray(high, np.float32)
        self.space_shape = self.low.shape
        size = int(np.prod(self.space_shape))
        self.param_size, self.action_shape, self.action_dtype = size, (size,), tf.float32
        self.log_std = self.add_weight(
            shape=(size,), initializer=keras.initializers.Constant(log_std_init), name="log_std"
        )

    def distribution(self, params):
        # Broadcast explicitly: the per-step gradient of log_std is the gradient of this tensor.
        # (a per-step copy, pgrad.core.taps: its per-step gradients come from the batched pass)
        log_std = per_step_variable(self.log_std, tf.shape(params)[0])  # [N, A]
        return tfd.Independent(tfd.Normal(params, tf.exp(log_std)), reinterpreted_batch_ndims=1)

    def to_env(self, actions):
        a = np.asarray(actions, np.float32).reshape((-1, *self.space_shape))
        return np.clip(a, self.low, self.high)


class MultiCategoricalHead(ActionHead):
    """``MultiDiscrete(nvec)``: independent Categoricals, ragged sizes padded with -inf logits."""

    def __init__(self, nvec, start=None, **kwargs):
        super().__init__(**kwargs)
        self.nvec = np.asarray(nvec, np.int64).reshape(-1)
        self.start = np.zeros_like(self.nvec) if start is None else np.asarray(start).reshape(-1)
        self.kmax = int(self.nvec.max())
        self.param_size = int(self.nvec.sum())
        self.action_shape, self.action_dtype = (len(self.nvec),), tf.int32
        # Gather map from a padded [D * kmax] grid to the flat params; slot -> index
        # ``param_size`` (an extra -inf column) where category k >= nvec[d].
        grid = np.full(len(self.nvec) * self.kmax, self.param_size, np.int32)
        offset = 0
        for d, n in enumerate(self.nvec):
            grid[d * self.kmax : d * self.kmax + int(n)] = np.arange(offset, offset + int(n))
            offset += int(n)
        self._grid = tf.constant(grid)

    def distribution(self, params):
        pad = tf.fill([tf.shape(params)[0], 1], tf.constant(_PAD_LOGIT, params.dtype))
        padded = tf.gather(tf.concat([params, pad], axis=1), self._grid, axis=1)  # [N, D*kmax]
        logits = tf.reshape(padded, [-1, len(self.nvec), self.kmax])  # [N, D, kmax]
        return tfd.Independent(tfd.Categorical(logits=logits, dtype=tf.int32), 1)

    def to_env(self, actions):
        return np.asarray(actions, np.int64) + self.start


class BernoulliHead(ActionHead):
    """``MultiBinary(n)``: independent Bernoullis."""

    def __init__(self, shape, **kwargs):
        super().__init__(**kwargs)
        self.space_shape = tuple(np.atleast_1d(shape))
        size = int(np.prod(self.space_shape))
        self.param_size, self.action_shape, self.action_dtype = size, (size,), tf.int32

    def distribution(self, params):
        return tfd.Independent(tfd.Bernoulli(logits=params, dtype=tf.int32), 1)

    def to_env(self, actions):
        return np.asarray(actions, np.int8).reshape((-1, *self.space_shape))


def make_head(space: gym.Space, log_std_init: float = 0.0) -> ActionHead:
    """The distribution head for a Gymnasium action space.

    Raises:
      ValueError: for a space pgrad does not support, naming it and what is supported.
    """
    if isinstance(space, gym.spaces.Discrete):
        return CategoricalHead(space.n, space.start)
    if isinstance(space, gym.spaces.Box):
        if not np.issubdtype(space.dtype, np.floating):
            raise ValueError(f"action space {space} has integer dtype; supported: {SUPPORTED} "
                             "(Box with a float dtype).")
        return GaussianHead(space.low, space.high, log_std_init)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return MultiCategoricalHead(space.nvec, getattr(space, "start", None))
    if isinstance(space, gym.spaces.MultiBinary):
        return BernoulliHead(space.n)
    raise ValueError(
        f"action space {type(space).__name__} ({space}) is not supported; supported: {SUPPORTED}."
    )
