"""Learning benchmark: agents x envs x seeds, resumable, two runs at a time; then a report.

    python scripts/benchmark.py --agents ppo a2c --envs HalfCheetah-v5 Hopper-v5 \\
        --seeds 0 1 2 --results results/mujoco
    python scripts/benchmark.py --results results/mujoco --report-only

Each run trains in its own process with the agent's tuned hyperparameters for the env
(pgrad_app/config/hyperparams/AGENT.yaml; --no-tuned: the defaults) and --set overrides, for --steps
env steps or the entry's n_timesteps, then evaluates its final policy deterministically over 20
episodes and writes RESULTS/AGENT__ENV__seedS.json. Runs whose JSON exists are skipped; a run that
fails is reported with the end of its log (RESULTS/logs/) and the others go on; the exit code is 1
if any failed. RESULTS/README.md gets a table per env (mean ± std and IQM with a bootstrap 95% CI
over seeds, wall time, steps/s) and RESULTS/curves_ENV.png the learning curves. Bad input is one
line with exit code 2 before any run starts.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from pgrad_app.cli import OneLineParser, add_grid_args
from pgrad_app.errors import UserError, command


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=command("benchmark"), description=__doc__.splitlines()[0],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    add = p.add_argument
    add_grid_args(p, "ppo a2c")
    add("--steps", type=int, metavar="N", help="env steps per run (default: the tuned entry's "
        "n_timesteps)")
    add("--jobs", type=int, default=2, metavar="J", help="runs at a time, each with cores/J "
        "threads (default: 2)")
    add("--results", default="results", metavar="DIR", help="results folder (default: results)")
    add("--set", action="append", default=[], metavar="KEY=VALUE",
        help="override a hyperparameter of every run (repeatable)")
    add("--no-tuned", action="store_true",
        help="the agents' plain defaults instead of their tuned per-env hyperparameters")
    add("--eval-episodes", type=int, default=20, metavar="N",
        help="deterministic evaluation episodes per run (default: 20)")
    add("--report-only", action="store_true", help="only write the report from the results")
    add("--reproducible", action="store_true", help="every run repeats bit for bit from its "
        "seed (pgrad-train --reproducible: oneDNN's kernels off; default: off)")
    add("--debug", action="store_true", help="show tracebacks for errors")
    return p


@contextlib.contextmanager
def progress(total: int):
    """Yields ``echo(line)``: prints the line and, on a terminal, advances a progress bar."""
    if not sys.stdout.isatty() or total == 0:
        yield lambda line: print(line, flush=True)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress("runs", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as bar:
        task = bar.add_task("runs", total=total)

        def echo(line: str) -> None:
            bar.console.print(line, markup=False, highlight=False)
            bar.advance(task)

        yield echo


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    from pgrad_app.experiments.benchmark import launch as launching
    from pgrad_app.experiments.benchmark import plan as planning

    def plan():
        if args.jobs < 1:
            raise UserError(f"--jobs must be >= 1; got {args.jobs}.")
        return planning.plan(args.agents, args.envs, args.seeds, steps=args.steps,
                             sets=args.set, no_tuned=args.no_tuned,
                             eval_episodes=args.eval_episodes)

    def launch(todo):
        with progress(len(todo)) as echo:
            return launching.launch(todo, args.results, jobs=args.jobs,
                                    command=launching.command_line(argv), echo=echo)

    return launching.run_and_report(args, plan, launch, "run", f"{args.jobs} at a time")

