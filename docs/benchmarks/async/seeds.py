"""Two benchmark rows side by side over many seeds: per seed, mean +- std over seeds, and a 95%
bootstrap interval of the difference of their means (B - A), for the deterministic evaluation
and for the training return over the last ``--last`` env steps.

    python docs/benchmarks/async/seeds.py "A=GLOB [GLOB ...]" "B=GLOB [GLOB ...]" [--last N]
        [--reps R]

Each side is a label and one or more globs of result JSON files (``scripts/benchmark.py``'s),
separated by spaces. The training return of a run is the mean of its stored training-episode
returns (the sampling policy's, as RLlib's ``episode_return_mean``) that ended after
``budget - N`` env steps, to the run's end (a PPO run of 16 x 1024 steps ends at 1,015,808).
The interval is a percentile bootstrap that resamples each side's seeds independently, with
replacement (``pgrad_app.experiments.benchmark.stats.bootstrap_ci`` with one column per side): the
seeds of the two sides are not paired (the same seed gives different training episodes).
Beside it, the exact two-sided permutation p-value of the difference (every split of the pooled
seeds; with few seeds a percentile bootstrap interval is somewhat too narrow, the permutation
test is not). Standard deviations are over seeds, ``ddof=0`` as in every benchmark table here.
"""

from __future__ import annotations

import argparse
import glob
import itertools
import sys
from pathlib import Path

import numpy as np

from pgrad_app.experiments.benchmark import stats
from pgrad_app.experiments.benchmark.report import read_result


def training_return(run: dict, last: int) -> float:
    """Mean training-episode return of ``run`` over episodes ending after ``budget - last``."""
    curve = np.asarray(run["curve"], dtype=np.float64).reshape(-1, 2)  # [K, (step, return)]
    late = curve[curve[:, 0] > int(run["budget"]) - last, 1]
    if late.size == 0:
        raise SystemExit(f"seeds.py: seed {run['seed']} has no episode in its last {last:,} steps")
    return float(late.mean())


def permutation_p(a: np.ndarray, b: np.ndarray) -> float:
    """Exact two-sided permutation p-value of ``mean(b) - mean(a)``: the share of all splits of
    the pooled scores into groups of ``len(a)`` and ``len(b)`` whose difference is at least as
    large in absolute value (12,870 splits for 8 + 8 seeds)."""
    pooled = np.concatenate([a, b])  # [Na + Nb]
    splits = np.array(list(itertools.combinations(range(pooled.size), a.size)))  # [S, Na]
    sum_a = pooled[splits].sum(axis=1)  # [S]
    diffs = (pooled.sum() - sum_a) / b.size - sum_a / a.size  # [S]
    observed = b.mean() - a.mean()
    return float(np.mean(np.abs(diffs) >= abs(observed) - 1e-9))


def side(spec: str) -> tuple[str, list[dict]]:
    """``"LABEL=GLOB [GLOB ...]"`` -> (label, runs sorted by seed); one run per seed."""
    label, _, patterns = spec.partition("=")
    paths = sorted({p for pattern in patterns.split() for p in glob.glob(pattern)})
    runs = sorted((read_result(Path(p)) for p in paths), key=lambda r: r["seed"])
    seeds = [r["seed"] for r in runs]
    if not runs or len(set(seeds)) != len(seeds):
        raise SystemExit(f"seeds.py: {label!r} needs one run per seed; found seeds {seeds}")
    return label, runs


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", metavar="A=GLOBS")
    parser.add_argument("b", metavar="B=GLOBS")
    parser.add_argument("--last", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=10_000)
    args = parser.parse_args(argv)
    (label_a, runs_a), (label_b, runs_b) = side(args.a), side(args.b)
    measures = {
        "eval (20 deterministic episodes)": lambda r: float(r["eval"]["return_mean"]),
        f"training return, last {args.last:,} env steps": lambda r: training_return(r, args.last),
    }
    for name, score in measures.items():
        print(f"## {name}")
        for label, runs in ((label_a, runs_a), (label_b, runs_b)):
            x = [score(r) for r in runs]  # [seeds]
            mean, std = stats.mean_std(x)
            per_seed = " / ".join(f"{v:.1f}" for v in x)
            print(f"{label} (seeds {[r['seed'] for r in runs]}): {mean:.1f} +- {std:.1f}; "
                  f"per seed {per_seed}")
        a = np.array([score(r) for r in runs_a])  # [Na]
        b = np.array([score(r) for r in runs_b])  # [Nb]
        if a.size != b.size:  # bootstrap_ci takes [runs, tasks]: one seed count
            raise SystemExit(f"seeds.py: {a.size} seeds against {b.size}; give both the same")
        lo, hi = stats.bootstrap_ci(np.stack([a, b], axis=1),  # [N, 2]
                                    statistic=lambda s: float(s[:, 1].mean() - s[:, 0].mean()),
                                    reps=args.reps)
        print(f"{label_b} - {label_a}: {b.mean() - a.mean():+.1f}, 95% bootstrap interval "
              f"[{lo:+.1f}, {hi:+.1f}] ({args.reps} resamples, seeds resampled per side); "
              f"exact permutation p = {permutation_p(a, b):.4f}\n")


if __name__ == "__main__":
    main(sys.argv[1:])
