"""Benchmark statistics over seeds: mean +- std, IQM, stratified bootstrap CIs; rliable's when it
is installed (``pgrad[compare]``), else the same statistics in numpy.

The interquartile mean and its confidence interval are rliable's (Agarwal et al. 2021,
``rliable.metrics.aggregate_iqm`` and ``rliable.library.get_interval_estimates``).
:func:`iqm_interval` -- what the benchmark tables print -- calls rliable itself when it imports,
with numpy's global random state seeded for the call and restored after it (rliable draws its
resamples from that state), so a table is reproducible and the caller's state untouched. Without
rliable, the numpy functions here compute the same statistics:

* IQM is ``scipy.stats.trim_mean(scores, 0.25)`` of every score pooled: sort, drop
  ``floor(0.25 n)`` scores at each end, average the rest. With fewer than 4 scores nothing is
  dropped (the IQM of 3 seeds is their mean).
* The CI is a percentile bootstrap, stratified by task: each resample draws, for every task
  (column), as many runs as it has, with replacement, from that task's runs only; the bounds
  are ``np.percentile`` (linear interpolation) of the statistic over the resamples at
  ``(1 - confidence) / 2`` and ``1 - (1 - confidence) / 2``. The draws come from a seeded numpy
  ``Generator`` (not rliable's draws: the bounds agree in distribution, not to the digit).

rliable 1.2.0 pins ``arch < 8``, whose releases fail to import with pandas 3 (and arch 8 dropped
the ``random_state`` rliable passes): the ``compare`` extra keeps pandas below 3.
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator

import numpy as np

from pgrad_app.errors import UserError, one_line

#: Bootstrap resamples and seed used by the benchmark report.
REPS = 2000
SEED = 0
#: How to install rliable, named by every error about it.
RLIABLE_HINT = "pip install 'pgrad[compare]'"


@functools.cache
def _rliable() -> tuple[object, object] | str:
    """``(rliable.library, rliable.metrics)``, or why they do not import."""
    try:
        from rliable import library, metrics
    except ImportError:
        return f"rliable is not installed: {RLIABLE_HINT}"
    except Exception as err:  # arch < 8 under pandas 3 raises a TypeError at import
        return (f"rliable is installed but does not import ({one_line(err)}): {RLIABLE_HINT} "
                "(it keeps pandas < 3, which rliable's arch needs)")
    return library, metrics


def has_rliable() -> bool:
    """Whether rliable imports here (the benchmark tables then use it)."""
    return not isinstance(_rliable(), str)


def import_rliable() -> tuple:
    """``(rliable.library, rliable.metrics)``.

    Raises:
      UserError: rliable is missing or does not import, in one line naming the extra.
    """
    found = _rliable()
    if isinstance(found, str):
        raise UserError(found)
    return found


@contextlib.contextmanager
def numpy_seed(seed: int) -> Iterator[None]:
    """numpy's global random state seeded with ``seed`` inside, and as it was after."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def iqm_interval(scores, reps: int = REPS, confidence: float = 0.95,
                 seed: int = SEED) -> tuple[float, tuple[float, float]]:
    """The IQM of ``scores`` (``[runs]`` or ``[runs, tasks]``) and its stratified percentile
    bootstrap CI: rliable's when it imports (:func:`has_rliable`), else :func:`iqm` and
    :func:`bootstrap_ci`. Returns ``(iqm, (lower, upper))``."""
    x = _as_runs_by_tasks(scores)  # [N, M]
    if not has_rliable():
        return iqm(x), bootstrap_ci(x, iqm, reps, confidence, seed)
    library, metrics = import_rliable()
    with numpy_seed(seed):
        point, interval = library.get_interval_estimates(
            {"x": x}, lambda s: np.array([metrics.aggregate_iqm(s)]), reps=reps,
            confidence_interval_size=confidence)
    return float(point["x"][0]), (float(interval["x"][0, 0]), float(interval["x"][1, 0]))


def interval_method(reps: int = REPS) -> str:
    """How :func:`iqm_interval` computes here, for a report's protocol line."""
    if has_rliable():
        return (f"rliable's stratified percentile bootstrap "
                f"(rliable.library.get_interval_estimates), {reps} resamples")
    return f"percentile bootstrap over seeds (numpy; rliable not installed), {reps} resamples"


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
