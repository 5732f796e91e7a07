"""Sweep on Ray: agents x envs x seeds x --grid values, each trial a run directory; a report.

    python scripts/sweep.py --agents a2c --envs CartPole-v1 --seeds 0 1 2 \\
        --grid learning_rate=3e-4,7e-4,2e-3 --steps 100000 --results results/a2c-lr
    python scripts/sweep.py --results results/a2c-lr --report-only

Every combination of the --grid values (each --grid KEY=V1,V2,... is one axis) is run for every
agent, env and seed, on top of the agent's tuned hyperparameters for the env and --set. A trial
is a Ray task reserving --cpus-per-trial CPUs (so a local instance runs cores / that many at a
time): pgrad-train into RESULTS/runs/NAME, then pgrad-evaluate (20 deterministic
episodes), then RESULTS/NAME.json. Trials whose JSON exists are skipped, a trial that stopped
half-way resumes from its checkpoint; one that fails is reported with the end of its log
(RESULTS/logs/) and the others go on (exit 1 at the end). RESULTS/README.md and
RESULTS/curves_ENV.png are the benchmark's report (pgrad-benchmark), one row per agent and
grid point. Needs pgrad[ray]; --ray-address uses a running cluster (RESULTS on a shared file
system), otherwise a local instance is started and stopped. Bad input: one line, exit 2.
"""

from __future__ import annotations

import argparse
import sys

from pgrad_app.cli import OneLineParser, add_grid_args
from pgrad_app.errors import UserError, command


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=command("sweep"), description=__doc__.splitlines()[0],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    add = p.add_argument
    add_grid_args(p, "a2c ppo")
    add("--grid", action="append", default=[], metavar="KEY=V1,V2",
        help="a hyperparameter and its values, one axis of the grid (repeatable; lists keep "
        "their commas: hidden=[64,64],[256,256]; default: none)")
    add("--set", action="append", default=[], metavar="KEY=VALUE",
        help="override a hyperparameter of every trial (repeatable; default: none)")
    add("--steps", type=int, metavar="N", help="env steps per trial (default: the tuned entry's "
        "n_timesteps)")
    add("--cpus-per-trial", type=int, default=1, metavar="C",
        help="CPUs each trial reserves; its thread pools get as many (default: 1)")
    add("--results", default="results/sweep", metavar="DIR",
        help="results folder (default: results/sweep)")
    add("--no-tuned", action="store_true",
        help="the agents' plain defaults instead of their tuned per-env hyperparameters")
    add("--eval-episodes", type=int, default=20, metavar="N",
        help="deterministic evaluation episodes per trial (default: 20)")
    add("--ray-address", metavar="ADDR", help="a running Ray cluster (default: a local instance "
        "with this machine's cores)")
    add("--report-only", action="store_true", help="only write the report from the results")
    add("--debug", action="store_true", help="show tracebacks for errors")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    from pgrad_app.experiments.benchmark import launch as launching

    def plan():
        from pgrad_app.distributed import session
        from pgrad_app.experiments.sweep import plan as planning

        if args.cpus_per_trial < 1:
            raise UserError(f"--cpus-per-trial must be >= 1; got {args.cpus_per_trial}.")
        session.import_ray("sweep.py")
        return planning.plan(args.agents, args.envs, args.seeds, steps=args.steps,
                             sets=args.set, grid=args.grid, no_tuned=args.no_tuned,
                             eval_episodes=args.eval_episodes)

    def launch(todo):
        from pgrad_app.distributed import session
        from pgrad_app.experiments.sweep import launch as sweep_launch
        from pgrad_app.experiments.sweep import plan as planning

        if not todo:
            return None  # no Ray instance started for nothing
        planning.check_started(todo, args.results)  # before Ray starts: files only
        with session.ray_session(args.ray_address, what="sweep.py"):
            return sweep_launch.launch(todo, args.results, args.cpus_per_trial,
                                       launching.command_line(argv, "sweep"))

    return launching.run_and_report(args, plan, launch, "trial",
                                    f"{args.cpus_per_trial} CPU(s) each")

