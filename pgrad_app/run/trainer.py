"""Training into a run directory: what ``pgrad-train`` runs, over ``agent.learn``'s loop.

``Trainer(agent, settings, out).run()`` runs :class:`agents.learning.Loop` (one rollout + one
update per step, the same loop ``agent.learn`` runs) until ``total_steps`` env steps, the
``stop_at_return`` criterion, an evaluation target or a signal, with callbacks that record and
protect the run:

* every finished episode goes to ``episodes.csv``, a row every ``log_every`` updates to
  ``updates.csv`` + TensorBoard (SB3's names: :mod:`agents.logger`);
* a checkpoint every ``checkpoint_every`` env steps (0: every ``checkpoint_seconds`` of
  training) and at the end (atomic, see checkpoint.py);
  one that cannot be written (disk full) or whose state is non-finite stops the run naming the
  last good checkpoint, which stays as it was;
* an update the agent skipped for NaN/Inf gradients is counted and warned about once; after
  ``max_nonfinite_skips`` consecutive ones the run stops with :class:`RunError`;
* a NaN/Inf episode return, or an env that fails or returns what pgrad cannot use, stops the
  run naming the env and the step;
* a failing user transform stops the run naming the transform (the agent's ``TransformError``);
* with ``eval_every``, an evaluation on separate envs (deterministic) every so many env steps:
  ``eval.csv``, the best policy so far in ``best/``;
* SIGINT/SIGTERM finish the current update, write a checkpoint and raise :class:`Interrupted`
  (exit 130/143); an evaluation under way is dropped, not waited for (an env whose episodes
  run long); a second signal aborts at once (the previous checkpoint is still intact).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.callbacks import EvalCallback, EvaluationInterrupted, StopAtReturn
from agents.learning import ROLLING, Callback, Loop, as_callbacks
from pgrad.rl.envs.vector import EnvError
from pgrad.transforms import TransformError
from pgrad_app.config.settings import RunSettings
from pgrad_app.errors import EXIT_SIGINT, EXIT_SIGTERM, Interrupted, RunError, command, one_line
from pgrad_app.run.recorder import RunRecorder


@dataclass
class TrainResult:
    """What a finished (or interrupted) run reports."""

    out: Path
    env_steps: int
    updates: int
    episodes: int
    wall_s: float
    rolling_return: float | None
    reason: str  # "total_steps" | "stop_at_return" | "eval_target" | "interrupted" | a callback
    checkpoint: Path | None
    policy: Path | None


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


class _Signals(Callback):
    """SIGINT/SIGTERM finish the current update, then stop the run (reason ``interrupted``); a
    second signal aborts at once (the previous checkpoint is still intact)."""

    name = "interrupted"

    def __init__(self, evaluations=()):
        self.signum: int | None = None
        self._old: dict = {}
        self.evaluations = list(evaluations)  # EvalCallbacks: interrupted, never waited for

    def _on_signal(self, signum, frame) -> None:
        if self.signum is not None:  # second signal: stop waiting for the update to finish
            raise KeyboardInterrupt
        self.signum = signum
        if any(e.running for e in self.evaluations):  # may run long: dropped, not waited for
            raise EvaluationInterrupted

    def on_start(self, loop: Loop) -> None:
        self._old = {sig: signal.signal(sig, self._on_signal)
                     for sig in (signal.SIGINT, signal.SIGTERM)}

    def on_update(self, loop: Loop) -> bool:
        return self.signum is None

    def close(self) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        self._old = {}


class Trainer:
    """Trains ``agent`` into run directory ``out`` (which must already hold ``config.yaml``).

    The loop is the agent's own (:class:`agents.learning.Loop`, what ``agent.learn`` runs) with
    the run-directory callbacks (:class:`RunRecorder`), ``stop_at_return``, evaluation every
    ``eval_every`` env steps (``eval.csv``, ``best/``), tracking, the user's callbacks and the
    signal handling.

    Args:
      agent: an agent following the ``agents`` interface (``step``, ``trackables``, ...).
      settings: the run settings (total steps, checkpoint interval, ...).
      out: the run directory.
      resume: restore the newest good checkpoint in ``out/checkpoints`` first.
      quiet: no progress bar (warnings, errors and the summary are still printed).
      callbacks: more callbacks (as ``agent.learn`` takes them), after the run's own.
    """

    def __init__(self, agent, settings: RunSettings, out: str | Path, *, resume: bool = False,
                 quiet: bool = False, callbacks: Any = None):
        self.agent, self.settings, self.out, self.quiet = agent, settings, Path(out), quiet
        self.recorder = RunRecorder(self.out, settings)
        self.extra = callbacks
        if resume:
            self.recorder.restore(agent)

    @property
    def resumed_from(self) -> int | None:
        return self.recorder.resumed_from

    @property
    def last_checkpoint(self) -> Path | None:
        return self.recorder.last

    def callbacks(self) -> list:
        """The run's callbacks, in the order they see each update."""
        s = self.settings
        out: list = [self.recorder]
        if s.stop_at_return is not None:
            out.append(StopAtReturn(s.stop_at_return))
        if s.eval_every:
            out.append(EvalCallback(every=s.eval_every, episodes=s.eval_episodes,
                                    log_dir=self.out))
        if s.track:
            from pgrad_app.run.tracking import tracker

            out.append(tracker(s.track, self.out, s, self.recorder))
        return out

    def run(self) -> TrainResult:
        """Trains until done, stopped or interrupted; returns what happened.

        Raises:
          RunError: the run had to stop (transform failure, non-finite numbers, NaN from env).
          Interrupted: SIGINT/SIGTERM (after a checkpoint was written).
        """
        own, extra = self.callbacks(), as_callbacks(self.extra)
        signals = _Signals(c for c in [*own, *extra] if isinstance(c, EvalCallback))
        loop = Loop(self.agent, self.settings.total_steps, [*own, *extra, signals],
                    progress=not self.quiet)
        try:
            loop.run()
        except Exception as err:
            if isinstance(err, RunError) and not loop.in_step:
                raise
            if loop.in_step:
                raise self._step_error(err, loop) from err
            if isinstance(err, EnvError):  # the evaluation env of --eval-every failed
                raise RunError(f"{one_line(err)} (the evaluation at env step "
                               f"{loop.env_steps:,}; {self.recorder.where()})") from err
            if isinstance(err, OSError):  # the logs (disk full, ...); checkpoints raise RunError
                raise RunError(f"writing to {self.out} failed: {err.strerror or err} "
                               f"({self.recorder.where()}).") from err
            raise
        r = self.recorder
        result = TrainResult(self.out, loop.env_steps, loop.updates, loop.stats.episodes,
                             loop.stats.wall_s, loop.rolling_return(), loop.reason, r.last,
                             r.policy)
        if loop.reason == "interrupted":
            code = EXIT_SIGTERM if signals.signum == signal.SIGTERM else EXIT_SIGINT
            name = signal.Signals(signals.signum).name
            raise Interrupted(
                f"{name}: saved a checkpoint at env step {result.env_steps} in {self.out}/"
                f"checkpoints; continue with: {command('train')} --resume {self.out}",
                code,
            )
        return result

    def _step_error(self, err: Exception, loop: Loop) -> Exception:
        """The one-line error for a failed ``agent.step()`` (or ``err`` itself)."""
        if isinstance(err, RunError):  # e.g. a rollout worker died: name the checkpoint
            return RunError(f"{one_line(err)} ({self.recorder.where()})")
        found = _transform_error(err)
        if found is not None:
            return RunError(f"{found} (update {loop.updates + 1}, env step {loop.env_steps}; "
                            f"{self.recorder.where()})")
        if isinstance(err, (ValueError, FloatingPointError)):  # e.g. NaN from the env
            return RunError(f"{one_line(err)} ({self.recorder.where()})")
        return err


def summary(result: TrainResult) -> str:
    """A few lines for the end of a run: steps, time, rolling return, where things are."""
    rolling = "-" if result.rolling_return is None else f"{result.rolling_return:.1f}"
    why = {"total_steps": "reached total_steps", "stop_at_return": "reached --stop-at-return",
           "eval_target": "an evaluation reached its target",
           "interrupted": "interrupted"}.get(result.reason, f"stopped by {result.reason}")
    lines = [
        f"done ({why}): {result.env_steps:,} env steps, {result.updates:,} updates, "
        f"{result.episodes:,} episodes in {result.wall_s:.1f} s",
        f"mean return of the last {ROLLING} episodes: {rolling}",
        f"run directory: {result.out}  (config.yaml, episodes.csv, updates.csv, tb/, "
        "checkpoints/, policy/, learning_curve.png)",
    ]
    return "\n".join(lines)
