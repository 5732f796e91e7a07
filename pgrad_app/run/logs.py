"""What a training run writes as it goes: CSV logs, TensorBoard events, the learning curve.

* ``episodes.csv`` -- ``step,wall_s,return,length``, one row per finished training episode,
  buffered and flushed every :data:`FLUSH_SECONDS`, before every checkpoint and at the end
  (a run killed at any moment has every row up to its last checkpoint on disk: what resuming
  keeps);
* ``updates.csv`` -- one row per logged interval (:mod:`agents.logger`: every ``log_every``
  updates, at checkpoints and the end): ``step`` then the interval's mean of each metric and
  ``KEY_max`` beside the gradient norms and NaN/Inf skips (columns fixed by the first row;
  later new metrics go to TensorBoard only);
* ``tb/`` -- TensorBoard ``simple_value`` scalars under Stable-Baselines3's names
  (``rollout/ep_rew_mean``, ``train/value_loss``, ``time/fps``, ``eval/mean_reward``, ...;
  :func:`agents.logger.tags`), histograms for array-valued metrics;
* ``learning_curve.png`` -- episode return against env steps with a rolling mean.

On resume both CSV files are repaired before anything is appended (:func:`repair_csv`): a lost or
damaged header is restored, a last line cut off mid-row (a crash or a full disk) and rows that do
not parse are dropped, and rows after the resumed checkpoint's step are cut (they are replayed).
"""

from __future__ import annotations

import csv
import errno
import io
import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agents.logger import TensorBoardWriter
from pgrad.rl.storage.files import write_atomic
from pgrad_app.run.layout import RunLayout

EPISODE_COLUMNS = ("step", "wall_s", "return", "length")
ROLLING = 20  # episodes in the rolling mean (the CartPole "solved" criterion uses 20)
FLUSH_SECONDS = 5.0  # buffered episode rows reach the file at least this often


def _fmt(x: Any) -> str:
    """Floats in a compact, exact-enough form (repr of float32 values is stable); None: ""."""
    if x is None:
        return ""
    if isinstance(x, (bool, np.bool_)):
        return str(int(x))
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    x = float(x)
    return repr(x) if math.isfinite(x) else str(x)


def _step_of(row: list[str]) -> int | None:
    try:
        return int(row[0]) if row else None
    except ValueError:
        return None


#: Columns whose values must be finite, and integer ones (``step`` is checked first, always).
FINITE_COLUMNS = ("wall_s", "return")
INTEGER_COLUMNS = ("length",)


def _valid_values(row: list[str], head: Sequence[str] | None) -> bool:
    """Whether every field after ``step`` holds what pgrad writes there: a number (``nan``/``inf``
    too, as a metric may be), empty (a metric missing from an interval), a finite number for
    ``wall_s``/``return`` and a whole number for ``length``. Garbage in a kept row would end up
    in the learning curve, the rolling return the resumed run restarts from, and reports."""
    names = list(head[1:]) if head is not None else [""] * (len(row) - 1)
    for name, text in zip(names, row[1:]):
        if name in INTEGER_COLUMNS:
            try:
                if int(text) < 0:
                    return False
            except ValueError:
                return False
            continue
        if text == "" and name not in FINITE_COLUMNS:
            continue
        try:
            value = float(text)
        except ValueError:
            return False
        if name in FINITE_COLUMNS and not math.isfinite(value):
            return False
    return True


def check_regular(path: Path) -> None:
    """Raises OSError if ``path`` exists but is not a regular file (a symlink to ``/dev/zero``,
    a FIFO, a folder): reading it would never end, appending to it would lose every row."""
    if path.exists() and not path.is_file():
        raise OSError(errno.EINVAL, f"{path} is not a regular file (pgrad writes its log there); "
                      "move it away")


def _parse_line(line: str) -> list[str] | None:
    """One CSV line's fields, or None if it does not parse (a field over the csv module's limit
    of 128 KiB, a stray quote...): then the line is dropped, never the whole repair."""
    try:
        return next(csv.reader([line]), [])
    except csv.Error:
        return None


def repair_csv(path: Path, max_step: int | None, header: Sequence[str] | None = None
               ) -> tuple[list[str] | None, int, int]:
    """Repairs a run's CSV log in place (atomically); returns ``(header, kept, dropped)``.

    * a last line without its newline (cut off mid-row) is dropped;
    * the header is kept if it is there, restored if ``header`` is given and the file lost it
      (emptied, or truncated into the header), else inferred from the first line;
    * rows are kept if their first field is an integer step ``<= max_step`` (any step if
      ``max_step`` is None), with a known header they have as many fields as it has, and every
      value is one pgrad writes there (:func:`_valid_values`); a line the csv module cannot
      parse (a field over 128 KiB) is dropped like any damaged row.

    ``header`` is None in the result if the file has none and none was given (then rows are kept
    as they are, for the caller to head once it knows the columns).
    """
    if not path.exists():
        return (list(header) if header else None), 0, 0
    check_regular(path)
    raw = path.read_bytes().decode("utf-8", errors="replace")
    lines = raw.split("\n")
    partial = lines.pop()  # "" if the file ends with a newline (or is empty)
    dropped = 1 if partial.strip() else 0
    parsed = [_parse_line(line) for line in lines]
    dropped += sum(r is None for r in parsed)
    rows = [r for r in parsed if r is not None]
    found = None
    if rows and _step_of(rows[0]) is None:  # a header line (or the damaged remains of one)
        first = rows.pop(0)
        if header is None or first == list(header):
            found = first
        else:
            dropped += 1
    head = list(header) if header is not None else found
    kept = []
    for row in rows:
        step = _step_of(row)
        ok = step is not None and (max_step is None or step <= max_step)
        if ok and head is not None and len(row) != len(head):
            ok = False
        if ok and not _valid_values(row, head):
            ok = False
        if ok:
            kept.append(row)
        elif step is None or max_step is None or step <= max_step:
            dropped += 1  # unreadable, not merely after the resumed step
    buf = io.StringIO()
    writer = csv.writer(buf)
    if head is not None:
        writer.writerow(head)
    writer.writerows(kept)
    write_atomic(path, buf.getvalue())
    return head, len(kept), dropped


class _TensorBoard:
    """:class:`agents.logger.TensorBoardWriter` whose failures are ``OSError`` s, as the CSV
    files' are: TensorFlow reports a full disk as ``ResourceExhaustedError`` (an ``OpError``),
    which the run's one-line handling of failed writes would not recognise."""

    def __init__(self, directory: Path):
        self.directory = directory
        self._writer = self._call(TensorBoardWriter, directory)

    def _call(self, fn, *args):
        import tensorflow as tf

        try:
            return fn(*args)
        except tf.errors.OpError as err:
            text = str(err.message or err)
            code = errno.ENOSPC if "No space left on device" in text else errno.EIO
            raise OSError(code, f"{os.strerror(code)} (TensorBoard events in "
                                f"{self.directory})") from None

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        self._call(self._writer.scalars, step, values)

    def histograms(self, step: int, arrays: Mapping[str, Any]) -> None:
        self._call(self._writer.histograms, step, arrays)

    def flush(self) -> None:
        self._call(self._writer.flush)

    def close(self) -> None:
        self._call(self._writer.close)


class RunLog:
    """Writes the CSV and TensorBoard logs of one run.

    Args:
      out: the run directory.
      resume_step: when resuming, both files are repaired (:func:`repair_csv`): rows after this
        env step are dropped, then new rows appended.
      update_columns: when resuming, the metric columns of ``updates.csv`` as the checkpoint
        recorded them (restores a lost header); None: read from the file, or the next update.
      tensorboard: write TensorBoard event files under ``out/tb``.
      warn: called with one line for each repair that dropped something.
    """

    def __init__(self, out: str | Path, resume_step: int | None = None, tensorboard: bool = True,
                 update_columns: Sequence[str] | None = None, warn=None):
        self.out = Path(out)
        self.episodes_path = RunLayout(self.out).episodes
        self.updates_path = RunLayout(self.out).updates
        self._update_columns: list[str] | None = None
        for path in (self.episodes_path, self.updates_path):
            check_regular(path)
        if resume_step is not None:
            known = ["step", *update_columns] if update_columns else None
            for path, header in ((self.episodes_path, list(EPISODE_COLUMNS)),
                                 (self.updates_path, known)):
                head, _, dropped = repair_csv(path, resume_step, header)
                if dropped and warn is not None:
                    warn(f"{path}: dropped {dropped} damaged line(s) while resuming.")
                if path == self.updates_path and head:
                    self._update_columns = head[1:]
        fresh = not self.episodes_path.exists() or self.episodes_path.stat().st_size == 0
        self._episodes = open(self.episodes_path, "a", newline="")
        self._episodes_csv = csv.writer(self._episodes)
        if fresh:
            self._episodes_csv.writerow(EPISODE_COLUMNS)
            self._episodes.flush()
        if resume_step is None and self.updates_path.exists():
            with open(self.updates_path, newline="") as f:
                header = next(csv.reader(f), None)
            self._update_columns = header[1:] if header else None
        self._updates = open(self.updates_path, "a", newline="")
        self._updates_csv = csv.writer(self._updates)
        self._flushed = time.monotonic()
        if self._update_columns is not None and self.updates_path.stat().st_size == 0:
            self._head_updates(["step", *self._update_columns])  # resumed after it was lost
        self._tb: _TensorBoard | None = None
        if tensorboard:
            self._tb = _TensorBoard(RunLayout(self.out).tensorboard)

    def episode(self, step: int, wall_s: float, ret: float, length: int) -> None:
        """Logs one finished training episode (buffered: :meth:`flush`, at least every
        :data:`FLUSH_SECONDS`)."""
        self._episodes_csv.writerow([int(step), f"{wall_s:.3f}", _fmt(ret), int(length)])
        now = time.monotonic()
        if now - self._flushed >= FLUSH_SECONDS:
            self._episodes.flush()
            self._flushed = now

    def row(self, step: int, columns: Mapping[str, Any], scalars: Mapping[str, float] = (),
            arrays: Mapping[str, Any] = ()) -> None:
        """One logged row: ``columns`` (pgrad's metric names) to ``updates.csv``, ``scalars``
        (their TensorBoard names) as TensorBoard scalars, ``arrays`` as histograms."""
        if self._update_columns is None:
            self._update_columns = list(columns)
            self._head_updates(["step", *self._update_columns])
        self._updates_csv.writerow([int(step)] + [_fmt(columns.get(c))
                                                  for c in self._update_columns])
        self._updates.flush()  # a row per interval: cheap
        if self._tb is not None:
            if scalars:
                self._tb.scalars(step, scalars)
            self._tb.histograms(step, dict(arrays))

    def scalars(self, step: int, scalars: Mapping[str, float]) -> None:
        """TensorBoard scalars only (an evaluation's ``eval/*``)."""
        if self._tb is not None:
            self._tb.scalars(step, scalars)

    def update(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Logs one set of metrics as it is: scalars to ``updates.csv`` and as TensorBoard
        ``train/KEY``, arrays (e.g. per-step gradient norms ``[T]``) as histograms."""
        scalars, arrays = {}, {}
        for k, v in metrics.items():
            a = np.asarray(v)
            if a.ndim == 0:
                scalars[k] = a.item()
            elif a.size:
                arrays[f"train/{k}"] = a
        self.row(step, scalars, {f"train/{k}": float(v) for k, v in scalars.items()}, arrays)

    def flush(self) -> None:
        """Everything logged so far to the files (before a checkpoint, at the end)."""
        for f in (self._episodes, self._updates):
            if not f.closed:
                f.flush()
        self._flushed = time.monotonic()
        if self._tb is not None:
            self._tb.flush()

    @property
    def update_columns(self) -> list[str] | None:
        """The metric columns of ``updates.csv`` (after ``step``), once known."""
        return None if self._update_columns is None else list(self._update_columns)

    def _head_updates(self, header: list[str]) -> None:
        """Writes the header of ``updates.csv``: first line of a new file; for a resumed file
        that had lost it, put in front of the rows that fit it."""
        self._updates.flush()
        if self.updates_path.stat().st_size == 0:
            self._updates_csv.writerow(header)
            return
        self._updates.close()
        repair_csv(self.updates_path, None, header)
        self._updates = open(self.updates_path, "a", newline="")
        self._updates_csv = csv.writer(self._updates)

    def close(self) -> None:
        for f in (self._episodes, self._updates):
            if not f.closed:
                f.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def read_episodes(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """``(steps [N], returns [N])`` from an ``episodes.csv``; rows that do not parse are skipped
    (a damaged or headerless file gives fewer points, never an error)."""
    steps, returns = [], []
    try:
        check_regular(Path(path))
        with open(path, newline="", errors="replace") as f:
            lines = f.read().split("\n")
    except OSError:
        lines = []
    head = _parse_line(lines[0]) if lines else None
    for line in lines[1:]:
        row = _parse_line(line)  # a field over 128 KiB: that line only is skipped
        try:
            fields = dict(zip(head or (), row or ()))
            step, ret = int(fields["step"]), float(fields["return"])
        except (KeyError, TypeError, ValueError):
            continue
        steps.append(step)
        returns.append(ret)
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
