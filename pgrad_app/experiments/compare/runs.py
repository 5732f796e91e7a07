"""The runs a comparison reads, found in what the user names and grouped into algorithms.

An input is a run directory (``config.yaml`` and ``episodes.csv``; ``eval.json`` once
evaluated), a benchmark or sweep result (``RESULTS/NAME.json``, the schema of
``pgrad_app/experiments/benchmark/single_run.py``), or a folder holding any number of either at
any depth (a population's folder, a sweep's or benchmark's ``--results``). A folder's result
JSONs stand for the run directories they name (a sweep's ``runs/NAME``), so a sweep is read once,
with its grid points in the labels.

``NAME=GLOB`` puts every run found under the paths the glob matches into the group ``NAME``;
a plain input's runs are grouped by what they are: the agent of their ``config.yaml``, or a
result's agent label (``a2c learning_rate=1e-3`` for a sweep's trial). The env of a run is its
task.
"""

from __future__ import annotations

import csv
import dataclasses
import glob
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pgrad_app.errors import UserError
from pgrad_app.experiments.benchmark.report import read_result


@dataclasses.dataclass(frozen=True)
class Run:
    """One run as a comparison sees it."""

    path: Path  # its run directory or result JSON
    group: str  # the algorithm it counts for
    env: str  # the task (an env id as the run was given it)
    seed: int
    evaluation: float | None  # the final deterministic evaluation's mean return (None: none)
    steps: np.ndarray  # [K] env step at which each training-curve point ends
    returns: np.ndarray  # [K] its training return (the mean of ``block`` episodes)
    block: int = 1  # training episodes per curve point (a result JSON's curve_block)

    def last_episodes(self, n: int) -> float:
        """The mean return of the last ``n`` training episodes (``ceil(n / block)`` points)."""
        points = max(1, -(-n // self.block))
        return float(np.mean(self.returns[-points:]))


def _read_episodes(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(steps [K], returns [K])`` of an ``episodes.csv`` (``step,wall_s,return,length``)."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        steps = np.array([float(r["step"]) for r in rows], dtype=np.float64)
        returns = np.array([float(r["return"]) for r in rows], dtype=np.float64)
    except (OSError, KeyError, ValueError, TypeError) as err:
        raise UserError(f"{path}: not a readable episodes.csv ({type(err).__name__}: {err}).") \
            from None
    return steps, returns


def read_run_directory(path: Path, group: str | None = None) -> Run:
    """The :class:`Run` of a run directory (grouped by its agent unless ``group`` is given).

    Raises:
      UserError: an unreadable ``config.yaml``, ``episodes.csv`` or ``eval.json``.
    """
    from pgrad_app.config import yamlfile
    from pgrad_app.run.layout import RunLayout

    layout = RunLayout(path)
    config = yamlfile.load_yaml(layout.config)
    if not config.get("agent") or not config.get("env"):
        raise UserError(f"{layout.config}: names no agent or env; not a run's config.yaml.")
    steps, returns = _read_episodes(layout.episodes)
    if not len(steps):
        raise UserError(f"{layout.episodes}: no finished training episode; a run to compare "
                        "needs at least one.")
    evaluation = None
    if layout.evaluation.is_file():
        try:
            evaluation = float(json.loads(layout.evaluation.read_text())["return_mean"])
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise UserError(f"{layout.evaluation}: not a readable evaluation ({err}).") from None
    return Run(Path(path), group or str(config["agent"]), str(config["env"]),
               int(config.get("seed") or 0), evaluation, steps, returns)


def read_result_file(path: Path, group: str | None = None) -> Run:
    """The :class:`Run` of a benchmark or sweep result JSON (its stored training curve).

    Raises:
      UserError: the file is not a valid result.
    """
    try:
        result = read_result(path)
    except ValueError as err:
        raise UserError(str(err)) from None
    curve = np.asarray(result.get("curve") or [], dtype=np.float64).reshape(-1, 2)  # [K, 2]
    if not len(curve):
        raise UserError(f"{path}: no finished training episode in its curve; a run to compare "
                        "needs at least one.")
    return Run(Path(path), group or str(result["agent"]), str(result["env"]),
               int(result["seed"]), float(result["eval"]["return_mean"]), curve[:, 0],
               curve[:, 1], int(result.get("curve_block", 1)))


def is_run_directory(path: Path) -> bool:
    return (Path(path) / "config.yaml").is_file() and (Path(path) / "episodes.csv").is_file()


def _is_result(path: Path) -> bool:
    try:
        read_result(path)
    except ValueError:
        return False
    return True


def find(path: Path, group: str | None = None) -> list[Run]:
    """Every run at or under ``path`` (see the module docstring), in path order.

    Raises:
      UserError: no such path, or a run that cannot be read.
    """
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such run directory, result or folder.")
    if path.is_file():
        return [read_result_file(path, group)]
    if is_run_directory(path):
        return [read_run_directory(path, group)]
    results, directories = [], []
    for folder, subfolders, files in os.walk(path):
        here = Path(folder)
        if is_run_directory(here):
            directories.append(here)
            subfolders.clear()  # its checkpoints/, policy/, tb/ hold no runs
            continue
        subfolders.sort()
        results += [here / f for f in sorted(files)
                    if f.endswith(".json") and _is_result(here / f)]
    runs = [read_result_file(p, group) for p in results]
    # A sweep's RESULTS/NAME.json stands for its RESULTS/runs/NAME (recorded as run_dir).
    named = {d for p in results for d in (p.parent / "runs" / p.stem,
                                          Path(json.loads(p.read_text()).get("run_dir") or p))}
    named = {d.resolve() for d in named}
    runs += [read_run_directory(d, group) for d in directories if d.resolve() not in named]
    return sorted(runs, key=lambda r: str(r.path))


def collect(inputs: Sequence[str]) -> list[Run]:
    """The runs of every input (``PATH`` or ``NAME=GLOB``), each once.

    Raises:
      UserError: no inputs, a path or glob that names nothing, an input with no runs (an empty
        group, a folder with no runs), or a run that cannot be read.
    """
    if not inputs:
        raise UserError("name at least one run directory, result or folder to compare.")
    runs: dict[Path, Run] = {}
    for text in inputs:
        name, sep, pattern = text.partition("=")
        if sep and name.strip() and not Path(text).exists():
            matches = sorted(glob.glob(os.path.expanduser(pattern), recursive=True))
            if not matches:
                raise UserError(f"{text}: the glob {pattern!r} matches nothing.")
            found = [run for match in matches for run in find(Path(match), name.strip())]
            if not found:
                raise UserError(f"{text}: group {name.strip()!r} is empty (no run directory or "
                                f"result under the {len(matches)} path(s) {pattern!r} matches).")
        else:
            found = find(Path(text))
            if not found:
                raise UserError(f"{text}: no runs in this folder (no run directory with "
                                "config.yaml and episodes.csv, no benchmark result .json).")
        for run in found:
            runs.setdefault(run.path.resolve(), run)
    return list(runs.values())
