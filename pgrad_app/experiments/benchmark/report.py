"""Benchmark results -> per-env tables and learning curves (reusable by any runner of runs).

Reads the result JSONs a benchmark folder holds (schema:
``pgrad_app/experiments/benchmark/single_run.py``), and writes ``README.md``: per env, one row per
agent with the seeds, the final deterministic evaluation (mean +- std over seeds of each seed's
20-episode mean), the IQM over seeds with a stratified-bootstrap 95% CI (rliable's where it is
installed: :func:`pgrad_app.experiments.benchmark.stats.iqm_interval`), mean training wall time
and steps/s; and
``curves_ENV.png``: per agent, the mean over seeds (with a bootstrap 95% band) of the rolling
mean of the last 20 training-episode returns, interpolated onto a common env-step grid.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from pgrad_app.experiments.benchmark import stats

ROLLING_EPISODES = 20
GRID_POINTS = 200


@dataclasses.dataclass
class Row:
    """One agent on one env, aggregated over its seeds."""

    agent: str
    env: str
    seeds: list[int]
    scores: list[float]  # each seed's final deterministic eval mean, in seed order
    steps: int  # env steps trained (the largest over seeds)
    mean: float
    std: float
    iqm: float
    ci: tuple[float, float]
    wall_s: float  # mean over seeds
    steps_per_s: float  # mean over seeds


#: What a result must hold (what the report and the resume check read), with its JSON types;
#: OPTIONAL: read when present (written by single_run.run_one).
FIELDS: dict[str, tuple[type, ...]] = {
    "agent": (str,), "env": (str,), "seed": (int,), "budget": (int,), "steps": (int,),
    "eval_episodes": (int,), "wall_s": (int, float), "eval": (dict,)}
OPTIONAL: dict[str, tuple[type, ...]] = {
    "steps_per_s": (int, float, type(None)), "curve": (list,), "curve_block": (int,),
    "hyperparameters": (dict,)}
EVAL_FIELDS: dict[str, tuple[type, ...]] = {"return_mean": (int, float)}


def read_result(path: Path) -> dict:
    """One run's result file, its fields checked (a damaged or foreign file is not a result).

    Raises:
      ValueError: naming the file and what is wrong with it.
    """
    def bad(why: str) -> ValueError:
        return ValueError(f"{path}: not a valid result ({why}); delete it to rerun that run.")

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as err:  # a folder, unreadable
        raise bad(err.strerror or str(err)) from None
    except ValueError as err:  # not UTF-8, not JSON
        raise bad(str(err).splitlines()[0] if str(err) else "not JSON") from None
    if not isinstance(data, dict):
        raise bad(f"a JSON {type(data).__name__}, not an object")
    for fields, where, required in ((FIELDS, data, True), (OPTIONAL, data, False),
                                    (EVAL_FIELDS, data.get("eval"), True)):
        for key, types in fields.items():
            if key not in where:
                if required:
                    raise bad(f"no {key!r}")
                continue
            value = where[key]
            if isinstance(value, bool) or not isinstance(value, types):
                raise bad(f"{key!r} is {str(value)[:40]!r}")
    return data


def load_results(results: Path) -> list[dict]:
    """Every finished run in ``results`` (``*.json``), sorted by name.

    Raises:
      ValueError: a ``*.json`` there that is not a valid result (:func:`read_result`).
    """
    return [read_result(path) for path in sorted(Path(results).glob("*.json"))]


def unfinished(results: Path) -> list[str]:
    """Names of runs that were launched (a spec in ``logs/``) but left no result."""
    specs = sorted(Path(results).glob("logs/*.spec.json"))
    names = [p.name[:-len(".spec.json")] for p in specs]
    return [n for n in names if not (Path(results) / f"{n}.json").is_file()]


def summarize(runs: Iterable[dict]) -> dict[str, list[Row]]:
    """``{env: [Row per agent, sorted by agent]}``, envs in first-seen order."""
    groups: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        groups[r["env"]][r["agent"]].append(r)
    table = {}
    for env, by_agent in groups.items():
        rows = []
        for agent in sorted(by_agent):
            seeds = sorted(by_agent[agent], key=lambda r: r["seed"])
            scores = [float(r["eval"]["return_mean"]) for r in seeds]
            mean, std = stats.mean_std(scores)
            iqm, ci = stats.iqm_interval(scores)
            rows.append(Row(
                agent=agent, env=env, seeds=[int(r["seed"]) for r in seeds], scores=scores,
                steps=max(int(r["steps"]) for r in seeds), mean=mean, std=std,
                iqm=iqm, ci=ci,
                wall_s=float(np.mean([r["wall_s"] for r in seeds])),
                steps_per_s=float(np.mean([r["steps_per_s"] or 0.0 for r in seeds]))))
        table[env] = rows
    return table


def smoothed(run: dict, window: int = ROLLING_EPISODES) -> tuple[np.ndarray, np.ndarray]:
    """``(steps [K], rolling mean of the last ``window`` training-episode returns [K])``.

    A curve stored in blocks of ``curve_block`` episodes uses ``round(window / block)`` points.
    """
    curve = np.asarray(run.get("curve") or [], dtype=np.float64).reshape(-1, 2)  # [K, 2]
    if len(curve) == 0:
        return np.zeros(0), np.zeros(0)
    width = max(1, round(window / max(1, int(run.get("curve_block", 1)))))
    sums = np.cumsum(np.concatenate([[0.0], curve[:, 1]]))  # [K + 1]
    ends = np.arange(1, len(curve) + 1)
    starts = np.maximum(0, ends - width)
    return curve[:, 0], (sums[ends] - sums[starts]) / (ends - starts)


def curve_band(runs: list[dict], points: int = GRID_POINTS):
    """Mean over runs of :func:`smoothed` on a common step grid, and its bootstrap 95% band.

    The grid spans the steps every run covers (from the latest first episode to the earliest
    last one), so nothing is extrapolated.

    Returns:
      ``(grid [G], mean [G], lower [G], upper [G])``, or None when no run finished an episode.
    """
    curves = [smoothed(r) for r in runs]
    curves = [(s, v) for s, v in curves if len(s)]
    if not curves:
        return None
    lo, hi = max(s[0] for s, _ in curves), min(s[-1] for s, _ in curves)
    grid = np.linspace(lo, hi, points) if hi > lo else np.array([hi])  # [G]
    values = np.stack([np.interp(grid, s, v) for s, v in curves])  # [N, G]
    lower, upper = stats.bootstrap_mean_band(values)
    return grid, values.mean(axis=0), np.atleast_1d(lower), np.atleast_1d(upper)


def _num(x: float) -> str:
    return f"{x:.1f}"


def env_table(rows: list[Row]) -> str:
    """The markdown table of one env."""
    lines = ["| agent | seeds | env steps | eval return (mean ± std) | IQM [95% CI] | per seed "
             "| wall (s) | steps/s |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r.agent} | {len(r.seeds)} ({', '.join(map(str, r.seeds))}) | {r.steps:,} | "
            f"{_num(r.mean)} ± {_num(r.std)} | {_num(r.iqm)} [{_num(r.ci[0])}, {_num(r.ci[1])}] "
            f"| {' / '.join(_num(s) for s in r.scores)} | {r.wall_s:.1f} | {r.steps_per_s:.0f} |")
    return "\n".join(lines)


def curve_file(env: str) -> str:
    return f"curves_{env.split(':')[-1].replace('/', '_')}.png"


def markdown(runs: list[dict], missing: list[str] = ()) -> str:
    """The whole report: protocol, machines and commands, then a section per env."""
    table = summarize(runs)
    machines = sorted({f"{r['machine']['cpu']} ({r['machine']['cores']} cores, "
                       f"{r['machine']['threads']} thread(s) per run, {r['machine']['jobs']} "
                       f"run(s) at a time), TensorFlow {r['machine']['tensorflow']}"
                       for r in runs})
    commits = sorted({str(r.get("pgrad_commit")) for r in runs})
    commands = sorted({r.get("command", "") for r in runs if r.get("command")})
    out = [
        "# pgrad benchmark results", "",
        "Score of a run: the mean return of its final policy over "
        f"{', '.join(sorted({str(r['eval_episodes']) for r in runs})) or '20'} deterministic "
        "evaluation episodes (seeds 10000 + run seed and on) after its env-step budget. Per "
        "agent: mean ± std (population, ddof 0) of the scores over seeds; IQM = mean of the "
        "scores left after dropping floor(n/4) at each end (with 3 seeds, all of them); 95% CI: "
        f"{stats.interval_method()}. Wall time: training only "
        "(after construction, without the evaluation). Curves: rolling mean of the last "
        f"{ROLLING_EPISODES} training episodes, mean over seeds with a bootstrap 95% band.", "",
        "Machine: " + "; ".join(machines), "",
        "pgrad commit: " + ", ".join(commits), "",
        "Command(s):", "", *[f"    {c}" for c in commands], "",
    ]
    if missing:
        out += ["Launched without a result (failed, or still running): "
                + ", ".join(missing), ""]
    for env, rows in table.items():
        out += [f"## {env}", "", env_table(rows), "", f"![{env}]({curve_file(env)})", ""]
    return "\n".join(out)


def write_report(results: Path) -> Path:
    """Writes ``README.md`` and one curve PNG per env into ``results``; returns the README."""
    from pgrad_app.experiments.benchmark.plots import plot_env

    results = Path(results)
    runs = load_results(results)
    by_env: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        by_env[r["env"]][r["agent"]].append(r)
    for env, by_agent in by_env.items():
        bands = {agent: curve_band(agent_runs) for agent, agent_runs in sorted(by_agent.items())}
        plot_env(env, bands, results / curve_file(env))
    readme = results / "README.md"
    readme.write_text(markdown(runs, unfinished(results)))
    return readme


def finish(results: Path, failed: Iterable, noun: str = "run") -> int:
    """The end of a benchmark or sweep command: writes the report, prints where it is and the
    failed runs (on stderr); returns the exit code (1 if any failed).

    Raises:
      UserError: no such results folder, or a result that is not valid JSON.
    """
    import sys

    from pgrad_app.errors import UserError

    results, failed = Path(results), list(failed)
    if not results.is_dir():
        raise UserError(f"--results {results}: no such folder.")
    try:
        readme = write_report(results)
    except ValueError as err:
        raise UserError(str(err)) from None
    print(f"report: {readme}")
    if failed:
        names = ", ".join(sorted(f.spec.name for f in failed))
        print(f"error: {len(failed)} {noun}(s) failed: {names} (logs in {results / 'logs'})",
              file=sys.stderr)
        return 1
    return 0
