"""One trial of ``pgrad-tune``: sample, build, train with ``agent.learn`` and the callbacks that
report evaluations to the pruner, guard against divergence and handle signals (see
:mod:`pgrad_app.experiments.tuning.search`)."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import numpy as np

from agents.callbacks import EvalCallback, row_score
from agents.learning import Callback, Loop
from pgrad.rl.evaluation.evaluate_policy import eval_seed
from pgrad_app.config import plugins
from pgrad_app.config import settings as config_lib
from pgrad_app.config.values import to_plain
from pgrad_app.errors import Interrupted, RunError, UserError, one_line
from pgrad_app.experiments.tuning.study import (
    TRIAL_LOGS,
    TuneSpec,
    counted_trials,
    import_optuna,
    owner,
    recover,
)


class TrialFailed(Exception):
    """Ends a trial as failed (its reason is in the trial's ``fail_reason``)."""


class Report(Callback):
    """After each evaluation (``loop.evaluation``, set by an ``EvalCallback`` before this one):
    reports its score (:func:`~agents.callbacks.row_score`: the mean return, or under
    self-play the worse seat's win rate, since a zero-sum team's return is always 0) to the
    Optuna trial as step 1, 2, ... (trials whose rollouts differ in length still compare
    evaluation by evaluation) and stops the run if the pruner says so."""

    name = "pruned"

    def __init__(self, trial, log: Callable[[str], None]):
        self.trial, self.log = trial, log
        self.count, self.last, self.pruned = 0, None, False

    def on_update(self, loop: Loop) -> bool:
        row = loop.evaluation
        if row is None:
            return True
        value = row_score(row)
        if not math.isfinite(value):
            raise RunError(f"evaluation at env step {loop.env_steps} returned {value}.")
        self.count, self.last = self.count + 1, value
        self.trial.report(value, self.count)
        self.log(f"evaluation {self.count} at env step {loop.env_steps:,}: "
                 + self.describe(row, value))
        self.pruned = self.trial.should_prune()
        return not self.pruned


    @staticmethod
    def describe(row: dict, value: float) -> str:
        """The log line's reading: the return, or the score when it is not the return."""
        ret = float(row["return_mean"])
        said = f"return {ret:.2f} +- {float(row['return_std']):.2f}"
        return said if value == ret else f"score {value:.3f} ({said})"


class Guard(Callback):
    """What ``pgrad-train``'s recorder refuses, for a trial: a non-finite episode return, and
    ``max_nonfinite_skips`` consecutive updates skipped for NaN/Inf gradients."""

    def __init__(self, limit: int = 10):
        self.limit, self.skips = limit, 0

    def on_update(self, loop: Loop) -> None:
        for step, ret, _ in loop.new_episodes:
            if not math.isfinite(ret):
                raise RunError(f"an episode ending at env step {step} has return {ret}.")
        skipped = float(np.asarray(loop.metrics.get("nonfinite_skipped", 0.0))) > 0
        self.skips = self.skips + 1 if skipped else 0
        if self.skips >= self.limit:
            raise RunError(f"{self.skips} consecutive updates had NaN/Inf gradients (stopped at "
                           f"env step {loop.env_steps}).")


class Signals(Callback):
    """SIGINT/SIGTERM as ``pgrad-train`` takes them: the running trial stops after its current
    update (it is then marked ``abandoned``, not counted) and no trial starts after it; a second
    signal stops at once. As a callback it ends the training loop; :meth:`check` raises
    :class:`Interrupted` (exit 130 / 143) at the safe points between."""

    name = "interrupted"

    def __init__(self):
        self.signum: int | None = None
        self._old: dict = {}

    def __enter__(self) -> Signals:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            self._old = {sig: signal.signal(sig, self._on_signal)
                         for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc) -> None:
        import signal

        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        self._old = {}

    def _on_signal(self, signum, frame) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum

    def on_update(self, loop: Loop) -> bool:
        return self.signum is None

    def check(self) -> None:
        import signal

        from pgrad_app.errors import EXIT_SIGINT, EXIT_SIGTERM

        if self.signum is not None:
            code = EXIT_SIGTERM if self.signum == signal.SIGTERM else EXIT_SIGINT
            raise Interrupted(f"{signal.Signals(self.signum).name}: stopped; the study keeps "
                              "its finished trials (the running one is not counted): the same "
                              "command continues it", code)


def _training_error(err: BaseException) -> str | None:
    """The one-line reason of a training failure ``pgrad-train`` would stop with, or None."""
    from pgrad_app.run.trainer import _transform_error  # the trainer's own reading of it

    found = _transform_error(err)
    if found is not None:
        return f"transform failed: {found}"
    if isinstance(err, (RunError, ValueError, FloatingPointError)):  # EnvError is a ValueError
        return one_line(err) or type(err).__name__
    return None


def run_trial(spec: TuneSpec, trial, log: Callable[[str], None],
              signals: Signals | None = None) -> float:
    """Samples, trains and evaluates one trial; returns its value (the last evaluation).

    Raises:
      optuna.TrialPruned: pruned after an evaluation, or an invalid sampled combination.
      TrialFailed: training failed (its reason in the trial's ``fail_reason``).
      Interrupted: ``signals`` caught SIGINT/SIGTERM (training stopped after an update).
    """
    import agents

    optuna = import_optuna()
    cls = agents.get(spec.agent)
    sampled = spec.space.sample(trial)
    log(f"trial {trial.number}: " + ", ".join(f"{k}={to_plain(v)}" for k, v in sampled.items()))

    def invalid(err) -> NoReturn:
        reason = f"invalid setting: {one_line(err)}"
        trial.set_user_attr("invalid", reason)
        log(f"pruned: {reason}")
        raise optuna.TrialPruned(reason)

    try:
        cfg = config_lib.build(cls.Config, {**spec.base, **sampled},
                               {k: f"trial {trial.number}: {k}" for k in sampled})
    except UserError as err:
        invalid(err)
    hyper = {f.name: to_plain(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    trial.set_user_attr("hyperparameters", hyper)
    try:
        agent = cls(cfg, env_id=plugins.resolve_env(spec.env), seed=spec.seed)
    except (ValueError, TypeError) as err:
        invalid(err)
    report = Report(trial, log)
    evaluations = EvalCallback(every=spec.eval_every, episodes=spec.eval_episodes,
                               seed=eval_seed(spec.seed), verbose=False)
    callbacks = [Guard(), evaluations, report, *([signals] if signals else [])]
    try:
        agent.learn(spec.budget, callbacks=callbacks, progress=False)
    except Exception as err:
        reason = _training_error(err)
        if reason is None:
            raise
        trial.set_user_attr("fail_reason", reason)
        log(f"failed: {reason}")
        raise TrialFailed(reason) from err
    finally:
        agent.close()
    if signals is not None:
        signals.check()
    if report.pruned:
        log(f"pruned after evaluation {report.count} of {spec.n_evaluations}")
        raise optuna.TrialPruned(f"pruned after evaluation {report.count}")
    log(f"complete: return {report.last:.2f}")
    return report.last


# -- the study loop ---------------------------------------------------------------------------


def objective(spec: TuneSpec, n_trials: int, results: str | os.PathLike,
              signals: Signals | None = None) -> Callable:
    """Optuna's objective: claims a slot of the ``n_trials`` (or ends as surplus), records who
    runs it, and runs :func:`run_trial` with its log in ``RESULTS/trials/trial-NNNN.log``."""
    logs = Path(results) / TRIAL_LOGS

    def run(trial) -> float:
        study = trial.study
        trial.set_user_attr("owner", owner())  # first: a kill from here on leaves it recoverable
        if signals is not None and signals.signum is not None:
            trial.set_user_attr("abandoned", "interrupted before it started")
            signals.check()
        recover(study)
        if sum(t.number < trial.number for t in counted_trials(study)) >= n_trials:
            trial.set_user_attr("surplus", True)
            study.stop()
            raise TrialFailed("surplus: the study already holds its trials")
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / f"trial-{trial.number:04d}.log", "a") as f:
            def log(line: str) -> None:
                f.write(line + "\n")
                f.flush()

            try:
                return run_trial(spec, trial, log, signals)
            except (KeyboardInterrupt, Interrupted):
                with contextlib.suppress(Exception):  # a second signal may cut the database off
                    trial.set_user_attr("abandoned", "interrupted")
                log("interrupted")
                raise

    return run


def trial_line(trial) -> str:
    """One line for the terminal: ``trial 3 pruned: pruned after evaluation 2 (return 21.40)
    [learning_rate=0.00123 ...]``."""
    state = {"FAIL": "failed"}.get(trial.state.name, trial.state.name.lower())
    if state == "complete":
        what = f"return {trial.value:.2f}"
    elif state == "pruned":
        last = max(trial.intermediate_values, default=None)
        what = trial.user_attrs.get("invalid") or (
            f"pruned after evaluation {last} (return {trial.intermediate_values[last]:.2f})"
            if last is not None else "pruned")
    else:
        what = str(trial.user_attrs.get("fail_reason") or trial.user_attrs.get("abandoned")
                   or "?")
    params = " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                      for k, v in trial.params.items())
    return f"trial {trial.number} {state}: {what}  [{params}]"
