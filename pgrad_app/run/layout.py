"""The run directory's layout: every name pgrad writes there, owned by one object.

A run directory (``pgrad-train --out``, or :class:`pgrad_app.run.recorder.RunDirectory` from
Python) holds a saved agent (``agent.json``, ``checkpoints/``, ``policy/``: what ``agent.save``
writes and ``agents.load`` reads) plus the run's own files::

    config.yaml          fully resolved settings        agent.json     what the agent is
    episodes.csv         one row per training episode   updates.csv    one row per update
    eval.csv, best/      evaluations during training    eval.json      pgrad-evaluate's result
    tb/                  TensorBoard events              checkpoints/   resumable checkpoints
    policy/              the exported SavedModel         learning_curve.png, robustness.png
    wandb-run-id         the tracked run (--track)       .pgrad-run, .pgrad-lock  marker, lock
    .pgrad-replaced/     the run --overwrite replaces, until the new run's first checkpoint

:meth:`RunLayout.owned` -- what ``--overwrite`` may delete -- is derived from these names and
from what the layers below say they write (:data:`pgrad.rl.storage.checkpoint.FILES`,
:data:`pgrad.rl.export.saved_model.FILES`), with each name's temporary spelling
(:mod:`pgrad.rl.storage.files`)
added, so a new file needs one line here and nothing mirrored by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agents import callbacks
from agents.persistence import best_policy
from agents.persistence import save_load as persistence
from pgrad.rl.export import saved_model as export
from pgrad.rl.storage import checkpoint, dirlock
from pgrad.rl.storage.files import temp_glob

#: Temporary names of pgrad 0.2 (before one spelling): still deleted by --overwrite.
LEGACY_TEMPS: dict = {"config.yaml.tmp": None, "eval.json.tmp": None,
                      ".policy-tmp-*": export.FILES, ".policy-old-*": export.FILES}


def with_temps(spec: dict) -> dict:
    """``spec`` with every name's temporary spelling beside it (same contents)."""
    out = {}
    for name, sub in spec.items():
        inner = with_temps(sub) if isinstance(sub, dict) else None
        out[name] = inner
        out[temp_glob(name)] = inner
    return out


@dataclass(frozen=True)
class RunLayout:
    """The paths of one run directory ``root`` (see the module docstring)."""

    root: Path

    CONFIG = "config.yaml"
    AGENT = persistence.AGENT_FILE
    EPISODES = "episodes.csv"
    UPDATES = "updates.csv"
    EVAL_LOG = callbacks.EVAL_LOG
    BEST = callbacks.BEST
    EVALUATION = "eval.json"
    #: Each non-default pgrad-evaluate (video, attack, other episodes...): eval-VARIANT.json.
    EVALUATION_VARIANT = "eval-{}.json"
    CURVE = "learning_curve.png"
    FAILURE = "failure.txt"  # a population's seed that stopped alone (pgrad_app.run.population)
    ROBUSTNESS = "robustness.png"
    CHECKPOINTS = persistence.CHECKPOINTS
    POLICY = persistence.POLICY
    TENSORBOARD = "tb"
    VIDEOS = "videos"  # --capture-video
    TRACKER_ID = "wandb-run-id"
    MARKER = ".pgrad-run"
    #: What ``--overwrite`` replaced, kept until the new run's first checkpoint.
    REPLACED = ".pgrad-replaced"
    LOCK = dirlock.LOCK
    #: Names whose presence means a directory holds (part of) a run.
    RUN_NAMES = (CONFIG, AGENT, EPISODES, UPDATES, CHECKPOINTS, POLICY)

    def __post_init__(self):
        object.__setattr__(self, "root", Path(self.root))

    def __truediv__(self, name: str) -> Path:
        return self.root / name

    config = property(lambda self: self.root / self.CONFIG)
    agent = property(lambda self: self.root / self.AGENT)
    episodes = property(lambda self: self.root / self.EPISODES)
    updates = property(lambda self: self.root / self.UPDATES)
    eval_log = property(lambda self: self.root / self.EVAL_LOG)
    best = property(lambda self: self.root / self.BEST)
    evaluation = property(lambda self: self.root / self.EVALUATION)
    curve = property(lambda self: self.root / self.CURVE)
    robustness = property(lambda self: self.root / self.ROBUSTNESS)
    checkpoints = property(lambda self: self.root / self.CHECKPOINTS)
    policy = property(lambda self: self.root / self.POLICY)
    tensorboard = property(lambda self: self.root / self.TENSORBOARD)
    tracker_id = property(lambda self: self.root / self.TRACKER_ID)
    marker = property(lambda self: self.root / self.MARKER)
    replaced = property(lambda self: self.root / self.REPLACED)
    lock = property(lambda self: self.root / self.LOCK)

    def evaluation_of(self, variant: str | None) -> Path:
        """``eval.json`` for the plain evaluation (``variant`` empty), else
        ``eval-VARIANT.json``."""
        return self.root / (self.EVALUATION_VARIANT.format(variant) if variant
                            else self.EVALUATION)

    @classmethod
    def saved_agent(cls) -> dict:
        """What ``agent.save`` writes into a directory, by name (``best/`` is one of these)."""
        return {cls.AGENT: None, cls.POLICY: export.FILES,
                cls.CHECKPOINTS: {d: dict.fromkeys(checkpoint.FILES) for d in checkpoint.DIRS}}

    @classmethod
    def owned(cls) -> dict:
        """Every name pgrad writes in a run directory (``fnmatch`` patterns; ``None``: a file, a
        dict: a folder and what pgrad writes inside it): what ``--overwrite`` deletes."""
        files = dict.fromkeys((cls.CONFIG, cls.EPISODES, cls.UPDATES, cls.EVAL_LOG,
                               cls.EVALUATION, cls.EVALUATION_VARIANT.format("*"), cls.CURVE,
                               cls.ROBUSTNESS, cls.TRACKER_ID, cls.FAILURE))
        tree = {**files, **cls.saved_agent(),
                cls.TENSORBOARD: {"events.out.tfevents.*": None},
                cls.VIDEOS: {"rl-video-*.mp4": None},
                # best/ is a saved agent: agent.save leaves its lock file (the run's own lock,
                # held by the writer that clears the run, is never deleted).
                cls.BEST: {**cls.saved_agent(), cls.EVALUATION: None, cls.LOCK: None,
                           best_policy.ROW_FILE: None}}
        owned = with_temps(tree)
        owned[temp_glob(cls.MARKER)] = None
        return {**owned, **LEGACY_TEMPS, cls.BEST: {**owned[cls.BEST], **LEGACY_TEMPS}}
