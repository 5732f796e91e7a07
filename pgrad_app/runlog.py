"""What a training run writes as it goes: CSV logs, TensorBoard events, the learning curve.

* ``episodes.csv`` -- ``step,wall_s,return,length``, one row per finished training episode,
  flushed as each finishes (a crash loses nothing that was reported);
* ``updates.csv`` -- one row per update: ``step`` then the agent's metrics (columns fixed by the
  first update; later new metrics go to TensorBoard only);
* ``tb/`` -- TensorBoard scalars for both, histograms for array-valued metrics (e.g. per-step
  gradient norms);
* ``learning_curve.png`` -- episode return against env steps with a rolling mean.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

EPISODE_COLUMNS = ("step", "wall_s", "return", "length")
ROLLING = 20  # episodes in the rolling mean (the CartPole "solved" criterion uses 20)


def _fmt(x: Any) -> str:
    """Floats in a compact, exact-enough form (repr of float32 values is stable)."""
    if isinstance(x, (bool, np.bool_)):
        return str(int(x))
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    x = float(x)
    return repr(x) if math.isfinite(x) else str(x)


def truncate_csv(path: Path, max_step: int) -> int:
    """Drops rows whose ``step`` is beyond ``max_step`` (after resuming from a checkpoint, the
    rows logged after it are replayed). Returns how many rows remain."""
    if not path.exists():
        return 0
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return 0
    header, body = rows[0], rows[1:]
    kept = [r for r in body if r and r[0].lstrip("-").isdigit() and int(r[0]) <= max_step]
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(kept)
    tmp.replace(path)
    return len(kept)


class RunLog:
    """Writes the CSV and TensorBoard logs of one run.

    Args:
      out: the run directory.
      resume_step: when resuming, rows after this env step are dropped and new rows appended.
      tensorboard: write TensorBoard event files under ``out/tb``.
    """

    def __init__(self, out: str | Path, resume_step: int | None = None, tensorboard: bool = True):
        self.out = Path(out)
        self.episodes_path = self.out / "episodes.csv"
        self.updates_path = self.out / "updates.csv"
        if resume_step is not None:
            truncate_csv(self.episodes_path, resume_step)
            truncate_csv(self.updates_path, resume_step)
        fresh = not self.episodes_path.exists()
        self._episodes = open(self.episodes_path, "a", newline="")
        self._episodes_csv = csv.writer(self._episodes)
        if fresh:
            self._episodes_csv.writerow(EPISODE_COLUMNS)
            self._episodes.flush()
        self._update_columns: list[str] | None = None
        if self.updates_path.exists():
            with open(self.updates_path, newline="") as f:
                header = next(csv.reader(f), None)
            self._update_columns = header[1:] if header else None
        self._updates = open(self.updates_path, "a", newline="")
        self._updates_csv = csv.writer(self._updates)
        self._tb = None
        if tensorboard:
            import tensorflow as tf

            self._tb = tf.summary.create_file_writer(str(self.out / "tb"))

    def episode(self, step: int, wall_s: float, ret: float, length: int) -> None:
        """Logs one finished training episode (flushed immediately)."""
        self._episodes_csv.writerow([int(step), f"{wall_s:.3f}", _fmt(ret), int(length)])
        self._episodes.flush()
        if self._tb is not None:
            import tensorflow as tf

            with self._tb.as_default(step=int(step)):
                tf.summary.scalar("episode/return", float(ret))
                tf.summary.scalar("episode/length", float(length))

    def update(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Logs one update's metrics: scalars to ``updates.csv`` and TensorBoard, arrays
        (e.g. per-step gradient norms ``[T]``) as TensorBoard histograms."""
        scalars, arrays = {}, {}
        for k, v in metrics.items():
            a = np.asarray(v)
            if a.ndim == 0:
                scalars[k] = a.item()
            elif a.size:
                arrays[k] = a
        if self._update_columns is None:
            self._update_columns = list(scalars)
            self._updates_csv.writerow(["step", *self._update_columns])
        row = [int(step)] + [
            _fmt(scalars[c]) if c in scalars else "" for c in self._update_columns
        ]
        self._updates_csv.writerow(row)
        self._updates.flush()
        if self._tb is not None:
            import tensorflow as tf

            with self._tb.as_default(step=int(step)):
                for k, v in scalars.items():
                    tf.summary.scalar(f"update/{k}", float(v))
                for k, a in arrays.items():
                    tf.summary.histogram(f"update/{k}", a.astype(np.float32))

    def close(self) -> None:
        for f in (self._episodes, self._updates):
            if not f.closed:
                f.close()
        if self._tb is not None:
            self._tb.flush()
            self._tb.close()
            self._tb = None


def read_episodes(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """``(steps [N], returns [N])`` from an ``episodes.csv``."""
    steps, returns = [], []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            steps.append(int(row["step"]))
            returns.append(float(row["return"]))
    return np.asarray(steps, np.int64), np.asarray(returns, np.float64)


def rolling_mean(x: Sequence[float], window: int = ROLLING) -> np.ndarray:
    """Mean of the last ``window`` values at each position (fewer at the start)."""
    x = np.asarray(x, np.float64)
    if x.size == 0:
        return x
    c = np.cumsum(np.insert(x, 0, 0.0))
    idx = np.arange(1, x.size + 1)
    lo = np.maximum(0, idx - window)
    return (c[idx] - c[lo]) / (idx - lo)


def plot_learning_curve(episodes_csv: str | Path, png: str | Path, title: str = "") -> Path:
    """Writes a PNG of episode returns (dots) and their rolling mean (line) against env steps."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed; also safe in a headless process
    import matplotlib.pyplot as plt

    steps, returns = read_episodes(episodes_csv)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    try:
        if steps.size:
            ax.scatter(steps, returns, s=4, alpha=0.35, label="episode return")
            ax.plot(steps, rolling_mean(returns), lw=2, label=f"mean of last {ROLLING}")
            ax.legend(loc="best")
        else:
            ax.text(0.5, 0.5, "no finished episodes", ha="center", va="center",
                    transform=ax.transAxes)
        ax.set_xlabel("env steps")
        ax.set_ylabel("return")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(png)
    finally:
        plt.close(fig)
    return Path(png)
