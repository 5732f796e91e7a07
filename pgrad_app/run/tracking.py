"""Experiment tracking beside the run directory: ``--track wandb``.

The run directory stays the record (config.yaml, the CSV logs, checkpoints, the export); a
tracker sends a copy of the same things to a tracking service, here Weights & Biases (the
optional ``wandb`` extra; ``WANDB_MODE=offline`` keeps everything local, under ``DIR/wandb``):

* the config: run settings and every hyperparameter, as in ``config.yaml``;
* every row the run directory writes (:mod:`agents.logger`: every ``log_every`` updates), with
  the names TensorBoard gets (``rollout/ep_rew_mean``, ``train/value_loss``, ``time/fps``, ...);
* every evaluation during training (``eval/mean_reward``, ``eval/std_reward``,
  ``eval/mean_ep_length``);
* at the end: the learning curve image and the episodes as a table;
* ``pgrad-evaluate`` of a tracked run adds its result (``final_eval/...``) and, with
  ``--video``, the recorded videos to the same tracked run (:func:`log_evaluation`).

A resumed run continues the same tracked run (its id is kept in ``DIR/wandb-run-id``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import re
import secrets
import shutil
from pathlib import Path
from typing import Any

from agents.learning import Callback, Loop
from agents.logger import eval_tags, finite
from pgrad_app.errors import UserError, one_line
from pgrad_app.run.layout import RunLayout
from pgrad_app.run.logs import read_episodes

RUN_ID_FILE = RunLayout.TRACKER_ID
RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def require(name: str) -> None:
    """Refuses (:class:`UserError`) a tracker whose package is not installed, before any work."""
    import importlib.util

    if name == "wandb" and importlib.util.find_spec("wandb") is None:
        raise UserError("--track wandb needs wandb: pip install 'pgrad[wandb]' (or pip install "
                        "wandb).")


def check_can_start(name: str) -> None:
    """Refuses (:class:`UserError`) a tracker that could not start, before anything is written:
    for wandb online, no credentials (``WANDB_API_KEY``, ``~/.netrc``, wandb's settings). It
    never prompts, as the tracked run's own start does not (wandb runs silent)."""
    if name != "wandb":
        return
    require("wandb")
    import wandb

    try:
        with contextlib.redirect_stderr(io.StringIO()):  # wandb's "loaded credentials" lines
            if wandb.setup().settings.mode in ("offline", "dryrun", "disabled"):
                return  # nothing to log in to
            if wandb.login(verify=False, prompt=False):
                return
    except (wandb.errors.Error, ValueError) as err:  # ValueError: a bad WANDB_* setting
        why = one_line(str(err))
    else:
        why = "no API key is configured"
    raise UserError(f"--track wandb: wandb could not start: {why}{_HELP}") from None


_HELP = (" (wandb login, or WANDB_API_KEY=..., or WANDB_MODE=offline to keep the log in the "
         "run directory's wandb/).")


def tracker(name: str, out: Path, settings: Any, recorder: Any = None) -> Callback:
    """The tracking callback ``name`` names (``"wandb"``), sending ``recorder``'s rows (a
    :class:`pgrad_app.run.recorder.RunRecorder` before it in the loop)."""
    if name == "wandb":
        return WandbTracker(out, settings, recorder=recorder)
    raise UserError(f"--track: unknown tracker {name!r}; known: wandb.")


class WandbTracker(Callback):
    """Logs a run to Weights & Biases (see the module docstring).

    Args:
      out: the run directory (wandb's files go to ``out/wandb``).
      settings: the run settings (``RunSettings``); the agent's hyperparameters come from the
        agent when the run starts.
      project: the wandb project (default: ``$WANDB_PROJECT`` or ``"pgrad"``).
      recorder: the run's :class:`~pgrad_app.run.recorder.RunRecorder` (before this callback):
        its rows are sent as they are written.
    """

    def __init__(self, out: str | Path, settings: Any, project: str | None = None,
                 recorder: Any = None):
        require("wandb")
        import wandb

        self.wandb = wandb
        # pgrad's package ``agents`` shares its name with an LLM library wandb looks for.
        os.environ.setdefault("WANDB_DISABLE_WEAVE", "true")
        self.out, self.settings = Path(out), settings
        self.project = project or os.environ.get("WANDB_PROJECT", "pgrad")
        self.run = None
        self.recorder = recorder
        self._sent: dict | None = None

    def _run_id(self) -> str:
        path = self.out / RUN_ID_FILE
        if path.exists() or path.is_symlink():
            try:
                run_id = path.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as err:
                raise UserError(f"{path}: cannot read the tracked run's id ({err}); delete the "
                                "file to start a new tracked run.") from None
            # wandb's run ids: letters, digits, '-' and '_' (its path and URL component).
            if not RUN_ID.fullmatch(run_id):
                raise UserError(f"{path}: {run_id[:40]!r} is not a wandb run id (1 to 64 "
                                "letters, digits, '-' or '_'); restore it, or delete the file "
                                "to start a new tracked run.")
            return run_id
        run_id = secrets.token_hex(6)
        path.write_text(run_id + "\n")
        return run_id

    def start(self, config: dict[str, Any] | None = None) -> None:
        """Starts (or continues) the tracked run of ``out``."""
        id_file = self.out / RUN_ID_FILE
        new = not (id_file.exists() or id_file.is_symlink())
        run_id = self._run_id()
        try:
            self.run = self.wandb.init(
                project=self.project, dir=str(self.out), id=run_id, resume="allow",
                name=self.out.name, config=config, settings=self.wandb.Settings(
                    console="off", silent=True, x_disable_stats=True, x_disable_meta=True,
                    x_save_requirements=False, x_disable_machine_info=True))
        except self.wandb.errors.Error as err:  # no login, a server that refuses, bad settings
            if new:  # no tracked run has this id: nothing may "continue" or sync it later
                self._forget(run_id)
            raise UserError(f"--track wandb: wandb could not start: {err} (wandb login, or "
                            "WANDB_API_KEY=..., or WANDB_MODE=offline to keep the log in "
                            f"{self.out / 'wandb'}).") from None

    def _forget(self, run_id: str) -> None:
        """Removes the id file and wandb's local folder of a tracked run that never started
        (``wandb sync`` would send it); wandb's debug logs, which say why, stay."""
        (self.out / RUN_ID_FILE).unlink(missing_ok=True)
        local = self.out / "wandb"
        for folder in local.glob(f"*run-*-{run_id}"):
            shutil.rmtree(folder, ignore_errors=True)
        latest = local / "latest-run"
        if latest.is_symlink() and not latest.exists():
            latest.unlink(missing_ok=True)

    def on_start(self, loop: Loop) -> None:
        self.start({"run": dataclasses.asdict(self.settings),
                    "hyperparameters": dataclasses.asdict(loop.agent.cfg)})

    def on_update(self, loop: Loop) -> None:
        data: dict[str, Any] = {}
        row = self.recorder.last_row if self.recorder is not None else None
        if row is not None and row is not self._sent:  # the run directory's new row
            self._sent = row
            data.update(finite(row))
        if loop.evaluation is not None:
            data.update(eval_tags(loop.evaluation))
        if data:
            self.run.log(data, step=loop.env_steps)

    def on_end(self, loop: Loop) -> None:
        row = self.recorder.last_row if self.recorder is not None else None
        if row is not None and row is not self._sent:  # the final row, written at the end
            self._sent = row
            self.run.log(finite(row), step=loop.env_steps)
        wandb, final = self.wandb, {}
        curve = RunLayout(self.out).curve
        if curve.is_file():
            final["learning_curve"] = wandb.Image(str(curve))
        steps, returns = read_episodes(RunLayout(self.out).episodes)
        if steps.size:
            final["episodes"] = wandb.Table(columns=["step", "return"],
                                            data=[[int(s), float(r)] for s, r in
                                                  zip(steps, returns)])
        if final:
            self.run.log(final, step=loop.env_steps)
        self.run.summary.update({"env_steps": loop.env_steps, "episodes": loop.stats.episodes,
                                 "reason": loop.reason})

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None
            # finish() hands the last records to wandb's service process; teardown waits until
            # it has written them (seen: an offline .wandb file with its header only, under load)
            self.wandb.teardown()


def log_evaluation(run_dir: str | Path, result: dict[str, Any],
                   video_dir: str | Path | None = None) -> None:
    """Adds a ``pgrad-evaluate`` result (and its videos) to the tracked run of ``run_dir``."""
    tracked = WandbTracker(run_dir, None)
    tracked.start()
    try:
        data: dict[str, Any] = {f"final_eval/{k}": float(result[k]) for k in
                                ("return_mean", "return_std", "length_mean", "length_std")}
        data["final_eval/deterministic"] = int(bool(result["deterministic"]))
        if video_dir is not None:
            videos = sorted(Path(video_dir).glob("*.mp4"))
            if videos:
                data["videos"] = [tracked.wandb.Video(str(v), format="mp4") for v in videos]
        tracked.run.log(data)
    finally:
        tracked.close()
