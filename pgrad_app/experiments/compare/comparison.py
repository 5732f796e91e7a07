"""A comparison from Python: runs in, rliable's statistics out, then its files.

    from pgrad_app.experiments.compare import comparison

    found = comparison.compare(["ppo=runs/ppo-*", "a2c=runs/a2c-*"])
    comparison.write(found, "results/compare")   # the PNGs and compare.json

``pgrad-compare`` is this, with the table printed (:mod:`pgrad_app.experiments.compare.summary`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pgrad_app.errors import UserError
from pgrad_app.experiments.benchmark.stats import import_rliable
from pgrad_app.experiments.compare import figures, metrics, runs, scores
from pgrad_app.experiments.compare.metrics import Estimate

JSON_FILE = "compare.json"


@dataclasses.dataclass(frozen=True)
class Options:
    """How to compare (the command's flags)."""

    last_episodes: int | None = None  # score: the last N training episodes' mean, not eval.json
    normalise: str = "auto"  # "auto", "none" or "require" (scores.arrange)
    gap_threshold: float | None = None  # optimality gap's threshold on raw returns
    reps: int = metrics.REPS  # bootstrap resamples
    seed: int = 0  # numpy's global seed for rliable's resampling
    points: int = 25  # sample-efficiency grid points
    window: int = scores.WINDOW  # training episodes per curve value
    curves: bool = True  # sample-efficiency curves (from the training episodes)
    taus: int = 81  # performance-profile thresholds


@dataclasses.dataclass
class Comparison:
    """Everything a comparison found; :func:`write` and the summary read it."""

    options: Options
    table: scores.Table
    raw: dict[str, np.ndarray]  # {group: [runs, tasks]} raw returns
    scores: dict[str, np.ndarray]  # the same, normalised where the table is
    names: list[str]  # the aggregate metrics
    estimates: dict[str, list[Estimate]]  # {group: one per name}
    taus: np.ndarray  # [T]
    profiles: dict[str, np.ndarray]  # {group: [T]}
    profile_cis: dict[str, np.ndarray]  # {group: [2, T]}
    pairs: list[tuple[str, str, Estimate]]  # P(X > Y)
    x: np.ndarray | None = None  # [G] sample-efficiency grid
    xlabel: str = ""
    efficiency: dict[str, np.ndarray] | None = None  # {group: [G]} IQM
    efficiency_cis: dict[str, np.ndarray] | None = None  # {group: [2, G]}

    @property
    def unit(self) -> str:
        return "normalised score" if self.table.normalised else "return"


def compare(inputs: Sequence[str], options: Options = Options()) -> Comparison:
    """Reads the runs of ``inputs`` (paths or ``NAME=GLOB``) and computes every statistic.

    Raises:
      UserError: rliable missing, bad options, or inputs that are not runs to compare (each
        one line naming what and where).
    """
    import_rliable()  # before reading anything: the one line that says what to install
    if options.reps < 1:
        raise UserError(f"--reps must be >= 1; got {options.reps}.")
    if options.taus < 2:
        raise UserError(f"taus must be >= 2; got {options.taus}.")
    table = scores.arrange(runs.collect(inputs), options.normalise)
    raw = scores.raw_scores(table, options.last_episodes)
    normed = {g: table.normalise(s) for g, s in raw.items()}
    gap = 1.0 if table.normalised and options.gap_threshold is None else options.gap_threshold
    every = np.concatenate([s.ravel() for s in normed.values()])
    lo, hi = float(every.min()), float(every.max())
    taus = np.linspace(min(lo, 0.0) if table.normalised else lo,
                       max(hi, 1.0) if table.normalised else hi, options.taus)  # [T]
    found, cis = metrics.profiles(normed, taus, options.reps, options.seed)
    out = Comparison(options, table, raw, normed, metrics.metric_names(gap),
                     metrics.aggregates(normed, options.reps, options.seed, gap), taus,
                     found, cis, metrics.improvement(raw, table.groups, options.reps,
                                                     options.seed))
    if options.curves:
        x, out.xlabel, curves = scores.curves(table, options.points, options.window)
        normed_curves = {g: table.normalise(c) for g, c in curves.items()}
        out.x = x
        out.efficiency, out.efficiency_cis = metrics.sample_efficiency(
            normed_curves, options.reps, options.seed)
    return out


def as_data(c: Comparison) -> dict:
    """The comparison's numbers, JSON-ready (what ``compare.json`` holds)."""
    refs = c.table.refs or {}
    data = {
        "score": (f"mean return of the last {c.options.last_episodes} training episodes"
                  if c.options.last_episodes else "final deterministic evaluation"),
        "unit": c.unit, "reps": c.options.reps, "seed": c.options.seed,
        "confidence": 0.95, "envs": c.table.envs,
        "references": {env: dataclasses.asdict(ref) for env, ref in refs.items()},
        "groups": {g: {
            "runs": [[str(r.path) for r in per_env] for per_env in c.table.cells[g]],
            "raw": c.raw[g].tolist(), "scores": c.scores[g].tolist(),
            "metrics": {n: e.as_data() for n, e in zip(c.names, c.estimates[g])},
        } for g in c.table.groups},
        "probability_of_improvement": [{"x": x, "y": y, **e.as_data()} for x, y, e in c.pairs],
        "performance_profiles": {"tau": c.taus.tolist(), **{
            g: {"fraction": c.profiles[g].tolist(), "ci": c.profile_cis[g].tolist()}
            for g in c.table.groups}},
    }
    if c.efficiency is not None:
        data["sample_efficiency"] = {"x": c.x.tolist(), "x_label": c.xlabel, **{
            g: {"iqm": c.efficiency[g].tolist(), "ci": c.efficiency_cis[g].tolist()}
            for g in c.table.groups}}
    return data


def write(c: Comparison, out: str | Path) -> list[Path]:
    """Writes the PNGs and ``compare.json`` into ``out`` (created); returns their paths."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a folder.")
    out.mkdir(parents=True, exist_ok=True)
    files = figures.FILES
    written = [figures.aggregates(c.estimates, c.names, c.unit, out / files["aggregates"]),
               figures.profiles(c.taus, c.profiles, c.profile_cis, f"{c.unit} (τ)",
                                out / files["profiles"])]
    if c.efficiency is not None:
        written.append(figures.efficiency(c.x, c.efficiency, c.efficiency_cis, c.xlabel,
                                          f"IQM of the training {c.unit}",
                                          out / files["efficiency"]))
    if c.pairs:
        written.append(figures.improvement(c.pairs, out / files["improvement"]))
    path = out / JSON_FILE
    path.write_text(json.dumps(as_data(c), indent=1))
    return [*written, path]
