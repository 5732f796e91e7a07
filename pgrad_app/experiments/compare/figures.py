"""The comparison's PNGs, drawn by rliable's ``plot_utils`` (matplotlib, Agg): the aggregate
metrics with their intervals, the performance profiles, the sample-efficiency curves and the
probability of improvement of each pair."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pgrad_app.experiments.compare.metrics import PAIR, Estimate

#: File names, by figure.
FILES = {"aggregates": "aggregates.png", "profiles": "performance_profiles.png",
         "efficiency": "sample_efficiency.png", "improvement": "probability_of_improvement.png"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rliable import plot_utils

    return plt, plot_utils


def _save(fig, path: Path) -> Path:
    plt, _ = _pyplot()
    try:
        fig.savefig(path, dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)
    return path


def aggregates(estimates: dict[str, list[Estimate]], names: list[str], xlabel: str,
               path: Path) -> Path:
    """One panel per metric, one bar (interval) and tick (point) per group."""
    _, plot_utils = _pyplot()
    points = {g: np.array([e.point for e in es]) for g, es in estimates.items()}
    intervals = {g: np.array([[e.low for e in es], [e.high for e in es]])
                 for g, es in estimates.items()}  # [2, metrics]
    height = 0.55 * len(points)  # inches: one row per group
    fig, _ = plot_utils.plot_interval_estimates(
        points, intervals, metric_names=names, algorithms=list(estimates), xlabel=xlabel,
        row_height=0.55, subfigure_width=3.6, xlabel_y_coordinate=-0.55 / height)
    return _save(fig, path)


def profiles(taus: np.ndarray, found: dict[str, np.ndarray], cis: dict[str, np.ndarray],
             xlabel: str, path: Path) -> Path:
    """The fraction of runs scoring above ``tau``, per group, with its band."""
    plt, plot_utils = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    plot_utils.plot_performance_profiles(found, taus, performance_profile_cis=cis, ax=ax,
                                         xlabel=xlabel, ylabel="fraction of runs with score > τ",
                                         labelsize="large", ticklabelsize="medium")
    ax.legend()
    return _save(fig, path)


def efficiency(x: np.ndarray, points: dict[str, np.ndarray], cis: dict[str, np.ndarray],
               xlabel: str, ylabel: str, path: Path) -> Path:
    """The IQM of the training return at each grid point, per group, with its band."""
    plt, plot_utils = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    plot_utils.plot_sample_efficiency_curve(x, points, cis, algorithms=list(points), ax=ax,
                                            xlabel=xlabel, ylabel=ylabel, labelsize="large",
                                            ticklabelsize="medium", marker="")
    ax.legend()
    return _save(fig, path)


def improvement(pairs: list[tuple[str, str, Estimate]], path: Path) -> Path:
    """``P(X > Y)`` of each pair: its interval as a bar, its point as a tick."""
    plt, plot_utils = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 0.8 + 0.6 * len(pairs)))
    found = {f"{x}{PAIR}{y}": e.point for x, y, e in pairs}
    cis = {f"{x}{PAIR}{y}": np.array([e.low, e.high]) for x, y, e in pairs}
    plot_utils.plot_probability_of_improvement(found, cis, pair_separator=PAIR, ax=ax,
                                               xticks=[0.0, 0.25, 0.5, 0.75, 1.0],
                                               labelsize="large", ticklabelsize="medium")
    return _save(fig, path)
