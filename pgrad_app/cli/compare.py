"""Compare algorithms over runs with rliable: IQM, optimality gap, profiles, curves, P(X > Y).

    pgrad-compare ppo=runs/ppo-* a2c=runs/a2c-*        # groups by name and glob
    pgrad-compare results/sweep                          # grouped by agent (and grid point)
    pgrad-compare results/mujoco --last-episodes 100 --fast --out results/mujoco-compare

An input is a run directory, a benchmark or sweep result (RESULTS/NAME.json), or a folder of
either; NAME=GLOB puts the runs under the paths the glob matches into the group NAME, other
inputs are grouped by their agent. A run's score is its eval.json (pgrad-evaluate), or with
--last-episodes N the mean return of its last N training episodes; envs with a published random
and reference score are normalised to 0 (random) and 1 (reference). Prints the IQM, optimality
gap, mean and median of each group with 95% stratified bootstrap CIs and the probability of
improvement of each pair, and writes into --out the figures (aggregates, performance profiles,
sample-efficiency curves from episodes.csv, probability of improvement) and compare.json. Needs
pip install 'pgrad[compare]'. Bad input is one line with exit code 2.
"""

from __future__ import annotations

import argparse
import sys

from pgrad_app.cli import OneLineParser
from pgrad_app.errors import command


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=command("compare"), description=__doc__.splitlines()[0],
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    add = p.add_argument
    add("inputs", nargs="+", metavar="INPUT",
        help="a run directory, result JSON or folder of them; NAME=GLOB names a group")
    add("--last-episodes", type=int, metavar="N", help="score each run by the mean return of "
        "its last N training episodes (default: its eval.json)")
    add("--normalize", choices=("auto", "none", "require"), default="auto",
        help="normalised scores where every env has a published reference (auto), raw returns "
        "(none), or an error without one (require); default: auto")
    add("--gap-threshold", type=float, metavar="G", help="optimality gap threshold (default: 1 "
        "on normalised scores; on raw returns the gap is reported only with G)")
    add("--reps", type=int, metavar="N", help="bootstrap resamples (default: 2000; --fast: 200)")
    add("--fast", action="store_true", help="200 resamples and 10 curve points: a quick look")
    add("--seed", type=int, default=0, metavar="S", help="seed of the resampling (default: 0)")
    add("--points", type=int, metavar="G", help="sample-efficiency grid points (default: 25)")
    add("--window", type=int, default=20, metavar="W",
        help="training episodes each curve value averages (default: 20)")
    add("--no-curves", action="store_true", help="no sample-efficiency curves")
    add("--out", default="results/compare", metavar="DIR",
        help="folder of the figures and compare.json (default: results/compare)")
    add("--debug", action="store_true", help="show tracebacks for errors")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    from pgrad_app.experiments.compare import comparison, metrics, summary

    options = comparison.Options(
        last_episodes=args.last_episodes, normalise=args.normalize,
        gap_threshold=args.gap_threshold,
        reps=args.reps or (metrics.FAST_REPS if args.fast else metrics.REPS), seed=args.seed,
        points=args.points or (10 if args.fast else 25), window=args.window,
        curves=not args.no_curves)
    found = comparison.compare(args.inputs, options)
    summary.print_summary(found)
    written = comparison.write(found, args.out)
    print(f"wrote {', '.join(p.name for p in written)} in {args.out}")
    return 0
