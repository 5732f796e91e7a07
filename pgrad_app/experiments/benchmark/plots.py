"""Learning-curve figure of one benchmark env: every agent on one axes (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def plot_env(env: str, bands: dict[str, tuple | None], path: Path) -> None:
    """Draws, per agent, the mean curve and its 95% band, and saves the PNG to ``path``.

    Args:
      env: the env id (the title).
      bands: ``{agent: (grid [G], mean [G], lower [G], upper [G])}`` from
        :func:`pgrad_app.experiments.benchmark.report.curve_band`; None: the agent finished no
        episode.
      path: where the PNG goes.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    try:
        for agent, band in bands.items():
            if band is None:
                continue
            grid, mean, lower, upper = (np.asarray(a) for a in band)
            (line,) = ax.plot(grid, mean, label=agent, linewidth=1.6)
            ax.fill_between(grid, lower, upper, color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set_title(f"{env}: training return (rolling mean of 20 episodes), mean and 95% CI")
        ax.set_xlabel("env steps")
        ax.set_ylabel("return")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
