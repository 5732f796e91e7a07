"""Acting's numpy sampling from ``[N, param_size]`` action-distribution parameters, shared by the
numpy mirror (:class:`pgrad.rl.acting.policy.NumpyPolicy`) and the compiled actor
(:class:`pgrad.rl.acting.compiled_actor.CompiledActor`)."""

from __future__ import annotations

import numpy as np

from pgrad.rl import distributions as dist_lib

# Reductions as ufunc methods: ``x.max(1)`` / ``np.cumsum`` / ``.sum(1)`` reach the same loops
# through Python wrappers that cost more than the arithmetic on a few rows.
_max_rows = np.maximum.reduce
_cumsum_rows = np.add.accumulate
_count_rows = np.add.reduce


_row_offsets: dict[tuple[int, int], np.ndarray] = {}  # (N, K) -> [N] start of each row in ravel()


class NumpySampling:
    """Sampling from ``[N, param_size]`` parameters in numpy, with ``self.head`` and the
    Gaussian head's ``self.log_std`` (a numpy copy the subclass keeps current)."""

    head: dist_lib.ActionHead
    log_std: np.ndarray | None

    def sample(self, params: np.ndarray, rng: np.random.Generator,
               sde_noise: np.ndarray | None = None, action_mask: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """Samples actions: ``([N, *action_shape]`` stored actions, ``[N]`` float32 log-probs).

        ``sde_noise``: gSDE's exploration matrices ``[N, latent, A]`` held by the caller (see
        :meth:`sde_noise`); without them each step draws fresh noise from the marginal.
        ``action_mask``: ``[N, n]`` bool legal actions (see :func:`sample_numpy`).
        """
        return sample_numpy(self.head, params, self.log_std, rng, sde_noise, action_mask)

    def sde_noise(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``[n, latent, A]`` gSDE exploration matrices ``W ~ N(0, exp(log_std)^2)``."""
        if self.log_std is None:
            raise ValueError("gSDE noise needs the Gaussian head's log-std; this head has none.")
        std = np.exp(self.log_std)
        return (std * rng.standard_normal((n, *std.shape))).astype(np.float32)

    def mode(self, params: np.ndarray, action_mask: np.ndarray | None = None) -> np.ndarray:
        """Deterministic actions ``[N, *action_shape]`` (argmax / mean / logit > 0; masked: the
        argmax over the legal actions)."""
        return mode_numpy(self.head, params, action_mask)


def sample_numpy(head: dist_lib.ActionHead, params: np.ndarray, log_std: np.ndarray | None,
                 rng: np.random.Generator, sde_noise: np.ndarray | None = None,
                 action_mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Samples from ``head``'s distribution at ``[N, param_size]`` params, in numpy.

    ``action_mask``: ``[N, n]`` bool, the legal actions (the per-dimension masks concatenated
    for MultiDiscrete; every row allowing something, as :mod:`pgrad.rl.collection.masks` checks):
    illegal actions are never drawn and log-probabilities are over the legal ones. Draws the same
    uniforms with or without a mask.

    Returns ``([N, *action_shape]`` stored actions, ``[N]`` float32 log-probabilities).
    """
    h = head
    n: int = params.shape[0]
    if action_mask is not None:
        _check_maskable(h)
    if isinstance(h, dist_lib.CategoricalHead):
        return _categorical(params, rng.random(n), np.float32, action_mask)
    if isinstance(h, dist_lib.GaussianHead):
        mean, step_log_std = _mean_and_log_std(h, params, log_std)  # log-std [N, A] or [A]
        if h.uses_latent and sde_noise is not None:  # gSDE: noise = latent @ W, W held
            noise = np.einsum("nl,nla->na", params[:, h.size:], sde_noise)
        else:
            noise = np.exp(step_log_std) * rng.standard_normal(mean.shape)
        u = (mean + noise).astype(np.float32)
        lp = _gauss_log_prob(u, mean, step_log_std)
        if h.squash:  # density of the squashed action: minus the log-det-jacobian
            lp = lp - (dist_lib.log1m_tanh_sq(u.astype(np.float64)).sum(1)
                       + np.log(np.asarray(h.half_range)).sum()).astype(np.float32)
        return u, lp.astype(np.float32)
    if isinstance(h, dist_lib.MultiCategoricalHead):
        u = rng.random((n, len(h.nvec)))
        masks = (_split(action_mask, h.nvec) if action_mask is not None
                 else [None] * len(h.nvec))
        draws = [_categorical(b, u[:, d], np.float64, m)
                 for d, (b, m) in enumerate(zip(_split(params, h.nvec), masks))]
        lps = np.sum([lp for _, lp in draws], axis=0)
        return np.stack([a for a, _ in draws], 1), lps.astype(np.float32)
    if isinstance(h, dist_lib.BernoulliHead):
        a = (rng.random(params.shape) < _sigmoid(params)).astype(np.int32)
        return a, _bernoulli_log_prob(a, params)
    raise ValueError(f"no numpy sampler for head {type(h).__name__}")


def gaussian_numpy(head: dist_lib.GaussianHead, params: np.ndarray, log_std: np.ndarray | None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, log_std)`` ``[N, A]`` of a Gaussian head, in numpy (as ``mean_and_log_std``)."""
    mean, step_log_std = _mean_and_log_std(head, params, log_std)
    return mean, np.broadcast_to(step_log_std, mean.shape)


def _mean_and_log_std(head: dist_lib.GaussianHead, params: np.ndarray,
                      log_std: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`gaussian_numpy` with a learned state-independent log-std left ``[A]`` (what
    sampling broadcasts anyway: ``np.broadcast_to`` costs more than the arithmetic on a row)."""
    if head.uses_latent:
        latent = params[:, head.size:].astype(np.float64)
        var = np.square(latent) @ np.exp(2.0 * np.asarray(log_std, np.float64)) + dist_lib.SDE_EPS
        return params[:, : head.size], 0.5 * np.log(var)
    if head.state_dependent_std:
        a = head.size
        log_std = np.clip(head.log_std_init + params[:, a:], dist_lib.LOG_STD_MIN,
                          dist_lib.LOG_STD_MAX)
        return params[:, :a], log_std
    if log_std is None:
        raise ValueError("a Gaussian head with a learned log-std samples with its numpy copy; "
                         "log_std is None.")
    return params, log_std


def mode_numpy(head: dist_lib.ActionHead, params: np.ndarray,
               action_mask: np.ndarray | None = None) -> np.ndarray:
    """Deterministic actions ``[N, *action_shape]`` (argmax / mean / logit > 0), in numpy;
    with ``action_mask`` ``[N, n]`` the argmax over the legal actions."""
    h = head
    if action_mask is not None:
        _check_maskable(h)
        params = np.where(action_mask, params, -np.inf)
    if isinstance(h, dist_lib.CategoricalHead):
        return params.argmax(1).astype(np.int32)
    if isinstance(h, dist_lib.GaussianHead):
        return params[:, : h.size].astype(np.float32)  # the mean (pre-squash)
    if isinstance(h, dist_lib.MultiCategoricalHead):
        return np.stack([b.argmax(1) for b in _split(params, h.nvec)], 1).astype(np.int32)
    if isinstance(h, dist_lib.BernoulliHead):
        return (params > 0).astype(np.int32)
    raise ValueError(f"no numpy mode for head {type(h).__name__}")


def _check_maskable(head) -> None:
    if not isinstance(head, (dist_lib.CategoricalHead, dist_lib.MultiCategoricalHead)):
        raise ValueError(f"{type(head).__name__} has no discrete actions to mask; action masks "
                         "apply to Discrete and MultiDiscrete action spaces.")


def _split(params: np.ndarray, nvec) -> list[np.ndarray]:
    return np.split(params, np.cumsum(nvec)[:-1], axis=1)


def _categorical(logits: np.ndarray, u: np.ndarray, out_dtype=np.float64,
                 mask: np.ndarray | None = None):
    """Inverse-CDF sampling from ``[N, K]`` logits with one uniform per row.

    Action ``a`` is the number of CDF entries below ``u * total`` (float64 CDF of the
    max-shifted exponentials), clipped to ``K - 1``. Returns ``([N]`` int32 actions, ``[N]``
    log-probabilities ``z_a - log(total)``, computed in float64 and stored as ``out_dtype``).

    With ``mask`` (``[N, K]`` bool, each row allowing something) illegal logits are ``-inf``
    (probability exactly 0) and ``a`` is the number of CDF entries at or below
    ``x = min(u * total, the float below total)``: ``a`` is then an index where the CDF steps
    up (``cdf[a-1] <= x < cdf[a]``), which an action of probability 0 never is.
    """
    n, k = logits.shape
    if mask is not None:
        logits = np.where(mask, logits, -np.inf)
    z = logits - _max_rows(logits, axis=1, keepdims=True)
    cdf = _cumsum_rows(np.exp(z, dtype=np.float64), axis=1)
    total = cdf[:, -1]  # [N]
    if mask is None:
        a = _count_rows(np.multiply(u, total)[:, None] > cdf, axis=1, dtype=np.int32)
    else:
        x = np.minimum(np.multiply(u, total), np.nextafter(total, 0.0))
        a = _count_rows(x[:, None] >= cdf, axis=1, dtype=np.int32)
    np.minimum(a, k - 1, out=a)
    offsets = _row_offsets.get((n, k))
    if offsets is None:
        offsets = _row_offsets[(n, k)] = np.arange(0, n * k, k)
    # z[arange(N), a] - log(total), without building the row index every call
    log_probs = np.subtract(z.ravel()[a + offsets], np.log(total), out=np.empty(n, out_dtype),
                            casting="same_kind")
    return a, log_probs


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _gauss_log_prob(a, mean, log_std) -> np.ndarray:
    z = (a - mean) * np.exp(-log_std)
    return (-0.5 * z * z - log_std - 0.5 * np.log(2 * np.pi)).sum(1).astype(np.float32)


def _bernoulli_log_prob(a, logits) -> np.ndarray:
    ls = -np.logaddexp(0.0, -logits)  # log sigmoid(l)
    lns = -np.logaddexp(0.0, logits)  # log sigmoid(-l)
    return (a * ls + (1 - a) * lns).sum(1).astype(np.float32)
