"""Runs -> the arrays rliable takes: per group, scores ``[runs, tasks]`` and training curves
``[runs, tasks, points]``, normalised where every task has a published reference.

A group must have runs on every task of the comparison, as many on each (rliable's stratified
bootstrap resamples runs within each task of a ``[runs, tasks]`` matrix); runs are ordered by
seed. A run's score is its final deterministic evaluation (``eval.json``), or with
``last_episodes`` the mean return of its last training episodes. Its curve at env step ``s`` is
the mean return of the last ``window`` training episodes finished by ``s`` (the benchmark's
curves), on a grid of ``points`` steps spanning what every run of the task covers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from pgrad_app.errors import UserError
from pgrad_app.experiments.compare import references
from pgrad_app.experiments.compare.runs import Run

#: Training episodes a curve point averages (as the benchmark's curves).
WINDOW = 20


@dataclasses.dataclass
class Table:
    """The runs of a comparison, arranged: ``cells[group][t]`` are the runs of task ``t``."""

    groups: list[str]  # in the order they were first named
    envs: list[str]  # the tasks, sorted
    cells: dict[str, list[list[Run]]]
    refs: dict[str, references.Reference] | None  # per env when normalised, else None

    @property
    def normalised(self) -> bool:
        return self.refs is not None

    def normalise(self, values: np.ndarray) -> np.ndarray:
        """``values`` ``[runs, tasks, ...]`` normalised per task (unchanged when raw)."""
        if self.refs is None:
            return values
        out = np.array(values, dtype=np.float64)
        for t, env in enumerate(self.envs):
            out[:, t] = self.refs[env].normalise(out[:, t])
        return out


def arrange(runs: Sequence[Run], normalise: str = "auto") -> Table:
    """Groups ``runs`` by algorithm and task and checks the shape rliable needs.

    Args:
      runs: the runs (:func:`pgrad_app.experiments.compare.runs.collect`).
      normalise: ``"auto"`` (normalised scores when every task has a reference,
        :mod:`~pgrad_app.experiments.compare.references`), ``"none"`` (raw returns) or
        ``"require"`` (an error when a task has none).

    Raises:
      UserError: a group without runs on some task, unequal run counts within a group, a bad
        ``normalise``, or ``"require"`` with a task that has no reference.
    """
    if normalise not in ("auto", "none", "require"):
        raise UserError(f"--normalize must be auto, none or require; got {normalise!r}.")
    groups = list(dict.fromkeys(r.group for r in runs))
    envs = sorted({r.env for r in runs})
    cells = {g: [sorted((r for r in runs if r.group == g and r.env == env),
                        key=lambda r: (r.seed, str(r.path))) for env in envs] for g in groups}
    for group, per_env in cells.items():
        for env, these in zip(envs, per_env):
            if not these:
                raise UserError(f"group {group!r} has no run on {env}; every group needs runs on "
                                f"the same envs ({', '.join(envs)}).")
        counts = {env: len(these) for env, these in zip(envs, per_env)}
        if len(set(counts.values())) > 1:
            listed = ", ".join(f"{n} on {env}" for env, n in counts.items())
            raise UserError(f"group {group!r} has {listed}: rliable's stratified bootstrap needs "
                            "as many runs on each env within a group.")
    found = {env: references.lookup(env) for env in envs}
    missing = [env for env, ref in found.items() if ref is None]
    if normalise == "require" and missing:
        raise UserError(f"--normalize require: no published random/reference score for "
                        f"{', '.join(missing)} (pgrad_app/experiments/compare/references.py).")
    use = normalise != "none" and not missing
    return Table(groups, envs, cells, found if use else None)  # type: ignore[arg-type]


def raw_scores(table: Table, last_episodes: int | None = None) -> dict[str, np.ndarray]:
    """``{group: [runs, tasks]}`` raw scores (see the module docstring).

    Raises:
      UserError: a run without ``eval.json`` when scoring by evaluation, or ``last_episodes`` < 1.
    """
    if last_episodes is not None and last_episodes < 1:
        raise UserError(f"--last-episodes must be >= 1; got {last_episodes}.")

    def score(run: Run) -> float:
        if last_episodes is not None:
            return run.last_episodes(last_episodes)
        if run.evaluation is None:
            raise UserError(f"{run.path}: not evaluated (no eval.json): pgrad-evaluate {run.path}, "
                            "or score the training returns with --last-episodes N.")
        return run.evaluation

    return {g: np.array([[score(r) for r in these] for these in per_env], dtype=np.float64).T
            for g, per_env in table.cells.items()}  # [N, M]


def _smoothed_at(run: Run, grid: np.ndarray, window: int) -> np.ndarray:
    """The mean of the last ``window`` episodes finished by each grid step: ``[G]``."""
    width = max(1, round(window / run.block))
    ends = np.searchsorted(run.steps, grid, side="right")  # [G] points finished by each step
    sums = np.concatenate([[0.0], np.cumsum(run.returns)])  # [K + 1]
    starts = np.maximum(0, ends - width)
    return (sums[ends] - sums[starts]) / np.maximum(1, ends - starts)


def curves(table: Table, points: int = 25,
           window: int = WINDOW) -> tuple[np.ndarray, str, dict[str, np.ndarray]]:
    """Training curves on a common grid: ``(x [G], x label, {group: [runs, tasks, G]})``.

    Each task's grid spans the env steps every run of it covers (from the latest first point to
    the earliest last one); with one task ``x`` is env steps, with several the fraction of each
    task's span.

    Raises:
      UserError: ``points`` or ``window`` < 1, or a task whose runs share no span of env steps.
    """
    if points < 1 or window < 1:
        raise UserError(f"--points and --window must be >= 1; got {points} and {window}.")
    grids = []
    for t, env in enumerate(table.envs):
        runs = [r for per_env in table.cells.values() for r in per_env[t]]
        lo, hi = max(r.steps[0] for r in runs), min(r.steps[-1] for r in runs)
        if hi < lo:
            raise UserError(f"{env}: the runs share no span of env steps (one's first episode "
                            f"ends at {lo:,.0f}, another's last at {hi:,.0f}); compare finals "
                            "only with --no-curves.")
        grids.append(np.linspace(lo, hi, points))  # [G]
    out = {g: np.stack([np.stack([_smoothed_at(r, grids[t], window) for r in per_env[t]])
                        for t in range(len(table.envs))], axis=1)  # [N, M, G]
           for g, per_env in table.cells.items()}
    if len(grids) == 1:
        return grids[0], "env steps", out
    return np.linspace(0.0, 1.0, points), "fraction of each env's common span of env steps", out
