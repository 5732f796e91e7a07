"""Learning curves of runs from different benchmark folders on one figure, and their training
means at equal env steps (the asynchronous rows beside the synchronous ones they are compared
with, whose JSON files live elsewhere).

    python docs/benchmarks/async/beside.py OUT.png ENV LABEL=GLOB [LABEL=GLOB ...] [--every N]
        [--until N]

prints, per run, the rolling mean of the last 20 training episodes at every N env steps
(default 100,000) and the deterministic evaluation, and draws each label's mean curve and 95%
band as ``scripts/benchmark.py`` does; ``--until`` cuts every curve at that env step (a longer
run beside a shorter one). ``LABEL="GLOB GLOB ..."`` takes one label's runs from several
folders (the globs separated by spaces).
"""

from __future__ import annotations

import argparse
import glob
import sys
from pathlib import Path

import numpy as np

from pgrad_app.experiments.benchmark.plots import plot_env
from pgrad_app.experiments.benchmark.report import curve_band, read_result, smoothed


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("env")
    parser.add_argument("runs", nargs="+", metavar="LABEL=GLOB")
    parser.add_argument("--every", type=int, default=100_000)
    parser.add_argument("--until", type=int, default=0, help="cut the curves here (0: not)")
    args = parser.parse_args(argv)
    bands = {}
    for spec in args.runs:
        label, _, pattern = spec.partition("=")
        paths = sorted({p for one in pattern.split() for p in glob.glob(one)})
        runs = [read_result(Path(p)) for p in paths]
        if args.until:  # the episodes that ended by then; a curve block is one point
            runs = [{**r, "curve": [c for c in r["curve"] if c[0] <= args.until]} for r in runs]
        if not runs:
            raise SystemExit(f"beside.py: no run matches {pattern!r} (label {label!r})")
        bands[label] = curve_band(runs)
        for run in runs:
            steps, means = smoothed(run)
            marks = range(args.every, int(steps[-1]) + 1, args.every)
            at = [means[np.searchsorted(steps, m, side="right") - 1] for m in marks]
            print(f"{label} seed {run['seed']}: eval {run['eval']['return_mean']:.1f}; "
                  "training mean at every {:,}: {}".format(
                      args.every, " ".join(f"{x:.1f}" for x in at)))
    plot_env(args.env, bands, args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
