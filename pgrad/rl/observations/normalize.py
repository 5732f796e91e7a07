"""Running observation and reward normalisation, like Stable-Baselines3's ``VecNormalize``;
value normalisation of critic targets, like MAPPO's ``ValueNorm`` (:class:`ValueNormalizer`).

The statistics live in ``tf.Variable`` s (float64) so that ``tf.train.Checkpoint`` saves them and
an exported policy carries them. Rollouts run in numpy, so each normaliser keeps a numpy working
copy: :meth:`pull` reads the variables into it (after a restore, before a rollout), :meth:`push`
writes it back (after a rollout). Between the two, updates cost numpy arithmetic only.

Observation: ``clip((x - mean) / sqrt(var + eps), -clip, clip)`` with ``mean``/``var`` over every
observation seen (parallel Welford update per batch, as SB3's ``RunningMeanStd``).
Reward: ``clip(r / sqrt(var_G + eps), -clip, clip)`` where ``var_G`` is the running variance of
the discounted return ``G <- gamma * G + r`` per env (reset at episode ends) -- SB3's scheme,
which scales rewards without shifting them (shifting would change the optimal policy).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

_sum = np.add.reduce


def _clip(x: np.ndarray, bound: float) -> np.ndarray:
    """``np.clip(x, -bound, bound)`` (same values, NaN kept) as two ufunc calls."""
    return np.minimum(np.maximum(x, -bound), bound)


class _RunningMeanStd:
    """numpy mean/var/count over batches (parallel algorithm of Chan et al.)."""

    def __init__(self, shape: tuple[int, ...]):
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = 1e-4  # SB3's start: the first batch dominates immediately

    def update(self, x: np.ndarray) -> None:
        x = np.asarray(x, np.float64)
        self.update_from_moments(*batch_moments(x), x.shape[0])

    def update_from_moments(self, b_mean: np.ndarray, b_var: np.ndarray, n: float) -> None:
        """Merges in a batch given by its mean, (population) variance and size; also how the
        statistics of several collectors combine (rollout workers)."""
        total = self.count + n
        delta = b_mean - self.mean
        self.mean = self.mean + delta * n / total
        m2 = self.var * self.count + b_var * n + np.square(delta) * self.count * n / total
        self.var = m2 / total
        self.count = total


def batch_moments(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(x.mean(axis=0), x.var(axis=0))`` of ``[N, ...]`` float64 ``x``, computed as numpy
    computes them (the same bits) with the mean shared and without their Python wrappers:
    this runs every env step."""
    n = x.shape[0]
    s = _sum(x, axis=0, keepdims=True) / n
    dev = x - s
    dev *= dev
    return s[0], _sum(dev, axis=0) / n


class _Stats(tf.Module):
    """tf.Variables mirroring a ``_RunningMeanStd`` (what checkpoints and exports see)."""

    def __init__(self, shape: tuple[int, ...], name: str):
        super().__init__(name=name)
        self.rms = _RunningMeanStd(shape)
        self.mean = tf.Variable(self.rms.mean, trainable=False, name="mean")
        self.var = tf.Variable(self.rms.var, trainable=False, name="var")
        self.count = tf.Variable(self.rms.count, dtype=tf.float64, trainable=False, name="count")

    def pull(self) -> None:
        self.rms.mean = self.mean.numpy()
        self.rms.var = self.var.numpy()
        self.rms.count = float(self.count.numpy())

    def push(self) -> None:
        self.mean.assign(self.rms.mean)
        self.var.assign(self.rms.var)
        self.count.assign(self.rms.count)


class ObsNormalizer(_Stats):
    """Normalises ``[N, dim]`` flat observations with running statistics.

    Args:
      dim: observation width (after :mod:`pgrad.rl.observations.spaces` flattening).
      clip: normalised values are clipped to ``[-clip, clip]``.
      eps: added to the variance.
    """

    def __init__(self, dim: int, clip: float = 10.0, eps: float = 1e-8):
        super().__init__((dim,), name="obs_normalizer")
        self.clip, self.eps = float(clip), float(eps)

    def __call__(self, obs: np.ndarray, update: bool = False) -> np.ndarray:
        """``[N, dim]`` -> ``[N, dim]`` float32; with ``update=True`` the batch enters the stats."""
        if update:
            self.rms.update(obs)
        out = (obs - self.rms.mean) / np.sqrt(self.rms.var + self.eps)
        return _clip(out, self.clip).astype(np.float32)

    def tf_normalize(self, obs: tf.Tensor) -> tf.Tensor:
        """The same map in TensorFlow, reading the variables (for exported policies)."""
        mean = tf.cast(self.mean, obs.dtype)
        std = tf.cast(tf.sqrt(self.var + self.eps), obs.dtype)
        return tf.clip_by_value((obs - mean) / std, -self.clip, self.clip)


class RewardNormalizer(_Stats):
    """Scales rewards by the running std of the discounted return (no shift).

    Args:
      num_envs: number of parallel envs (one return accumulator each).
      gamma: discount of the return whose spread sets the scale.
      clip: scaled rewards are clipped to ``[-clip, clip]``.
      eps: added to the variance.
    """

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0, eps: float = 1e-8):
        super().__init__((), name="reward_normalizer")
        self.gamma, self.clip, self.eps = float(gamma), float(clip), float(eps)
        self.returns = np.zeros(num_envs, np.float64)  # per-env running G (not checkpointed)

    def __call__(self, rewards: np.ndarray, dones: np.ndarray) -> np.ndarray:
        """``[B]`` raw rewards and episode-end flags of one vector step -> ``[B]`` float32."""
        self.returns = self.returns * self.gamma + rewards
        self.rms.update(self.returns)
        self.returns[dones] = 0.0
        out = rewards / np.sqrt(self.rms.var + self.eps)
        return _clip(out, self.clip).astype(np.float32)


class ValueNormalizer(tf.Module):
    """Running statistics of a critic's targets, as MAPPO's ``ValueNorm`` (Yu et al. 2022).

    The critic regresses normalised targets; its output is denormalised wherever a value in
    reward units is needed (GAE). Exponential averages of the batch mean and mean square, with
    a debiasing term (Adam's), updated in the graph by :meth:`update`::

        m <- w m + (1 - w) mean(x);   q <- w q + (1 - w) mean(x^2);   d <- w d + (1 - w)
        mu = m / max(d, eps);   var = max(q / max(d, eps) - mu^2, min_var)

    with ``w = beta`` per call (MAPPO's ``per_element_update=False``). With ``beta`` near 1
    (0.99999) ``mu`` is close to the plain average of the batch means seen so far. Before any
    update ``mu = 0`` and ``var = min_var``. The statistics are float64 ``tf.Variable`` s, saved
    by checkpoints as the other normalisers' are.

    Args:
      beta: the decay per update.
      eps: lower bound of the debiasing term in the division.
      min_var: lower bound of the variance.
    """

    def __init__(self, beta: float = 0.99999, eps: float = 1e-5, min_var: float = 1e-2):
        super().__init__(name="value_normalizer")
        if not 0.0 < float(beta) < 1.0:
            raise ValueError(f"ValueNormalizer: beta must be in (0, 1); got {beta}")
        self.beta, self.eps, self.min_var = float(beta), float(eps), float(min_var)
        zero = lambda name: tf.Variable(0.0, dtype=tf.float64, trainable=False,  # noqa: E731
                                        name=name)
        self.running_mean, self.running_mean_sq = zero("running_mean"), zero("running_mean_sq")
        self.debiasing_term = zero("debiasing_term")

    def mean_var(self) -> tuple[tf.Tensor, tf.Tensor]:
        """``(mu, var)``: float64 scalars (class docstring)."""
        d = tf.maximum(self.debiasing_term, self.eps)
        mean = self.running_mean / d
        return mean, tf.maximum(self.running_mean_sq / d - tf.square(mean), self.min_var)

    def update(self, x: tf.Tensor, weights: tf.Tensor | None = None) -> None:
        """Folds in a batch ``x`` (any shape); ``weights`` (its shape, 0/1) keeps only the
        steps that count (an all-zero mask leaves the statistics as they are)."""
        x = tf.cast(x, tf.float64)
        w = tf.ones_like(x) if weights is None else tf.cast(weights, tf.float64)
        total = tf.reduce_sum(w)
        n = tf.maximum(total, 1.0)
        decay = tf.where(total > 0, tf.constant(self.beta, tf.float64), 1.0)
        self.running_mean.assign(decay * self.running_mean
                                 + (1.0 - decay) * tf.reduce_sum(w * x) / n)
        self.running_mean_sq.assign(decay * self.running_mean_sq
                                    + (1.0 - decay) * tf.reduce_sum(w * tf.square(x)) / n)
        self.debiasing_term.assign(decay * self.debiasing_term + (1.0 - decay))

    def normalize(self, x: tf.Tensor) -> tf.Tensor:
        """``(x - mu) / sqrt(var)``, in ``x`` 's dtype."""
        mean, var = self.mean_var()
        return tf.cast((tf.cast(x, tf.float64) - mean) / tf.sqrt(var), x.dtype)

    def denormalize(self, y: tf.Tensor) -> tf.Tensor:
        """``y sqrt(var) + mu``, in ``y`` 's dtype (the inverse of :meth:`normalize`)."""
        mean, var = self.mean_var()
        return tf.cast(tf.cast(y, tf.float64) * tf.sqrt(var) + mean, y.dtype)
