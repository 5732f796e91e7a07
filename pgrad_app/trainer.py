"""The training loop: agent steps, logs, checkpoints, progress, signals, the finished run.

``Trainer(agent, settings, out).run()`` repeats ``agent.step()`` (one rollout + one update) until
``total_steps`` env steps, the ``stop_at_return`` criterion, or a signal. Acting and learning are
the agent's business; this module only records and protects the run:

* every finished episode goes to ``episodes.csv``, every update to ``updates.csv`` + TensorBoard;
* a checkpoint every ``checkpoint_every`` env steps and at the end (atomic, see checkpoint.py);
  one that cannot be written (disk full) or whose state is non-finite stops the run naming the
  last good checkpoint, which stays as it was;
* an update the agent skipped for NaN/Inf gradients is counted and warned about once; after
  ``max_nonfinite_skips`` consecutive ones the run stops with :class:`RunError`;
* a NaN/Inf episode return, or an env that fails or returns what pgrad cannot use, stops the
  run naming the env and the step;
* a failing user transform stops the run naming the transform (the agent's ``TransformError``);
* SIGINT/SIGTERM finish the current update, write a checkpoint and raise :class:`Interrupted`
  (exit 130/143); a second signal aborts at once (the previous checkpoint is still intact).
"""

from __future__ import annotations

import math
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agents import persistence
from pgrad.core.errors import EXIT_SIGINT, EXIT_SIGTERM, Interrupted, RunError, one_line
from pgrad.rl.checkpoint import CheckpointStore, CheckpointWriteError, NonFiniteCheckpoint
from pgrad.transforms import TransformError
from pgrad_app.runlog import ROLLING, RunLog, plot_learning_curve
from pgrad_app.settings import RunSettings


@dataclass
class TrainResult:
    """What a finished (or interrupted) run reports."""

    out: Path
    env_steps: int
    updates: int
    episodes: int
    wall_s: float
    rolling_return: float | None
    reason: str  # "total_steps" | "stop_at_return" | "interrupted"
    checkpoint: Path | None
    policy: Path | None


def _skipped(metrics: dict[str, Any]) -> bool:
    """Whether this update was skipped for non-finite gradients (the agent reports 1/0)."""
    value = metrics.get("nonfinite_skipped", 0.0)
    try:
        return float(np.asarray(value)) > 0
    except (TypeError, ValueError):
        return False


def _transform_error(err: BaseException) -> str | None:
    """The message of a ``TransformError`` behind ``err``, if there is one.

    Inside the agent's ``tf.function`` the error is re-raised by autograph as a ``StagingError``
    whose text ends with ``TransformError: <message>``; eagerly it is the error itself.
    """
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, TransformError):
            return one_line(err)
        text = str(err)
        marker = "TransformError: "
        if marker in text:
            return one_line(text[text.rindex(marker) + len(marker):])
        err = err.__cause__ or err.__context__
    return None


class _Progress:
    """A rich progress bar (steps, steps/s, rolling return, ETA) on a terminal; one log line per
    10% of the run when stderr is not a terminal (CI logs); nothing when quiet."""

    def __init__(self, total: int, start: int, quiet: bool):
        self.bar = None
        self.lines = not quiet and not sys.stderr.isatty()
        self.total = total
        self._t0, self._s0 = time.monotonic(), start
        self._next_line = start + max(1, total // 10)
        if quiet or self.lines:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        # Fits an 80-column terminal: bar, steps, steps/s, rolling return, elapsed, ETA.
        self.bar = Progress(
            BarColumn(bar_width=16),
            TextColumn("{task.completed:,.0f}/{task.total:,.0f}"),
            TextColumn("{task.fields[rate]} steps/s  return {task.fields[ret]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self.task = self.bar.add_task("train", total=total, completed=start, rate="-", ret="-")
        self.bar.start()

    def update(self, steps: int, rolling: float | None) -> None:
        if self.bar is None and not self.lines:
            return
        dt = time.monotonic() - self._t0
        rate = f"{(steps - self._s0) / dt:,.0f}" if dt > 0 else "-"
        ret = "-" if rolling is None else f"{rolling:.1f}"
        if self.bar is not None:
            self.bar.update(self.task, completed=steps, rate=rate, ret=ret)
        elif steps >= self._next_line:
            self._next_line = steps + max(1, self.total // 10)
            eta = (self.total - steps) * dt / max(1, steps - self._s0)
            print(f"step {steps:,}/{self.total:,}  {rate} steps/s  return {ret}  eta {eta:.0f} s",
                  file=sys.stderr, flush=True)

    def log(self, text: str) -> None:
        if self.bar is not None:
            self.bar.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=sys.stderr, flush=True)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


class Trainer:
    """Trains ``agent`` into run directory ``out`` (which must already hold ``config.yaml``).

    Args:
      agent: an agent following the ``agents`` interface (``step``, ``trackables``, ...).
      settings: the run settings (total steps, checkpoint interval, ...).
      out: the run directory.
      resume: restore the newest good checkpoint in ``out/checkpoints`` first.
      quiet: no progress bar (warnings, errors and the summary are still printed).
    """

    def __init__(self, agent, settings: RunSettings, out: str | Path, *, resume: bool = False,
                 quiet: bool = False):
        self.agent = agent
        self.settings = settings
        self.out = Path(out)
        self.quiet = quiet
        self.store = CheckpointStore(self.out / "checkpoints")
        self.updates = 0
        self.episodes = 0
        self.wall_offset = 0.0
        self.recent: deque[float] = deque(maxlen=ROLLING)
        self.nonfinite_total = 0
        self.consecutive_skips = 0
        self._warned_nonfinite = False
        self._signal: int | None = None
        self.last_checkpoint: Path | None = None
        self._saved_step: int | None = None  # env step of the checkpoint this process wrote
        self._resume_meta: dict[str, Any] = {}
        self.resumed_from: int | None = None
        if resume:
            self._restore()

    # -- checkpoints ---------------------------------------------------------------------------

    def _meta(self) -> dict[str, Any]:
        return {
            "env_steps": int(self.agent.env_steps),
            "updates": self.updates,
            "episodes": self.episodes,
            "wall_s": self._wall(),
            "recent_returns": list(self.recent),
            "nonfinite_total": self.nonfinite_total,
            "consecutive_skips": self.consecutive_skips,
            "agent": self.settings.agent,
            "env": self.settings.env,
            "seed": self.settings.seed,
            "transform": self.settings.transform,
            "update_columns": self.log.update_columns if hasattr(self, "log") else None,
        }

    def _restore(self) -> None:
        skipped: list[str] = []  # shown once a checkpoint was restored; else the error says it
        try:
            found = self.store.restore(self.agent.trackables(), warn=skipped.append)
        except ValueError as err:
            raise RunError(f"cannot resume from {self.out}: {one_line(err)}") from err
        if found is None:
            raise RunError(f"cannot resume from {self.out}: it has no checkpoint yet.")
        for text in skipped:
            print(f"warning: {text}", file=sys.stderr, flush=True)
        meta, path = found
        self._resume_meta = meta
        self.updates = int(meta.get("updates", 0))
        self.episodes = int(meta.get("episodes", 0))
        self.wall_offset = float(meta.get("wall_s", 0.0))
        self.recent.extend(float(r) for r in meta.get("recent_returns", []))
        self.nonfinite_total = int(meta.get("nonfinite_total", 0))
        self.consecutive_skips = int(meta.get("consecutive_skips", 0))
        self.last_checkpoint = path
        self.resumed_from = int(self.agent.env_steps)
        if self.resumed_from != int(meta.get("env_steps", self.resumed_from)):
            raise RunError(
                f"checkpoint {path} records {meta['env_steps']} env steps but the restored agent "
                f"has {self.resumed_from}; the agent's trackables() do not include its counters."
            )

    def checkpoint(self) -> Path:
        """Writes a checkpoint now (atomically) and returns its directory.

        Raises:
          RunError: it could not be written (disk full) or the state is non-finite; the last
            good checkpoint is unchanged and named.
        """
        step = int(self.agent.env_steps)
        if self._saved_step == step and self.last_checkpoint is not None:
            return self.last_checkpoint  # this process saved this very state already
        try:
            path = persistence.save_checkpoint(self.agent, self.store.directory, self._meta(),
                                               keep=self.store.keep)
        except (NonFiniteCheckpoint, CheckpointWriteError) as err:
            raise RunError(f"{one_line(err)}; {self._where()}.") from err
        self.last_checkpoint, self._saved_step = path, step
        return path

    def export(self) -> Path:
        """Exports the policy to ``out/policy`` (written aside, then swapped in)."""
        return persistence.export(self.agent, self.out / persistence.POLICY)

    # -- the loop ------------------------------------------------------------------------------

    def _wall(self) -> float:
        return self.wall_offset + (time.monotonic() - self._t0 if hasattr(self, "_t0") else 0.0)

    def rolling_return(self) -> float | None:
        return float(np.mean(self.recent)) if self.recent else None

    def _on_signal(self, signum, frame) -> None:
        if self._signal is not None:  # second signal: stop waiting for the update to finish
            raise KeyboardInterrupt
        self._signal = signum

    def _where(self) -> str:
        """Which checkpoint a stopped run can be resumed from (every checkpoint this process
        saved or restored was verified and finite)."""
        if self.last_checkpoint is None:
            return "no checkpoint had been written yet"
        return f"the last good checkpoint {self.last_checkpoint} is intact"

    def _warn(self, text: str) -> None:
        progress = getattr(self, "progress", None)
        if progress is not None:
            progress.log(f"warning: {text}")
        else:
            print(f"warning: {text}", file=sys.stderr, flush=True)

    def _step(self) -> dict[str, Any]:
        step = int(self.agent.env_steps)
        try:
            return self.agent.step()
        except Exception as err:
            found = _transform_error(err)
            if found is not None:
                raise RunError(
                    f"{found} (update {self.updates + 1}, env step {step}; {self._where()})"
                ) from err
            if isinstance(err, RunError):  # e.g. a rollout worker died: name the checkpoint
                raise RunError(f"{one_line(err)} ({self._where()})") from err
            if isinstance(err, (ValueError, FloatingPointError)):  # e.g. NaN from the env
                raise RunError(f"{one_line(err)} ({self._where()})") from err
            raise

    def _record(self, info: dict[str, Any]) -> None:
        for env_step, ret, length in info.get("episodes", ()):
            if not math.isfinite(float(ret)):
                raise RunError(
                    f"env {self.settings.env!r} produced a non-finite reward: an episode ending at "
                    f"env step {int(env_step)} has return {float(ret)} ({self._where()})."
                )
            self.episodes += 1
            self.recent.append(float(ret))
            self.log.episode(int(env_step), self._wall(), float(ret), int(length))
        metrics = dict(info.get("metrics", {}))
        self.updates += 1
        if _skipped(metrics):
            self.nonfinite_total += 1
            self.consecutive_skips += 1
            if not self._warned_nonfinite:
                self._warned_nonfinite = True
                self.progress.log(
                    f"warning: update {self.updates} at env step {info['env_steps']} had NaN/Inf "
                    "gradients and was skipped (no variable changed). Skips are counted in "
                    "updates.csv (nonfinite_skipped); this warning is shown once."
                )
        else:
            self.consecutive_skips = 0
        metrics["nonfinite_total"] = float(self.nonfinite_total)
        self.log.update(int(info["env_steps"]), metrics)
        limit = self.settings.max_nonfinite_skips
        if self.consecutive_skips >= limit:
            raise RunError(
                f"{self.consecutive_skips} consecutive updates had NaN/Inf gradients (limit "
                f"max_nonfinite_skips={limit}); stopped at env step {info['env_steps']}. Lower the "
                f"learning rate or check your transform and env ({self._where()})."
            )

    def run(self) -> TrainResult:
        """Trains until done, stopped or interrupted; returns what happened.

        Raises:
          RunError: the run had to stop (transform failure, non-finite numbers, NaN from env).
          Interrupted: SIGINT/SIGTERM (after a checkpoint was written).
        """
        s = self.settings
        self._t0 = time.monotonic()
        start = int(self.agent.env_steps)
        try:
            persistence.write_json_atomic(self.out / persistence.AGENT_FILE,
                                          persistence.describe(self.agent))
            self.log = RunLog(self.out, resume_step=self.resumed_from,
                              update_columns=self._resume_meta.get("update_columns"),
                              warn=self._warn)
        except OSError as err:
            raise RunError(f"cannot write the run's logs in {self.out}: {err.strerror or err} "
                           f"({self._where()}).") from err
        self.progress = _Progress(s.total_steps, start, self.quiet)
        old_handlers = {sig: signal.signal(sig, self._on_signal)
                        for sig in (signal.SIGINT, signal.SIGTERM)}
        next_ckpt = (start // s.checkpoint_every + 1) * s.checkpoint_every
        reason = "total_steps"
        try:
            while int(self.agent.env_steps) < s.total_steps:
                if self._signal is not None:
                    reason = "interrupted"
                    break
                info = self._step()
                self._record(info)
                steps = int(self.agent.env_steps)
                rolling = self.rolling_return()
                self.progress.update(min(steps, s.total_steps), rolling)
                if steps >= next_ckpt:
                    self.checkpoint()
                    next_ckpt = (steps // s.checkpoint_every + 1) * s.checkpoint_every
                if (s.stop_at_return is not None and rolling is not None
                        and len(self.recent) >= ROLLING and rolling >= s.stop_at_return):
                    reason = "stop_at_return"
                    break
            if self._signal is not None:
                reason = "interrupted"
            self.checkpoint()
        except OSError as err:  # the logs (disk full, ...); checkpoints raise RunError
            raise RunError(f"writing to {self.out} failed: {err.strerror or err} "
                           f"({self._where()}).") from err
        finally:
            self.progress.stop()
            try:
                self.log.close()
            except OSError:
                pass
            for sig, handler in old_handlers.items():
                signal.signal(sig, handler)
        policy = None
        if reason != "interrupted":
            try:
                policy = self.export()
            except Exception as err:  # disk full, ...: the checkpoint holds the same state
                raise RunError(f"exporting the policy to {self.out / persistence.POLICY} failed: "
                               f"{one_line(err) or type(err).__name__} ({self._where()}; "
                               "evaluate.py uses it).") from err
        try:
            plot_learning_curve(self.out / "episodes.csv", self.out / "learning_curve.png",
                                title=f"{s.agent} on {s.env}, seed {s.seed}")
        except Exception as err:  # a plot is never worth a failed run
            self._warn(f"could not draw {self.out / 'learning_curve.png'}: "
                       f"{one_line(err) or type(err).__name__}")
        result = TrainResult(self.out, int(self.agent.env_steps), self.updates, self.episodes,
                             self._wall(), self.rolling_return(), reason, self.last_checkpoint,
                             policy)
        if reason == "interrupted":
            code = EXIT_SIGTERM if self._signal == signal.SIGTERM else EXIT_SIGINT
            name = signal.Signals(self._signal).name
            raise Interrupted(
                f"{name}: saved a checkpoint at env step {result.env_steps} in {self.out}/"
                f"checkpoints; continue with: python scripts/train.py --resume {self.out}",
                code,
            )
        return result


def summary(result: TrainResult) -> str:
    """A few lines for the end of a run: steps, time, rolling return, where things are."""
    rolling = "-" if result.rolling_return is None else f"{result.rolling_return:.1f}"
    why = {"total_steps": "reached total_steps", "stop_at_return": "reached --stop-at-return",
           "interrupted": "interrupted"}[result.reason]
    lines = [
        f"done ({why}): {result.env_steps:,} env steps, {result.updates:,} updates, "
        f"{result.episodes:,} episodes in {result.wall_s:.1f} s",
        f"mean return of the last {ROLLING} episodes: {rolling}",
        f"run directory: {result.out}  (config.yaml, episodes.csv, updates.csv, tb/, "
        "checkpoints/, policy/, learning_curve.png)",
    ]
    return "\n".join(lines)
