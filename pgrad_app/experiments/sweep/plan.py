"""Planning a sweep: agents x envs x seeds x a grid of ``--set`` values, every trial resolved and
checked before anything starts.

:func:`plan` builds on the benchmark's plan (:func:`pgrad_app.experiments.benchmark.plan.plan`:
defaults < tuned entry < ``--set`` < the trial's grid point), with each agent's tuned entry for
each env looked up once for the whole grid; a trial is a :class:`Trial` (a benchmark ``RunSpec``
plus its grid point). :func:`check_started` refuses run directories an earlier sweep started with
other settings. :mod:`pgrad_app.experiments.sweep.launch` runs the trials.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from collections.abc import Sequence
from pathlib import Path

from pgrad_app.config import settings as config_lib
from pgrad_app.errors import UserError
from pgrad_app.experiments.benchmark import plan as planning
from pgrad_app.run.layout import RunLayout


@dataclasses.dataclass(frozen=True)
class Trial(planning.RunSpec):
    """One trial: a benchmark run plus the grid point it tries (``"key=value ..."``)."""

    point: str = ""

    @property
    def label(self) -> str:
        """The agent column of the report: ``a2c`` or ``a2c learning_rate=1e-3``."""
        return f"{self.agent} {self.point}".strip()

    @property
    def name(self) -> str:
        env = self.env.split(":")[-1].replace("/", "_")
        point = re.sub(r"[^A-Za-z0-9.+-]+", "-", self.point).strip("-")
        return "__".join(p for p in (self.agent, env, point, f"seed{self.seed}") if p)


def split_values(text: str) -> list[str]:
    """``"1e-3,3e-3"`` -> ``["1e-3", "3e-3"]``; commas inside ``[...]`` stay (``[64,64]``)."""
    out, depth, current = [], 0, ""
    for ch in text:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(current.strip())
            current = ""
        else:
            current += ch
    out.append(current.strip())
    return [v for v in out if v]


def grid_points(grid: Sequence[str]) -> list[list[str]]:
    """``["a=1,2", "b=x,y"]`` -> every combination as ``--set`` pairs, in order."""
    axes = []
    for item in grid:
        key, sep, values = item.partition("=")
        if not sep or not key.strip() or not split_values(values):
            raise UserError(f"--grid {item!r}: expected key=value1,value2 "
                            "(e.g. --grid learning_rate=1e-3,3e-3).")
        axes.append([f"{key.strip()}={v}" for v in split_values(values)])
    return [list(p) for p in itertools.product(*axes)] if axes else [[]]


def plan(agents: Sequence[str], envs: Sequence[str], seeds: Sequence[int],
         steps: int | None = None, sets: Sequence[str] = (), grid: Sequence[str] = (),
         no_tuned: bool = False, eval_episodes: int = 20) -> list[Trial]:
    """Every trial, hyperparameters resolved and validated (see the module docstring).

    Raises:
      UserError: as :func:`pgrad_app.experiments.benchmark.plan.plan`, or a malformed ``--grid``.
    """
    points = grid_points(grid)
    entries = planning.tuned_entries(agents, envs, no_tuned)  # once for every grid point
    trials = []
    for point in points:
        for spec in planning.plan(agents, envs, seeds, steps, [*sets, *point], no_tuned,
                                   eval_episodes, entries):
            trials.append(Trial(**dataclasses.asdict(spec), point=" ".join(point)))
    names = [t.name for t in trials]
    if len(set(names)) != len(names):
        raise UserError("two trials would share a name; give each --grid value once.")
    return trials


def resumes(out: Path) -> bool:
    """Whether :func:`pgrad_app.experiments.sweep.launch.run_trial` resumes the run in ``out``
    (an earlier attempt left checkpoints)."""
    checkpoints = RunLayout(out).checkpoints
    return checkpoints.is_dir() and any(checkpoints.iterdir())


def check_started(trials: Sequence[Trial], results: Path) -> None:
    """Refuses trials whose run directory an earlier sweep started with other settings (other
    ``--set`` values, another budget): resuming it would train on under the old settings and
    label the result with the new ones. Checked before anything starts (files only).

    Raises:
      UserError: naming the first such run directory and what differs.
    """
    from pgrad_app.config import yamlfile

    for trial in trials:
        out = Path(results) / "runs" / trial.name
        if not resumes(out):
            continue  # launch.run_trial starts it afresh (--overwrite)
        config = RunLayout(out).config
        try:
            values = yamlfile.load_yaml(config)
            stored = dict(values.get(config_lib.HYPER_KEY) or {})
        except (UserError, OSError, AttributeError, TypeError, ValueError):
            raise UserError(f"{config}: unreadable, so the trial {trial.name} cannot be resumed "
                            "safely; delete its run directory to rerun it.") from None
        plain = json.loads(json.dumps(stored, default=str))  # YAML's lists, the plan's tuples
        ours = json.loads(json.dumps(trial.hyperparameters, default=str))
        keys = [k for k in ours if plain.get(k) != ours[k]]
        diff = (f"hyperparameter {keys[0]} {plain.get(keys[0])!r} there, {ours[keys[0]]!r} now"
                if keys else None)
        if values.get("total_steps") != trial.budget:
            diff = f"budget {values.get('total_steps')!r} there, {trial.budget!r} now"
        if diff:
            raise UserError(f"{out} was started with other settings ({diff}); resuming it "
                            "would mix them. Use another --results folder, or delete it to "
                            "rerun.")
