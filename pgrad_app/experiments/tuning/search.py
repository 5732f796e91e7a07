"""Hyperparameter search with Optuna: one study in a database, trials trained by ``agent.learn``.

This module runs the trials (in this process or in Ray tasks); the study and its settings are in
:mod:`pgrad_app.experiments.tuning.study`, one trial in :mod:`pgrad_app.experiments.tuning.trials`,
the outputs in :mod:`pgrad_app.experiments.tuning.report`.

``study.plan`` resolves what every trial shares (defaults < the tuned entry < ``--set``, the
budget, the search space of :mod:`pgrad_app.experiments.tuning.search_spaces`) into a
``TuneSpec``; ``study.open_study`` opens the study in its storage (SQLite by default, one file;
any SQLAlchemy URL) and refuses one made with other settings; :func:`work` runs trials in this
process until the study holds ``n_trials`` counted trials; :func:`work_on_ray` runs that same
loop in Ray tasks; ``report.write_outputs`` writes what the study found (``best.yaml``, the
report and its figures).

A trial samples the space, builds the agent's ``Config`` (a combination that fails validation: the
trial is *pruned* with the reason recorded, which also steers TPE away from it), trains with
``agent.learn`` and evaluates every ``budget // n_evaluations`` env steps (deterministic, episodes
from :func:`pgrad.rl.evaluation.evaluate_policy.eval_seed`); each evaluation is reported to the
trial, and the pruner may stop it there. Its value is its last evaluation's mean return (as rl-zoo).
A trial whose training fails as ``pgrad-train`` would stop (NaN/Inf, a transform error, an env
error) is *failed* with its reason, and the study goes on.

Counting. A trial counts towards ``n_trials`` unless it is a failure pgrad-tune did not decide:
its process died (``kill -9``, a lost machine) or was interrupted. Trials are numbered by the
database atomically, so any number of processes share one study without a lock: a trial that
finds ``n_trials`` counted trials numbered below its own is a surplus claim (several processes
asked at once) and ends at once, failed, marked ``surplus``, not counted. A trial left running by
a dead process of this machine is failed (``abandoned``) when the next process starts; one of
another machine once Optuna's heartbeat is older than ``study.GRACE_S``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from pgrad_app.errors import RunError, UserError, one_line
from pgrad_app.experiments.tuning.study import (
    Options,
    TuneSpec,
    counted,
    counted_trials,
    import_optuna,
    make_pruner,
    make_sampler,
    open_study,
    recover,
)
from pgrad_app.experiments.tuning.trials import Signals, TrialFailed, objective, trial_line


def work(spec: TuneSpec, opts: Options, echo: Callable[[str], None] = print,
         signals: Signals | None = None) -> list[int]:
    """Runs trials in this process until the study holds ``n_trials`` counted ones (or the
    timeout); returns the numbers of the trials it ran. Safe to run in many processes at once.

    Raises:
      Interrupted: ``signals`` (entered by the caller) caught SIGINT/SIGTERM.
    """
    study = open_study(spec, opts.url, opts.name,
                       make_sampler(opts.sampler, spec.seed, opts.n_startup),
                       make_pruner(opts.pruner, opts.n_startup, spec.n_evaluations))
    for number in recover(study):
        echo(f"trial {number} abandoned: its process ended before it finished (not counted)")
    ran: list[int] = []

    def after(study, trial) -> None:
        if trial.user_attrs.get("surplus"):
            return
        ran.append(trial.number)
        echo(trial_line(trial))
        if len(counted_trials(study)) >= opts.n_trials or (signals and signals.signum):
            study.stop()

    if len(counted_trials(study)) < opts.n_trials:
        study.optimize(objective(spec, opts.n_trials, opts.results, signals),
                       timeout=opts.timeout, callbacks=[after], catch=(TrialFailed,),
                       gc_after_trial=True)
    if signals is not None:
        signals.check()
    return ran


def _ray_work(spec: TuneSpec, opts: Options) -> list[int]:
    """:func:`work` in a Ray task (its own process: quiet TensorFlow and Optuna first)."""
    from pgrad_app.quiet import silence

    silence()
    import_optuna().logging.set_verbosity(import_optuna().logging.ERROR)
    return work(spec, opts, echo=lambda line: None)


def work_on_ray(spec: TuneSpec, opts: Options, workers: int, address: str | None = None,
                cpus: int = 1, echo: Callable[[str], None] = print) -> list[int]:
    """:func:`work` in ``workers`` Ray tasks on one study (each ``cpus`` CPUs and TensorFlow
    threads); this process prints the trials as they finish. Returns the trials' numbers."""
    from pgrad_app.distributed import session

    if address and opts.url.startswith("sqlite"):
        echo(f"warning: the study is a SQLite file on this machine ({opts.url}); Ray workers on "
             "other machines need a database every node reaches (--storage postgresql://...).")
    runtime = session.worker_runtime_env()
    runtime["env_vars"].update({v: str(cpus) for v in (
        "OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")})
    study = open_study(spec, opts.url, opts.name)  # created here, before the tasks race for it
    seen = {t.number for t in study.get_trials(deepcopy=False) if t.state.is_finished()}
    # A local instance gets a CPU per task asked for (as rollout workers do): N at a time.
    local_cpus = None if address else max(os.cpu_count() or 1, workers * cpus)
    with session.ray_session(address, num_cpus=local_cpus, what="--workers") as ray:
        if ray.cluster_resources().get("CPU", 0) < cpus:  # else the tasks would wait for ever
            raise UserError(f"--cpus-per-worker {cpus}: the Ray cluster has only "
                            f"{ray.cluster_resources().get('CPU', 0):g} CPUs.")
        task = ray.remote(num_cpus=cpus, max_retries=0)(_ray_work)
        pending = [task.options(runtime_env=runtime).remote(spec, opts) for _ in range(workers)]
        ran: list[int] = []
        while pending:
            done, pending = ray.wait(pending, num_returns=len(pending), timeout=2.0)
            for trial in study.get_trials(deepcopy=False):
                if trial.state.is_finished() and trial.number not in seen:
                    seen.add(trial.number)
                    if counted(trial) or trial.user_attrs.get("abandoned"):
                        echo(trial_line(trial))
            for ref in done:
                try:
                    ran += ray.get(ref)
                except Exception as err:
                    cause = getattr(err, "cause", None)
                    if isinstance(cause, (UserError, RunError)):
                        raise cause from None
                    raise RunError(f"a Ray worker failed: {one_line(err)}") from err
    return sorted(ran)


# -- outputs ----------------------------------------------------------------------------------

