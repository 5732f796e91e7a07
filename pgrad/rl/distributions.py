"""Action-space -> TFP distribution heads.

A head turns the policy network's ``[N, param_size]`` output into a ``tfd.Distribution`` with
batch shape ``[N]`` (so ``log_prob`` and ``entropy`` are ``[N]``) and maps sampled actions to
what the env accepts. Heads are Keras layers so their own variables (the Gaussian log-std) are
tracked, trained and checkpointed with the policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
    #: The head reads the actor's last hidden features too: the network's parameters are then
    #: ``[output_size outputs, latent features]`` (gSDE), ``param_size = output_size + latent``.
    uses_latent: bool = False

    @property
    def output_size(self) -> int:
        """Width of the actor's output layer (``param_size`` unless the head uses the latent)."""
        return self.param_size

    def distribution(self, params: tf.Tensor, action_mask: tf.Tensor | None = None
                     ) -> tfp.distributions.Distribution:
        """The distribution at ``[N, param_size]`` params; ``action_mask`` ``[N, n]`` bool (the
        legal actions, :mod:`pgrad.rl.collection.masks`) for the heads that take one."""
        raise NotImplementedError

    def call(self, params: tf.Tensor, action_mask: tf.Tensor | None = None
             ) -> tfp.distributions.Distribution:
        return self.distribution(params, action_mask)

    def log_prob_and_entropy(self, params: tf.Tensor, actions: tf.Tensor,
                             action_mask: tf.Tensor | None = None) -> tuple[tf.Tensor, tf.Tensor]:
        """``([N]`` log-probs of ``[N, *action_shape]`` actions, ``[N]`` entropies``)`` at
        ``[N, param_size]`` params: what an update needs of :meth:`distribution`, which heads may
        compute without building it (same values and gradients)."""
        dist = self.distribution(params, action_mask)
        return dist.log_prob(actions), dist.entropy()

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        """``[N, *action_shape]`` sampled actions -> actions for a vector env."""
        return np.asarray(actions)


def mask_logits(logits: tf.Tensor, action_mask: tf.Tensor | None) -> tf.Tensor:
    """``[N, n]`` logits with the illegal ones (``action_mask`` false) set to the dtype's most
    negative finite value; ``None`` leaves them as they are.

    Their probability is then exactly 0 (``exp`` underflows), so log-probabilities and entropy
    are those of the distribution renormalised over the legal actions, and no ``-inf`` reaches
    softmax, entropy (TFP's ``0 * log 0`` is 0) or their gradients: the gradient with respect to
    a masked logit is exactly 0 (``tf.where`` passes none to the branch it did not take).
    """
    if action_mask is None:
        return logits
    return tf.where(tf.cast(action_mask, tf.bool), logits, tf.constant(logits.dtype.min,
                                                                        logits.dtype))


def categorical_log_prob(logits: tf.Tensor, actions: tf.Tensor) -> tf.Tensor:
    """``[N]`` log-probs of ``[N]`` integer ``actions`` under ``[N, n]`` ``logits``, as
    ``tfd.Categorical(logits=logits).log_prob(actions)`` computes them (float actions cast)."""
    actions = tf.convert_to_tensor(actions)
    if not actions.dtype.is_integer:
        actions = tf.cast(actions, tf.int32)
    return -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=actions, logits=logits)


def categorical_entropy(logits: tf.Tensor) -> tf.Tensor:
    """``[N]`` entropies of ``[N, n]`` ``logits``, as ``tfd.Categorical`` computes them: ``-sum
    p log p`` with ``0 log 0 = 0`` (a masked logit's term, and its gradient, are exactly 0)."""
    log_p = tf.math.log_softmax(logits)
    p = tf.math.exp(log_p)
    return -tf.reduce_sum(tf.where(tf.math.equal(p, 0), tf.zeros_like(log_p), log_p) * p, -1)


def _no_mask(head: ActionHead, action_mask) -> None:
    if action_mask is not None:
        raise ValueError(f"{type(head).__name__} has no discrete actions to mask; action masks "
                         "apply to Discrete and MultiDiscrete action spaces.")


class CategoricalHead(ActionHead):
    """``Discrete(n, start)``: Categorical over n logits (masked: over the legal ones)."""

    def __init__(self, n: int, start: int = 0, **kwargs: Any):
        super().__init__(**kwargs)
        self.n, self.start = int(n), int(start)
        self.param_size, self.action_shape, self.action_dtype = self.n, (), tf.int32

    def distribution(self, params: tf.Tensor, action_mask: tf.Tensor | None = None
                     ) -> tfp.distributions.Distribution:
        return tfd.Categorical(logits=mask_logits(params, action_mask), dtype=tf.int32)

    def log_prob_and_entropy(self, params: tf.Tensor, actions: tf.Tensor,
                             action_mask: tf.Tensor | None = None) -> tuple[tf.Tensor, tf.Tensor]:
        # The ops of tfd.Categorical's log_prob and entropy, without tfp.distributions: its first
        # use imports the whole package and tf_keras (~0.5 s of CPU, the first update of every
        # Discrete run; docs/performance.md). Same values and gradients, tested.
        logits = mask_logits(params, action_mask)
        return categorical_log_prob(logits, actions), categorical_entropy(logits)

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        return np.asarray(actions, dtype=np.int64) + self.start


LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # bounds of a state-dependent log-std (as SAC/SB3)
SDE_EPS = 1e-6  # added to gSDE's variance (as Stable-Baselines3)


def log1m_tanh_sq(u: tf.Tensor | np.ndarray) -> tf.Tensor | np.ndarray:
    """``log(1 - tanh(u)^2)``, stably: ``2 (log 2 - u - softplus(-2u))`` (numpy or TensorFlow)."""
    if isinstance(u, np.ndarray):
        return 2.0 * (np.log(2.0) - u - np.logaddexp(0.0, -2.0 * u))
    return 2.0 * (np.log(2.0) - u - tf.nn.softplus(-2.0 * u))


class SquashedGaussian:
    """A diagonal Gaussian over ``u`` pushed through ``a = center + half_range * tanh(u)``.

    Actions are stored as the pre-squash ``u`` (so no ``atanh`` of a saturated action is ever
    needed); ``log_prob(u)`` is the log-density of the squashed action ``a``, with the
    log-det-jacobian ``sum log(half_range (1 - tanh(u)^2))``. ``entropy`` has no closed form; it
    is estimated at the mean (the Gaussian's entropy plus the log-det-jacobian at ``u = mean``).
    """

    def __init__(self, mean: tf.Tensor, log_std: tf.Tensor, half_range: np.ndarray):
        self.base = tfd.Independent(tfd.Normal(mean, tf.exp(log_std)), 1)
        self.mean = mean
        self.log_half_range = tf.constant(np.log(half_range).sum(), mean.dtype)

    def log_prob(self, u: tf.Tensor) -> tf.Tensor:
        u = tf.cast(u, self.mean.dtype)
        return (self.base.log_prob(u) - tf.reduce_sum(log1m_tanh_sq(u), -1)
                - self.log_half_range)

    def entropy(self) -> tf.Tensor:
        return (self.base.entropy() + tf.reduce_sum(log1m_tanh_sq(self.mean), -1)
                + self.log_half_range)

    def mode(self) -> tf.Tensor:
        return self.mean

    def sample(self, seed: Any = None) -> tf.Tensor:
        return self.base.sample(seed=seed)


class GaussianHead(ActionHead):
    """``Box``: diagonal Gaussian; learned log-std; optionally state-dependent and tanh-squashed.

    Args:
      low, high: the action bounds.
      log_std_init: initial log standard deviation.
      state_dependent_std: the network outputs ``[mean, log_std offset]`` per state (param size
        ``2A``, log-std clipped to [-20, 2]) instead of one learned log-std vector.
      squash: squash samples into the bounds with tanh (:class:`SquashedGaussian`; the bounds
        must be finite); else the env receives the sample clipped to the bounds. Either way the
        log-probs are of the stored (unclipped, pre-squash) sample.
      sde_latent_dim: > 0 turns on generalised state-dependent exploration (gSDE, Raffin et
        al. 2022) over the actor's last hidden features (this many): the exploration noise is
        ``latent(s) @ W`` with ``W ~ N(0, exp(log_std)^2)`` (``log_std`` is ``[latent, A]``),
        held for several steps by the acting code; log-probs are those of the per-state marginal
        ``N(mean, sqrt(latent^2 @ exp(2 log_std) + 1e-6))``, as Stable-Baselines3's. The
        latent is not trained through the std (SB3's ``learn_features=False``).
    """

    def __init__(self, low: np.ndarray, high: np.ndarray, log_std_init: float = 0.0,
                 state_dependent_std: bool = False, squash: bool = False,
                 sde_latent_dim: int = 0, **kwargs: Any):
        super().__init__(**kwargs)
        self.low = np.asarray(low, np.float32)
        self.high = np.asarray(high, np.float32)
        self.space_shape = self.low.shape
        self.state_dependent_std, self.squash = bool(state_dependent_std), bool(squash)
        self.log_std_init = float(log_std_init)
        if self.squash and not (np.isfinite(self.low).all() and np.isfinite(self.high).all()):
            raise ValueError("a squashed Gaussian needs finite action bounds; this Box has "
                             f"low={self.low.tolist()} high={self.high.tolist()}.")
        size = int(np.prod(self.space_shape))
        self.size = size
        self.sde_latent_dim = int(sde_latent_dim)
        self.uses_latent = self.sde_latent_dim > 0
        if self.uses_latent and self.state_dependent_std:
            raise ValueError("gSDE and a state-dependent log-std are alternatives; choose one.")
        self.param_size = 2 * size if self.state_dependent_std else size
        self.param_size += self.sde_latent_dim
        self.action_shape, self.action_dtype = (size,), tf.float32
        self.center = ((self.high + self.low) / 2).reshape(-1) if self.squash else None
        self.half_range = ((self.high - self.low) / 2).reshape(-1) if self.squash else None
        self.log_std = None
        if not self.state_dependent_std:
            shape = (self.sde_latent_dim, size) if self.uses_latent else (size,)
            self.log_std = self.add_weight(shape=shape, name="log_std",
                                           initializer=keras.initializers.Constant(log_std_init))

    @property
    def output_size(self) -> int:
        return self.param_size - self.sde_latent_dim

    def mean_and_log_std(self, params: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """``[N, param_size]`` -> ``([N, A]`` mean, ``[N, A]`` log-std)."""
        if self.uses_latent:  # gSDE: std from the (fixed) features and the [latent, A] log-std
            mean, latent = params[:, : self.size], tf.stop_gradient(params[:, self.size:])
            assert self.log_std is not None  # made in __init__ whenever the std is not per state
            var = tf.matmul(tf.square(latent), tf.exp(2.0 * self.log_std)) + SDE_EPS
            return mean, 0.5 * tf.math.log(var)
        if self.state_dependent_std:
            mean = params[:, : self.size]
            log_std = tf.clip_by_value(self.log_std_init + params[:, self.size:], LOG_STD_MIN,
                                       LOG_STD_MAX)
            return mean, log_std
        # Broadcast explicitly: the per-step gradient of log_std is the gradient of this tensor
        # (a per-step copy, pgrad.core.taps: its per-step gradients come from the batched pass).
        return params, per_step_variable(self.log_std, tf.shape(params)[0])  # [N, A]

    def distribution(self, params: tf.Tensor, action_mask: tf.Tensor | None = None
                     ) -> tfp.distributions.Distribution:
        _no_mask(self, action_mask)
        mean, log_std = self.mean_and_log_std(params)
        if self.half_range is not None:  # squash
            return SquashedGaussian(mean, log_std, self.half_range)
        return tfd.Independent(tfd.Normal(mean, tf.exp(log_std)), reinterpreted_batch_ndims=1)

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        a: np.ndarray = np.asarray(actions, np.float32)
        if self.center is not None and self.half_range is not None:  # squash
            a = self.center + self.half_range * np.tanh(a)
        return np.clip(a.reshape((-1, *self.space_shape)), self.low, self.high)


class MultiCategoricalHead(ActionHead):
    """``MultiDiscrete(nvec)``: independent Categoricals, ragged sizes padded with -1e9 logits;
    a mask (the per-dimension masks concatenated) masks each dimension's logits."""

    def __init__(self, nvec: Sequence[int] | np.ndarray,
                 start: Sequence[int] | np.ndarray | None = None, **kwargs: Any):
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

    def distribution(self, params: tf.Tensor, action_mask: tf.Tensor | None = None
                     ) -> tfp.distributions.Distribution:
        """``action_mask``: ``[N, sum(nvec)]``, the per-dimension masks concatenated."""
        params = mask_logits(params, action_mask)
        pad = tf.fill([tf.shape(params)[0], 1], tf.constant(_PAD_LOGIT, params.dtype))
        padded = tf.gather(tf.concat([params, pad], axis=1), self._grid, axis=1)  # [N, D*kmax]
        logits = tf.reshape(padded, [-1, len(self.nvec), self.kmax])  # [N, D, kmax]
        return tfd.Independent(tfd.Categorical(logits=logits, dtype=tf.int32), 1)

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        return np.asarray(actions, np.int64) + self.start


class BernoulliHead(ActionHead):
    """``MultiBinary(n)``: independent Bernoullis."""

    def __init__(self, shape: int | Sequence[int], **kwargs: Any):
        super().__init__(**kwargs)
        self.space_shape = tuple(np.atleast_1d(shape))
        size = int(np.prod(self.space_shape))
        self.param_size, self.action_shape, self.action_dtype = size, (size,), tf.int32

    def distribution(self, params: tf.Tensor, action_mask: tf.Tensor | None = None
                     ) -> tfp.distributions.Distribution:
        _no_mask(self, action_mask)
        return tfd.Independent(tfd.Bernoulli(logits=params, dtype=tf.int32), 1)

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        return np.asarray(actions, np.int8).reshape((-1, *self.space_shape))


def make_head(space: gym.Space, log_std_init: float = 0.0, state_dependent_std: bool = False,
              squash: bool = False, sde_latent_dim: int = 0) -> ActionHead:
    """The distribution head for a Gymnasium action space (the Gaussian options apply to Box).

    Raises:
      ValueError: for a space pgrad does not support, naming it and what is supported.
    """
    if isinstance(space, gym.spaces.Discrete):
        return CategoricalHead(space.n, space.start)
    if isinstance(space, gym.spaces.Box):
        if not np.issubdtype(space.dtype, np.floating):
            raise ValueError(f"action space {space} has integer dtype; supported: {SUPPORTED} "
                             "(Box with a float dtype).")
        return GaussianHead(space.low, space.high, log_std_init, state_dependent_std, squash,
                            sde_latent_dim)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return MultiCategoricalHead(space.nvec, getattr(space, "start", None))
    if isinstance(space, gym.spaces.MultiBinary):
        return BernoulliHead(space.n)
    raise ValueError(
        f"action space {type(space).__name__} ({space}) is not supported; supported: {SUPPORTED}."
    )
