"""rliable's statistics of a comparison: aggregate metrics with stratified bootstrap CIs,
performance profiles, sample-efficiency curves and the probability of improvement.

Every function takes per-group arrays from :mod:`pgrad_app.experiments.compare.scores` and calls
``rliable.library`` / ``rliable.metrics`` (Agarwal et al. 2021) with ``reps`` bootstrap
resamples and 95% percentile intervals; rliable draws from numpy's global random state, which is
seeded with ``seed`` for each call and restored after it
(:func:`pgrad_app.experiments.benchmark.stats.numpy_seed`), so the numbers repeat.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from pgrad_app.experiments.benchmark.stats import import_rliable, numpy_seed

#: rliable's default resamples for its figures; ``--fast`` uses FAST_REPS.
REPS, FAST_REPS = 2000, 200


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A point estimate and its 95% interval."""

    point: float
    low: float
    high: float

    def as_data(self) -> dict[str, float]:
        return {"point": self.point, "ci": [self.low, self.high]}


def _intervals(data: dict, func: Callable, reps: int, seed: int) -> tuple[dict, dict]:
    library, _ = import_rliable()
    with numpy_seed(seed):
        return library.get_interval_estimates(data, func, reps=reps)


def metric_names(gap_threshold: float | None) -> list[str]:
    """The aggregate metrics reported: the optimality gap only with a threshold."""
    return ["IQM", *(["Optimality gap"] if gap_threshold is not None else []), "Mean", "Median"]


def aggregates(scores: dict[str, np.ndarray], reps: int = REPS, seed: int = 0,
               gap_threshold: float | None = 1.0) -> dict[str, list[Estimate]]:
    """``{group: [Estimate per metric of metric_names(gap_threshold)]}`` of ``[runs, tasks]``
    scores: rliable's IQM, optimality gap (the mean shortfall below ``gap_threshold``), mean and
    median (of the per-task means)."""
    _, m = import_rliable()

    def func(x: np.ndarray) -> np.ndarray:
        gap = [m.aggregate_optimality_gap(x, gap_threshold)] if gap_threshold is not None else []
        return np.array([m.aggregate_iqm(x), *gap, m.aggregate_mean(x), m.aggregate_median(x)])

    points, cis = _intervals(scores, func, reps, seed)
    return {g: [Estimate(float(p), float(lo), float(hi))
                for p, lo, hi in zip(points[g], cis[g][0], cis[g][1])] for g in scores}


def profiles(scores: dict[str, np.ndarray], taus: np.ndarray, reps: int = REPS,
             seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Performance profiles (rliable's score distributions): per group the fraction of runs
    scoring above each ``tau`` ``[T]`` and its interval ``[2, T]``."""
    library, _ = import_rliable()
    with numpy_seed(seed):
        return library.create_performance_profile(scores, taus, reps=reps)


def sample_efficiency(curves: dict[str, np.ndarray], reps: int = REPS, seed: int = 0
                      ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The IQM over runs and tasks at each grid point of ``[runs, tasks, G]`` curves: per group
    ``[G]`` and its interval ``[2, G]``."""
    _, m = import_rliable()

    def func(x: np.ndarray) -> np.ndarray:  # [N, M, G] -> [G]
        return np.array([m.aggregate_iqm(x[..., i]) for i in range(x.shape[-1])])

    return _intervals(curves, func, reps, seed)


#: Joins two group names into rliable's pair key (a character no label holds).
PAIR = "\x1f"


def improvement(scores: dict[str, np.ndarray], order: Sequence[str], reps: int = REPS,
                seed: int = 0) -> list[tuple[str, str, Estimate]]:
    """``P(X > Y)`` (rliable's probability of improvement: the Mann-Whitney U statistic per
    task, averaged over tasks) of each pair of groups, ``X`` named first in ``order``, with its
    stratified independent bootstrap interval."""
    _, m = import_rliable()
    pairs = [(x, y) for i, x in enumerate(order) for y in order[i + 1:]]
    if not pairs:
        return []
    data = {f"{x}{PAIR}{y}": (scores[x], scores[y]) for x, y in pairs}
    points, cis = _intervals(data, m.probability_of_improvement, reps, seed)
    out = []
    for key, (x, y) in zip(data, pairs):
        low, high = np.ravel(cis[key])  # [2, 1] or [2]
        out.append((x, y, Estimate(float(np.ravel(points[key])[0]), float(low), float(high))))
    return out
