"""The run directory as a training callback: what ``pgrad-train`` leaves in ``--out``.

:class:`RunRecorder` records a run into its directory (``agent.json``, the CSV logs and
TensorBoard, checkpoints with their metadata, the export, the learning curve) and guards it
(non-finite updates, non-finite returns, failed writes: one :class:`RunError` naming the last
good checkpoint). :class:`RunDirectory` is the same for ``agent.learn`` from Python: it also
creates, locks and describes (``config.yaml``) the directory. Both run in the agents' training
loop (:mod:`agents.learning`); :mod:`pgrad_app.run.trainer` adds them for ``pgrad-train``.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from agents import logger
from agents.callbacks import Checkpoint
from agents.learning import Loop
from agents.persistence import save_load as persistence
from pgrad.rl.storage.checkpoint import CheckpointStore, CheckpointWriteError, NonFiniteCheckpoint
from pgrad.rl.storage.files import write_json_atomic
from pgrad_app.config.settings import DEFAULT_CHECKPOINT_SECONDS, RunSettings, dump_run_config
from pgrad_app.errors import RunError, UserError, one_line
from pgrad_app.run import directory as rundir
from pgrad_app.run import resume as resume_lib
from pgrad_app.run.layout import RunLayout
from pgrad_app.run.logs import RunLog, plot_learning_curve


def _skipped(metrics: dict[str, Any]) -> bool:
    """Whether this update was skipped for non-finite gradients (the agent reports 1/0)."""
    value = metrics.get("nonfinite_skipped", 0.0)
    try:
        return float(np.asarray(value)) > 0
    except (TypeError, ValueError):
        return False



class RunRecorder(Checkpoint):
    """The run-directory callback: writes what a training run leaves in ``out``.

    ``agent.json`` at the start; every finished episode to ``episodes.csv`` (buffered, flushed
    before every checkpoint) and a row every ``log_every`` updates to ``updates.csv`` +
    TensorBoard (:mod:`agents.logger`); a checkpoint every ``checkpoint_every`` env steps (0: every
    ``checkpoint_seconds`` of training) and at the end (one that cannot be written, or a
    non-finite state, stops the run naming the last good checkpoint); the exported ``policy/``
    and ``learning_curve.png`` when the run finished.
    Updates the agent skipped for NaN/Inf gradients are counted and warned about once; after
    ``max_nonfinite_skips`` consecutive ones the run stops with :class:`RunError`.
    """

    def __init__(self, out: str | Path, settings: RunSettings):
        super().__init__(Path(out) / persistence.CHECKPOINTS, settings.checkpoint_every,
                         seconds=settings.checkpoint_seconds)
        self.out, self.settings = Path(out), settings
        self.store = CheckpointStore(self.directory)
        self.nonfinite_total = 0
        self.consecutive_skips = 0
        self._warned_nonfinite = False
        self.resume_meta: dict[str, Any] = {}
        self.resumed_from: int | None = None
        self.policy: Path | None = None
        self.log: RunLog | None = None
        self.cadence = logger.Cadence(settings.log_every or None)
        self.interval = logger.Interval()
        self.last_row: dict[str, float] | None = None  # the last row's TensorBoard values
        self._loop: Loop | None = None
        self._replaced = False  # an --overwrite's old run waits in .pgrad-replaced/
        self._say = lambda text: print(text, file=sys.stderr, flush=True)

    # -- checkpoints -----------------------------------------------------------------------------

    def meta(self, loop: Loop) -> dict[str, Any]:
        s = self.settings
        return {**super().meta(loop), "nonfinite_total": self.nonfinite_total,
                "consecutive_skips": self.consecutive_skips, "agent": s.agent, "env": s.env,
                "seed": s.seed, "transform": s.transform,
                **{key: resume_lib.as_recorded(getattr(s, key)) for key in resume_lib.ARGUMENTS},
                "update_columns": self.log.update_columns if self.log is not None else None}

    def save(self, loop: Loop) -> Path:
        """Writes a checkpoint now (atomically), after the logs up to it reached their files;
        raises :class:`RunError` naming the last good one if it could not be written (disk
        full) or the state is non-finite."""
        if self.log is not None:
            self.write_row(loop)
            self.log.flush()
        try:
            path = super().save(loop)
        except (NonFiniteCheckpoint, CheckpointWriteError) as err:
            raise RunError(f"{one_line(err)}; {self.where()}.") from err
        if self._replaced:  # the first checkpoint of an --overwrite: the old run may go now
            self._replaced = False
            rundir.settle(self.out, say=self._say)
        return path

    def restore(self, agent) -> None:
        """Restores the newest good checkpoint of ``out`` into ``agent`` (resuming)."""
        skipped: list[str] = []  # shown once a checkpoint was restored; else the error says it
        if not self.store.checkpoints():
            raise RunError(f"cannot resume from {self.out}: it has no checkpoint yet (it "
                           "stopped during start-up); start it again with the same command "
                           "and --out, which replaces what it wrote.")
        try:  # the one restore of pgrad (agents.load and pgrad-evaluate use it too)
            meta, path = persistence.restore(agent, self.directory, warn=skipped.append)
        except ValueError as err:
            raise RunError(f"cannot resume from {self.out}: {one_line(err)}") from err
        for text in skipped:
            print(f"warning: {text}", file=sys.stderr, flush=True)
        self.resume_meta = meta
        agent.learn_stats.load_meta(meta)
        self.nonfinite_total = int(meta.get("nonfinite_total", 0))
        self.consecutive_skips = int(meta.get("consecutive_skips", 0))
        self.last, self._saved_step = path, int(agent.env_steps)
        self.resumed_from = int(agent.env_steps)
        if self.resumed_from != int(meta.get("env_steps", self.resumed_from)):
            raise RunError(
                f"checkpoint {path} records {meta['env_steps']} env steps but the restored agent "
                f"has {self.resumed_from}; the agent's trackables() do not include its counters."
            )

    def where(self) -> str:
        """Which checkpoint a stopped run can be resumed from (every checkpoint this process
        saved or restored was verified and finite)."""
        if self.last is None:
            return "no checkpoint had been written yet"
        return f"the last good checkpoint {self.last} is intact"

    def warn(self, text: str) -> None:
        self._say(f"warning: {text}")

    # -- the callback ----------------------------------------------------------------------------

    def on_start(self, loop: Loop) -> None:
        super().on_start(loop)
        self._say = loop.say
        self._loop = loop
        self._replaced = RunLayout(self.out).replaced.is_dir()
        self.cadence.start(loop)
        try:
            write_json_atomic(RunLayout(self.out).agent,
                                          persistence.describe(loop.agent))
            self.log = RunLog(self.out, resume_step=self.resumed_from,
                              update_columns=self.resume_meta.get("update_columns"),
                              warn=self.warn)
        except OSError as err:
            raise RunError(f"cannot write the run's logs in {self.out}: {err.strerror or err} "
                           f"({self.where()}).") from err

    def on_update(self, loop: Loop) -> None:
        for env_step, ret, length in loop.new_episodes:
            if not math.isfinite(ret):
                self.write_row(loop)
                raise RunError(
                    f"env {self.settings.env!r} produced a non-finite reward: an episode ending "
                    f"at env step {env_step} has return {ret} ({self.where()})."
                )
            self.log.episode(env_step, loop.wall_s(), ret, length)
        metrics = loop.metrics
        if _skipped(metrics):
            self.nonfinite_total += 1
            self.consecutive_skips += 1
            if not self._warned_nonfinite:
                self._warned_nonfinite = True
                self.warn(f"update {loop.updates} at env step {loop.env_steps} had NaN/Inf "
                          "gradients and was skipped (no variable changed). Skips are counted in "
                          "updates.csv (nonfinite_skipped, the fraction of a row's updates; "
                          "nonfinite_total); this warning is shown once.")
        else:
            self.consecutive_skips = 0
        self.interval.add(metrics)
        if loop.evaluation is not None:
            self.log.scalars(loop.env_steps, logger.eval_tags(loop.evaluation))
        limit = self.settings.max_nonfinite_skips
        if self.consecutive_skips >= limit:
            self.write_row(loop)
            raise RunError(
                f"{self.consecutive_skips} consecutive updates had NaN/Inf gradients (limit "
                f"max_nonfinite_skips={limit}); stopped at env step {loop.env_steps}. Lower the "
                f"learning rate or check your transform and env ({self.where()})."
            )
        if self.cadence.due(loop):
            self.write_row(loop)
        super().on_update(loop)

    def write_row(self, loop: Loop) -> None:
        """The row of the updates since the last one (if any): ``updates.csv``, TensorBoard,
        and :attr:`last_row` for a tracker after this callback."""
        if not self.interval.count:
            return
        scalars, arrays = self.interval.row()
        scalars["nonfinite_total"] = float(self.nonfinite_total)
        rew, length = logger.episode_means(loop)
        columns = {**scalars, "ep_rew_mean": rew, "ep_len_mean": length,
                   "success_rate": logger.success_rate(loop)}  # empty if the env reports none
        self.last_row = logger.tags(scalars, loop, self.cadence.fps(loop))
        self.log.row(loop.env_steps, columns, self.last_row,
                     {f"train/{k}": a for k, a in arrays.items()})
        self.cadence.written()

    def on_end(self, loop: Loop) -> None:
        self.save(loop)  # the last row and the buffered episodes first
        self.log.close()
        if loop.reason != "interrupted":
            try:
                self.policy = persistence.export(loop.agent, self.out / persistence.POLICY)
            except Exception as err:  # disk full, ...: the checkpoint holds the same state
                raise RunError(f"exporting the policy to {self.out / persistence.POLICY} failed: "
                               f"{one_line(err) or type(err).__name__} ({self.where()}; "
                               "pgrad-evaluate uses it).") from err
        s = self.settings
        try:
            plot_learning_curve(RunLayout(self.out).episodes, RunLayout(self.out).curve,
                                title=f"{s.agent} on {s.env}, seed {s.seed}")
        except Exception as err:  # a plot is never worth a failed run
            self.warn(f"could not draw {self.out / 'learning_curve.png'}: "
                      f"{one_line(err) or type(err).__name__}")

    def close(self) -> None:
        if self.log is not None:
            try:  # a run that stopped on an error: its last row and episodes too
                if self._loop is not None:
                    self.write_row(self._loop)
                self.log.close()
            except OSError:
                pass


def env_settings(env: Any) -> dict[str, Any]:
    """The run settings that name an agent's env in ``config.yaml``: ``{"env": id}``, with
    ``env_kwargs`` and ``env_wrapper`` for an :class:`pgrad.rl.envs.vector.EnvRecipe` (an id with
    options and wrappers by importable name; an instance ``gymnasium.make`` built counts too).

    Raises:
      UserError: a factory, an instance that cannot be built again or a wrapper without an
        importable name: config.yaml could not rebuild it (saying what to pass instead).
    """
    from pgrad.rl.envs.recipe import EnvRecipe, env_name, recipe_of

    source, why = recipe_of(env)
    record = source.record() if isinstance(source, EnvRecipe) else None
    if isinstance(source, str):
        return {"env": source}
    if record is not None:
        return {"env": record["id"], "env_kwargs": record["kwargs"] or None,
                "env_wrapper": record["wrappers"] or None}
    why = why or (f"the env {env_name(env)!r} is a factory or has a wrapper without an "
                  "importable name")
    raise UserError(f"RunDirectory writes the env into config.yaml as data, but {why}; make the "
                    "agent from a registered id (with env_kwargs, and env_wrapper by class or "
                    "dotted name).")


class RunDirectory(RunRecorder):
    """The run directory ``pgrad-train`` writes, from Python::

        agent.learn(100_000, callbacks=RunDirectory("runs/cp"))
        pgrad.evaluate("runs/cp")       # also agents.load("runs/cp"), pgrad-evaluate runs/cp,
                                        # pgrad-train --resume runs/cp --total-steps 200000

    Creates and locks ``out`` when the run starts (refusing one that holds a run, unless
    ``overwrite``), writes its ``config.yaml`` from the agent (agent, env, seed, the env-step
    count trained to, every hyperparameter), then records the run as :class:`RunRecorder`: a row
    every ``log_every`` updates (0: the agent's, :func:`agents.logger.default_log_every`), a
    checkpoint every ``checkpoint_every`` env steps (0, the default: every ``checkpoint_seconds``
    of training) and at the end.

    Raises (when the run starts):
      UserError: ``out`` holds a run or foreign files, or cannot be written; the agent's env
        cannot be written down as data (:func:`env_settings`).
    """

    def __init__(self, out: str | Path, overwrite: bool = False, checkpoint_every: int = 0,
                 max_nonfinite_skips: int = 10, log_every: int = 0,
                 checkpoint_seconds: float = DEFAULT_CHECKPOINT_SECONDS):
        settings = RunSettings(checkpoint_every=checkpoint_every,
                               checkpoint_seconds=checkpoint_seconds,
                               max_nonfinite_skips=max_nonfinite_skips, log_every=log_every)
        settings.validate()
        super().__init__(out, settings)
        self.overwrite = overwrite
        self.lock: rundir.RunLock | None = None

    def on_start(self, loop: Loop) -> None:
        agent = loop.agent
        self.settings = dataclasses.replace(self.settings, agent=agent.name,
                                            **env_settings(agent.env_id), seed=int(agent.seed),
                                            total_steps=max(1, loop.until))
        rundir.check_new(self.out, self.overwrite)
        self.lock, _ = rundir.create(self.out, self.overwrite,
                                     dump_run_config(self.settings, agent.cfg))
        super().on_start(loop)

    def close(self) -> None:
        super().close()
        if self.lock is not None:
            rundir.settle_quietly(self.out)  # stopped before its first checkpoint: the old run
            self.lock.release()
            self.lock = None
