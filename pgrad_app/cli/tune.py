"""Hyperparameter search with Optuna: a study in a database, trials pruned on evaluations.

    pgrad-tune --agent ppo --env CartPole-v1 --steps 50000 --n-trials 50 \\
        --results results/tune-ppo
    pgrad-tune ... --workers 4              # four trials at a time on Ray, one study
    pgrad-tune --agent ppo --env CartPole-v1 --results results/tune-ppo --report-only

Each trial samples the agent's search space (pgrad_app/experiments/tuning/search_spaces/AGENT.yaml,
or --space FILE) over its settings (defaults < tuned entry < --set), trains --steps env steps (else
the tuned entry's n_timesteps) with --seed, evaluates --n-evaluations times on the way
(deterministic, --eval-episodes each; the pruner may stop it there) and scores its last evaluation's
mean return. The study lives in RESULTS/study.db (SQLite) or --storage URL; running the same command
again continues it, and several processes (or --workers) share it until it holds --n-trials trials.
RESULTS gets best.yaml (pgrad-train --config best.yaml), README.md with the trials, importances and
Optuna's figures, and trials/trial-N.log. Bad input is one line with exit code 2 before any trial
starts; the exit code is 1 if no trial completed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pgrad_app.cli import OneLineParser
from pgrad_app.errors import RunError, UserError, command, one_line


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=command("tune"), description=__doc__.splitlines()[0],
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    add = p.add_argument
    add("--agent", required=True, help="agent to tune: a2c, ppo, npg or reinforce")
    add("--env", required=True, help="Gymnasium env id (or module:EnvId)")
    add("--steps", type=int, metavar="N", help="env steps per trial (default: the tuned "
        "entry's n_timesteps)")
    add("--n-trials", type=int, default=20, metavar="N", help="trials the study holds when "
        "done, over every process working on it (default: 20)")
    add("--timeout", type=float, metavar="S", help="start no trial after S seconds in this "
        "process (default: none)")
    add("--seed", type=int, default=0, metavar="S", help="seed of every trial's agent, and of "
        "the sampler (mixed with each trial's number; default: 0)")
    add("--space", metavar="FILE", help="search space YAML (default: the agent's own, "
        "pgrad_app/experiments/tuning/search_spaces/AGENT.yaml; docs/tuning.md)")
    add("--set", action="append", default=[], metavar="KEY=VALUE",
        help="fix a hyperparameter of every trial (repeatable; not one the space samples)")
    add("--no-tuned", action="store_true",
        help="start from the plain defaults, not the tuned per-env hyperparameters")
    add("--sampler", choices=("tpe", "random"), default="tpe", help="default: tpe")
    add("--pruner", choices=("median", "halving", "none"), default="median",
        help="median stopping rule (after n-evaluations // 3), successive halving, or none "
        "(default: median)")
    add("--n-startup-trials", type=int, default=5, metavar="N", help="random trials before TPE "
        "and unpruned trials before the median rule (default: 5)")
    add("--n-evaluations", type=int, default=10, metavar="K", help="evaluations per trial, "
        "every steps/K env steps (default: 10)")
    add("--eval-episodes", type=int, default=5, metavar="N",
        help="deterministic episodes per evaluation (default: 5)")
    add("--results", metavar="DIR", help="output folder (default: results/tune-AGENT-ENV)")
    add("--storage", metavar="URL", help="the study's database, any SQLAlchemy URL, e.g. "
        "postgresql://user:pass@host/db (default: sqlite:///RESULTS/study.db)")
    add("--study-name", metavar="NAME", help="default: AGENT-ENV")
    add("--workers", type=int, default=0, metavar="N", help="run N trials at a time as Ray "
        "tasks on the same study (needs pgrad[ray]; default: 0 = in this process)")
    add("--ray-address", metavar="ADDR", help="with --workers: a running Ray cluster (default: "
        "a local instance)")
    add("--cpus-per-worker", type=int, default=1, metavar="C",
        help="with --workers: CPUs (and TensorFlow threads) per task (default: 1)")
    add("--report-only", action="store_true", help="only write best.yaml and the report")
    add("--debug", action="store_true", help="show tracebacks for errors")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    from pgrad_app.experiments.tuning import study as tune_study

    optuna = tune_study.import_optuna()
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # one line per trial is ours
    for flag, value, low, high in (
            ("--n-trials", args.n_trials, 1, tune_study.MAX_TRIALS),
            ("--workers", args.workers, 0, 1024),
            ("--n-startup-trials", args.n_startup_trials, 0, tune_study.MAX_TRIALS),
            ("--cpus-per-worker", args.cpus_per_worker, 1, 1024)):
        if value < low:
            raise UserError(f"{flag} must be >= {low}; got {value}.")
        if value > high:
            raise UserError(f"{flag} must be <= {high:,}; got {value:,}.")
    if args.timeout is not None and not 0 < args.timeout < float("inf"):
        raise UserError(f"--timeout must be > 0 seconds and finite; got {args.timeout}.")
    tune_study.lock_wait()  # a bad PGRAD_TUNE_LOCK_WAIT: one line before any work
    if args.ray_address and not args.workers:
        raise UserError("--ray-address needs --workers N.")
    spec = tune_study.plan(args.agent, args.env, steps=args.steps, sets=args.set,
                     no_tuned=args.no_tuned, seed=args.seed, space=args.space,
                     n_evaluations=args.n_evaluations, eval_episodes=args.eval_episodes)
    env_name = spec.env.split(":")[-1].replace("/", "_")
    results = Path(args.results or f"results/tune-{spec.agent}-{env_name}")
    from pgrad_app.run.directory import check_path

    check_path(results, f"--results {results}")  # SQLite and TensorFlow take UTF-8 names only
    if results.exists() and not results.is_dir():
        raise UserError(f"--results {results} is a file, not a folder.")
    if args.report_only and not args.storage and not (results / tune_study.STUDY_FILE).is_file():
        raise UserError(f"--report-only: no study in {results} ({tune_study.STUDY_FILE}).")
    try:
        results.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"--results {results}: cannot create it ({err.strerror or err}).") \
            from None
    opts = tune_study.Options(tune_study.storage_url(results, args.storage),
                        args.study_name or f"{spec.agent}-{env_name}", args.n_trials,
                        str(results), args.sampler, args.pruner, args.n_startup_trials,
                        args.timeout)
    if args.workers:
        from pgrad_app.distributed import session

        session.import_ray()
    try:
        return _study(args, spec, opts, results)
    except sqlalchemy_errors() as err:  # a lock held past the wait, a lost database
        raise RunError(f"the study database {opts.url}: {one_line(getattr(err, 'orig', err))}"
                       f" (waited up to {tune_study.lock_wait():g} s for a lock; the finished "
                       "trials are kept).") from None


def sqlalchemy_errors() -> tuple[type, ...]:
    """SQLAlchemy's errors of a database that stopped answering (locked, gone)."""
    import sqlalchemy.exc

    return (sqlalchemy.exc.OperationalError,)


def _study(args, spec, opts, results: Path) -> int:
    """Opens the study, runs its trials and writes the report (after every check)."""
    from pgrad_app.experiments.tuning import report as tune_report
    from pgrad_app.experiments.tuning import search as tune
    from pgrad_app.experiments.tuning import study as tune_study
    from pgrad_app.experiments.tuning import trials as tune_trials

    # Refuses a study of other settings; --report-only needs one to exist.
    study = tune_study.open_study(spec, opts.url, opts.name, create=not args.report_only)
    if not args.report_only:
        done = len(tune_study.counted_trials(study))
        print(f"study {opts.name} ({opts.url}): {done} of {opts.n_trials} trials done; "
              f"{spec.agent} on {spec.env}, {spec.budget:,} env steps per trial, sampler "
              f"{opts.sampler}, pruner {opts.pruner}"
              + (f", {args.workers} Ray workers" if args.workers else ""), flush=True)
        echo = lambda line: print(line, flush=True)
        if args.workers:
            tune.work_on_ray(spec, opts, args.workers, args.ray_address, args.cpus_per_worker,
                             echo=echo)
        else:
            with tune_trials.Signals() as signals:  # SIGINT/SIGTERM: stop after the current update
                tune.work(spec, opts, echo=echo, signals=signals)
    best = tune_report.write_outputs(spec, opts)
    trials = tune_study.counted_trials(study)
    states = [t.state.name for t in trials]
    print(f"{len(trials)} trials ({states.count('COMPLETE')} complete, "
          f"{states.count('PRUNED')} pruned, {states.count('FAIL')} failed); report: "
          f"{results / tune_study.REPORT}")
    if best is None:
        print("no trial completed: no best.yaml", file=sys.stderr)
        return 1
    top = tune_report.best_trial(study)
    print(f"best: trial {top.number}, return {top.value:.2f}; train it with: "
          f"{command('train')} --config {best} --out DIR")
    return 0
