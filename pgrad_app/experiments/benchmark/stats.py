"""Benchmark statistics over seeds, in numpy: mean +- std, IQM, stratified bootstrap CIs.

The interquartile mean and its confidence interval follow rliable (Agarwal et al. 2021,
``rliable.metrics.aggregate_iqm`` and ``rliable.library.get_interval_estimates``):

* IQM is ``scipy.stats.trim_mean(scores, 0.25)`` of every score pooled: sort, drop
  ``floor(0.25 n)`` scores at each end, average the rest. With fewer than 4 scores nothing is
  dropped (the IQM of 3 seeds is their mean).
* The CI is a percentile bootstrap, stratified by task: each resample draws, for every task
  (column), as many runs as it has, with replacement, from that task's runs only; the bounds
  are ``np.percentile`` (linear interpolation) of the statistic over the resamples at
  ``(1 - confidence) / 2`` and ``1 - (1 - confidence) / 2``.

rliable itself is not a dependency: it pulls arch, statsmodels, pandas, scipy and seaborn, and
its current release fails to import with pandas 3. The resampling here uses a seeded numpy
``Generator``, so a CI is reproducible (rliable's draws come from numpy's global state).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

#: Bootstrap resamples and seed used by the benchmark report.
REPS = 2000
SEED = 0


def _as_runs_by_tasks(scores) -> np.ndarray:
    """``[runs]`` or ``[runs, tasks]`` -> float64 ``[runs, tasks]``; refuses empty input."""
    x = np.asarray(scores, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.size == 0:
        raise ValueError(f"expected scores of shape [runs] or [runs, tasks]; got {x.shape}")
    return x


def mean_std(scores) -> tuple[float, float]:
    """Mean and population standard deviation (``ddof=0``, as numpy) of the pooled scores."""
    x = _as_runs_by_tasks(scores)
    return float(x.mean()), float(x.std())


def trim_mean(scores, proportion: float) -> float:
    """Mean after dropping ``floor(proportion * n)`` of the sorted pooled scores at each end.

    Equals ``scipy.stats.trim_mean(scores, proportion, axis=None)``.
    """
    if not 0 <= proportion < 0.5:
        raise ValueError(f"proportion must be in [0, 0.5); got {proportion}")
    x = np.sort(_as_runs_by_tasks(scores), axis=None)  # [n]
    cut = int(proportion * x.size)
    return float(x[cut:x.size - cut].mean())


def iqm(scores) -> float:
    """Interquartile mean of the pooled scores, ``[runs]`` or ``[runs, tasks]`` (rliable's)."""
    return trim_mean(scores, 0.25)


def bootstrap_ci(scores, statistic: Callable[[np.ndarray], float] = iqm, reps: int = REPS,
                 confidence: float = 0.95, seed: int = SEED) -> tuple[float, float]:
    """Percentile bootstrap CI of ``statistic``, resampling runs within each task.

    Args:
      scores: ``[runs]`` (one task) or ``[runs, tasks]``.
      statistic: maps a resampled ``[runs, tasks]`` array to a number (default: :func:`iqm`).
      reps: bootstrap resamples.
      confidence: coverage of the interval, in (0, 1).
      seed: seed of the resampling ``Generator``.

    Returns:
      ``(lower, upper)``.
    """
    x = _as_runs_by_tasks(scores)  # [N, M]
    runs, tasks = x.shape
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, runs, size=(reps, runs, tasks))  # [R, N, M] run drawn per cell
    resampled = x[rows, np.arange(tasks)]  # [R, N, M]: column m draws from task m only
    values = np.array([statistic(sample) for sample in resampled])  # [R]
    return _percentile_interval(values, confidence)


def bootstrap_mean_band(curves, reps: int = REPS, confidence: float = 0.95,
                        seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """Pointwise percentile-bootstrap CI of the mean over runs of ``curves`` ``[runs, points]``.

    Returns:
      ``(lower, upper)``, each ``[points]``.
    """
    c = np.asarray(curves, dtype=np.float64)
    if c.ndim != 2 or c.size == 0:
        raise ValueError(f"expected curves of shape [runs, points]; got {c.shape}")
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, c.shape[0], size=(reps, c.shape[0]))  # [R, N]
    means = c[rows].mean(axis=1)  # [R, P]
    return _percentile_interval(means, confidence)


def _percentile_interval(values: np.ndarray, confidence: float):
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1); got {confidence}")
    tail = 100 * (1 - confidence) / 2
    lower, upper = np.percentile(values, [tail, 100 - tail], axis=0)
    if np.ndim(lower) == 0:
        return float(lower), float(upper)
    return lower, upper
