"""Hyperparameter search with Optuna: one study in a database, trials trained by ``agent.learn``.

:func:`plan` resolves what every trial shares (defaults < the tuned entry < ``--set``, the
budget, the search space of :mod:`pgrad_app.experiments.search_spaces`) into a :class:`TuneSpec`;
:func:`open_study` opens the study in its storage (SQLite by default, one file; any SQLAlchemy
URL) and refuses one made with other settings; :func:`work` runs trials in this process until the
study holds ``n_trials`` counted trials; :func:`work_on_ray` runs that same loop in Ray tasks;
:func:`write_outputs` writes what the study found (``best.yaml``, the report and its figures).

A trial samples the space, builds the agent's ``Config`` (a combination that fails validation:
the trial is *pruned* with the reason recorded, which also steers TPE away from it), trains with
``agent.learn`` and evaluates every ``budget // n_evaluations`` env steps (deterministic, episodes
from :func:`pgrad.rl.evaluation.eval_seed`); each evaluation is reported to the trial, and the
pruner may stop it there. Its value is its last evaluation's mean return (as rl-zoo). A trial
whose training fails as ``pgrad-train`` would stop (NaN/Inf, a transform error, an env error) is
*failed* with its reason, and the study goes on.

Counting. A trial counts towards ``n_trials`` unless it is a failure pgrad-tune did not decide:
its process died (``kill -9``, a lost machine) or was interrupted. Trials are numbered by the
database atomically, so any number of processes share one study without a lock: a trial that
finds ``n_trials`` counted trials numbered below its own is a surplus claim (several processes
asked at once) and ends at once, failed, marked ``surplus``, not counted. A trial left running by
a dead process of this machine is failed (``abandoned``) when the next process starts; one of
another machine once Optuna's heartbeat is older than :data:`GRACE_S`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import socket
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from agents.callbacks import EvalCallback
from agents.learning import Callback, Loop
from pgrad.rl.evaluation import eval_seed
from pgrad_app.config import plugins
from pgrad_app.config import settings as config_lib
from pgrad_app.config.values import to_plain
from pgrad_app.errors import Interrupted, RunError, UserError, one_line
from pgrad_app.experiments import plan as planning
from pgrad_app.experiments import search_spaces

STUDY_FILE = "study.db"
TRIAL_LOGS = "trials"
#: Optuna's heartbeat (seconds): a running trial whose process stops beating for GRACE_S is
#: failed by the next trial that starts anywhere (for processes on other machines).
HEARTBEAT_S, GRACE_S = 60, 180
SAMPLERS = ("tpe", "random")
PRUNERS = ("median", "halving", "none")
INSTALL_HINT = "pip install 'pgrad[tune]'"


def import_optuna():
    """The ``optuna`` module, or a :class:`UserError` naming the extra to install."""
    try:
        import optuna
    except ImportError:
        raise UserError(f"pgrad-tune needs Optuna, which is not installed: {INSTALL_HINT}") \
            from None
    return optuna


@dataclasses.dataclass(frozen=True)
class TuneSpec:
    """What every trial of a study shares (recorded in the study; joining processes must agree)."""

    agent: str
    env: str  # as given: an id, or module:EnvId
    seed: int  # every trial's agent; the sampler's, mixed with the trial number
    budget: int  # env steps per trial
    base: dict[str, Any]  # hyperparameters before sampling: defaults < tuned < --set
    space: search_spaces.Space
    n_evaluations: int = 10
    eval_episodes: int = 5
    tuned_from: str | None = None
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)  # the --set values

    @property
    def eval_every(self) -> int:
        return max(1, self.budget // self.n_evaluations)

    def record(self) -> dict[str, Any]:
        """What the study records, and a process joining it must match."""
        return {"agent": self.agent, "env": self.env, "seed": self.seed, "budget": self.budget,
                "base": self.base, "space": self.space.as_data(),
                "n_evaluations": self.n_evaluations, "eval_episodes": self.eval_episodes}


def plan(agent: str, env: str, *, steps: int | None = None, sets=(), no_tuned: bool = False,
         seed: int = 0, space: str | None = None, n_evaluations: int = 10,
         eval_episodes: int = 5) -> TuneSpec:
    """Resolves and checks everything a study needs before any trial runs.

    Raises:
      UserError: as :func:`pgrad_app.experiments.plan.plan`; a bad space file; ``--set`` fixing
        a key the space searches; evaluation counts out of range.
    """
    import agents

    if not 1 <= n_evaluations <= 1000:
        raise UserError(f"--n-evaluations must be in [1, 1000]; got {n_evaluations}.")
    (run,) = planning.plan([agent], [env], [seed], steps=steps, sets=sets, no_tuned=no_tuned,
                           eval_episodes=eval_episodes)
    checked = search_spaces.load(run.agent, agents.get(run.agent).Config, space)
    both = sorted(set(run.overrides) & set(checked.keys))
    if both:
        raise UserError(f"--set {both[0]} fixes a hyperparameter the search space "
                        f"{checked.path} samples; remove one of them.")
    if run.budget < n_evaluations:
        raise UserError(f"--n-evaluations {n_evaluations} is more than the {run.budget} env "
                        "steps of a trial.")
    return TuneSpec(run.agent, env, run.seed, run.budget, run.hyperparameters, checked,
                    n_evaluations, eval_episodes, run.tuned_from, run.overrides)


# -- storage and study ------------------------------------------------------------------------


def storage_url(results: str | os.PathLike, storage: str | None = None) -> str:
    """``--storage`` as given, else the SQLite file ``RESULTS/study.db``."""
    if storage:
        return storage
    return f"sqlite:///{(Path(results) / STUDY_FILE).resolve()}"


def open_storage(url: str):
    """Optuna's RDB storage on ``url``, with the heartbeat; SQLite waits up to 60 s for a lock
    (several processes write one file) instead of failing at once.

    Raises:
      UserError: a URL SQLAlchemy cannot use or a database it cannot reach.
    """
    import time

    import sqlalchemy.exc

    optuna = import_optuna()
    engine = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    for attempt in range(6):
        with warnings.catch_warnings():  # the heartbeat is marked experimental
            warnings.simplefilter("ignore")
            try:
                return optuna.storages.RDBStorage(url, engine_kwargs=engine,
                                                  heartbeat_interval=HEARTBEAT_S,
                                                  grace_period=GRACE_S)
            except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.OperationalError) as err:
                # Processes creating a new database at once race for its schema tables: the
                # loser finds them half made; once the winner is done, they open.
                failed = err
                time.sleep(0.25 * (attempt + 1))
            except Exception as err:  # a malformed URL, an unknown dialect, a missing driver
                failed = err
                break
    raise UserError(f"--storage {url}: cannot open it: {one_line(failed)}") from None


def open_study(spec: TuneSpec, url: str, name: str, sampler=None, pruner=None,
               create: bool = True):
    """Creates (or with ``create=False`` only loads) study ``name``, maximising, and checks it
    was made for ``spec``.

    Raises:
      UserError: the study holds trials of other settings (naming the first difference), or
        there is no such study and ``create`` is false.
    """
    optuna = import_optuna()
    storage = open_storage(url)
    if not create and name not in {s.study_name for s in storage.get_all_studies()}:
        raise UserError(f"there is no study {name!r} in {url} yet.")
    study = optuna.create_study(storage=storage, study_name=name, direction="maximize",
                                sampler=sampler, pruner=pruner, load_if_exists=True)
    if study.direction != optuna.study.StudyDirection.MAXIMIZE:
        raise UserError(f"study {name!r} in {url} minimises; pgrad-tune maximises the return.")
    record = to_plain(spec.record())
    stored = study.user_attrs.get("pgrad")
    if stored is None:
        study.set_user_attr("pgrad", record)
    elif stored != record:
        key = next(k for k in record if stored.get(k) != record.get(k))
        if isinstance(record[key], dict) and isinstance(stored.get(key), dict):
            sub = sorted(k for k in {*record[key], *stored[key]}
                         if record[key].get(k) != stored[key].get(k))
            key = f"{key} {sub[0]}" if sub else key
        raise UserError(f"study {name!r} in {url} was made with other settings ({key} differs); "
                        "use another --study-name or --results, or the same settings.")
    return study


def make_sampler(name: str, seed: int, n_startup: int):
    """TPE (the default) or random sampling, reseeded per trial from ``(seed, trial number)``."""
    optuna = import_optuna()
    if name == "tpe":
        def make(s):  # as rl-zoo, multivariate; the constant liar for parallel trials
            with warnings.catch_warnings():  # both "experimental" before Optuna 5
                warnings.simplefilter("ignore")
                return optuna.samplers.TPESampler(n_startup_trials=n_startup, seed=s,
                                                  multivariate=True, constant_liar=True)
    elif name == "random":
        def make(s):
            return optuna.samplers.RandomSampler(seed=s)
    else:
        raise UserError(f"--sampler must be one of {', '.join(SAMPLERS)}; got {name!r}.")
    return _seeded_per_trial(optuna.samplers.BaseSampler)(make, seed)


@functools.cache
def _seeded_per_trial(base: type) -> type:
    class SeededPerTrial(base):
        """A sampler whose random state is a function of ``(seed, trial number)``: trial
        numbers are unique across processes, so processes sharing a study do not draw the same
        points, and one process (or a resumed study) draws the same as before."""

        def __init__(self, make: Callable[[int], Any], seed: int):
            self._make, self._seed, self._inner = make, int(seed), make(int(seed))

        def before_trial(self, study, trial) -> None:
            mixed = int(np.random.SeedSequence([self._seed, trial.number]).generate_state(1)[0])
            self._inner = self._make(mixed)
            self._inner.before_trial(study, trial)

        def infer_relative_search_space(self, study, trial):
            return self._inner.infer_relative_search_space(study, trial)

        def sample_relative(self, study, trial, search_space):
            return self._inner.sample_relative(study, trial, search_space)

        def sample_independent(self, study, trial, param_name, param_distribution):
            return self._inner.sample_independent(study, trial, param_name, param_distribution)

        def after_trial(self, study, trial, state, values) -> None:
            self._inner.after_trial(study, trial, state, values)

    return SeededPerTrial


def make_pruner(name: str, n_startup: int, n_evaluations: int):
    """rl-zoo's pruners: the median rule after ``n_evaluations // 3`` evaluations, or successive
    halving (one evaluation at least, a quarter kept per rung); ``none``: never prune."""
    optuna = import_optuna()
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=n_startup,
                                           n_warmup_steps=n_evaluations // 3)
    if name == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=4,
                                                      min_early_stopping_rate=0)
    if name == "none":
        return optuna.pruners.NopPruner()
    raise UserError(f"--pruner must be one of {', '.join(PRUNERS)}; got {name!r}.")


# -- counting trials --------------------------------------------------------------------------


def counted(trial) -> bool:
    """Whether a trial counts towards ``n_trials`` (see the module docstring)."""
    return trial.state.name != "FAIL" or "fail_reason" in trial.user_attrs


def counted_trials(study) -> list:
    return [t for t in study.get_trials(deepcopy=False) if counted(t)]


def _process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot, from /proc), ``"?"`` for a
    live process where there is no /proc, or None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:  # no /proc here: whether it runs, at least
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except OSError:  # someone else's
            pass
        return "?"
    return stat.rsplit(")", 1)[1].split()[19]


def owner() -> dict[str, Any]:
    """Who runs a trial: this machine, process and its start (a reused pid is another)."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "started": _process_start(pid)}


def recover(study) -> list[int]:
    """Fails the running trials whose process on this machine has ended; returns their
    numbers. They are marked ``abandoned`` and are not counted (their slot is run again)."""
    optuna = import_optuna()
    storage, host, found = study._storage, socket.gethostname(), []
    study_id = storage.get_study_id_from_name(study.study_name)
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        who = trial.user_attrs.get("owner") or {}
        if who.get("host") != host:
            continue
        started = _process_start(int(who["pid"]))
        if started is not None and started in ("?", who.get("started")):
            continue
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            storage.set_trial_user_attr(trial_id, "abandoned", f"its process {host}:"
                                        f"{who['pid']} ended before the trial finished")
            storage.set_trial_state_values(trial_id, optuna.trial.TrialState.FAIL)
            found.append(trial.number)
    return found


# -- one trial --------------------------------------------------------------------------------


class TrialFailed(Exception):
    """Ends a trial as failed (its reason is in the trial's ``fail_reason``)."""


class Report(Callback):
    """After each evaluation (``loop.evaluation``, set by an ``EvalCallback`` before this one):
    reports it to the Optuna trial as step 1, 2, ... (trials whose rollouts differ in length
    still compare evaluation by evaluation) and stops the run if the pruner says so."""

    name = "pruned"

    def __init__(self, trial, log: Callable[[str], None]):
        self.trial, self.log = trial, log
        self.count, self.last, self.pruned = 0, None, False

    def on_update(self, loop: Loop) -> bool:
        row = loop.evaluation
        if row is None:
            return True
        value = float(row["return_mean"])
        if not math.isfinite(value):
            raise RunError(f"evaluation at env step {loop.env_steps} returned {value}.")
        self.count, self.last = self.count + 1, value
        self.trial.report(value, self.count)
        self.log(f"evaluation {self.count} at env step {loop.env_steps:,}: return "
                 f"{value:.2f} +- {row['return_std']:.2f}")
        self.pruned = self.trial.should_prune()
        return not self.pruned


class Guard(Callback):
    """What ``pgrad-train``'s recorder refuses, for a trial: a non-finite episode return, and
    ``max_nonfinite_skips`` consecutive updates skipped for NaN/Inf gradients."""

    def __init__(self, limit: int = 10):
        self.limit, self.skips = limit, 0

    def on_update(self, loop: Loop) -> None:
        for step, ret, _ in loop.new_episodes:
            if not math.isfinite(ret):
                raise RunError(f"an episode ending at env step {step} has return {ret}.")
        skipped = float(np.asarray(loop.metrics.get("nonfinite_skipped", 0.0))) > 0
        self.skips = self.skips + 1 if skipped else 0
        if self.skips >= self.limit:
            raise RunError(f"{self.skips} consecutive updates had NaN/Inf gradients (stopped at "
                           f"env step {loop.env_steps}).")


class Signals(Callback):
    """SIGINT/SIGTERM as ``pgrad-train`` takes them: the running trial stops after its current
    update (it is then marked ``abandoned``, not counted) and no trial starts after it; a second
    signal stops at once. As a callback it ends the training loop; :meth:`check` raises
    :class:`Interrupted` (exit 130 / 143) at the safe points between."""

    name = "interrupted"

    def __init__(self):
        self.signum: int | None = None
        self._old: dict = {}

    def __enter__(self) -> Signals:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            self._old = {sig: signal.signal(sig, self._on_signal)
                         for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc) -> None:
        import signal

        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        self._old = {}

    def _on_signal(self, signum, frame) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum

    def on_update(self, loop: Loop) -> bool:
        return self.signum is None

    def check(self) -> None:
        import signal

        from pgrad_app.errors import EXIT_SIGINT, EXIT_SIGTERM

        if self.signum is not None:
            code = EXIT_SIGTERM if self.signum == signal.SIGTERM else EXIT_SIGINT
            raise Interrupted(f"{signal.Signals(self.signum).name}: stopped; the study keeps "
                              "its finished trials (the running one is not counted): the same "
                              "command continues it", code)


def _training_error(err: BaseException) -> str | None:
    """The one-line reason of a training failure ``pgrad-train`` would stop with, or None."""
    from pgrad_app.run.trainer import _transform_error  # the trainer's own reading of it

    found = _transform_error(err)
    if found is not None:
        return f"transform failed: {found}"
    if isinstance(err, (RunError, ValueError, FloatingPointError)):  # EnvError is a ValueError
        return one_line(err) or type(err).__name__
    return None


def run_trial(spec: TuneSpec, trial, log: Callable[[str], None],
              signals: Signals | None = None) -> float:
    """Samples, trains and evaluates one trial; returns its value (the last evaluation).

    Raises:
      optuna.TrialPruned: pruned after an evaluation, or an invalid sampled combination.
      TrialFailed: training failed (its reason in the trial's ``fail_reason``).
      Interrupted: ``signals`` caught SIGINT/SIGTERM (training stopped after an update).
    """
    import agents

    optuna = import_optuna()
    cls = agents.get(spec.agent)
    sampled = spec.space.sample(trial)
    log(f"trial {trial.number}: " + ", ".join(f"{k}={to_plain(v)}" for k, v in sampled.items()))

    def invalid(err) -> NoReturn:
        reason = f"invalid setting: {one_line(err)}"
        trial.set_user_attr("invalid", reason)
        log(f"pruned: {reason}")
        raise optuna.TrialPruned(reason)

    try:
        cfg = config_lib.build(cls.Config, {**spec.base, **sampled},
                               {k: f"trial {trial.number}: {k}" for k in sampled})
    except UserError as err:
        invalid(err)
    hyper = {f.name: to_plain(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    trial.set_user_attr("hyperparameters", hyper)
    try:
        agent = cls(cfg, env_id=plugins.resolve_env(spec.env), seed=spec.seed)
    except (ValueError, TypeError) as err:
        invalid(err)
    report = Report(trial, log)
    evaluations = EvalCallback(every=spec.eval_every, episodes=spec.eval_episodes,
                               seed=eval_seed(spec.seed), verbose=False)
    callbacks = [Guard(), evaluations, report, *([signals] if signals else [])]
    try:
        agent.learn(spec.budget, callbacks=callbacks, progress=False)
    except Exception as err:
        reason = _training_error(err)
        if reason is None:
            raise
        trial.set_user_attr("fail_reason", reason)
        log(f"failed: {reason}")
        raise TrialFailed(reason) from err
    finally:
        agent.close()
    if signals is not None:
        signals.check()
    if report.pruned:
        log(f"pruned after evaluation {report.count} of {spec.n_evaluations}")
        raise optuna.TrialPruned(f"pruned after evaluation {report.count}")
    log(f"complete: return {report.last:.2f}")
    return report.last


# -- the study loop ---------------------------------------------------------------------------


def objective(spec: TuneSpec, n_trials: int, results: str | os.PathLike,
              signals: Signals | None = None) -> Callable:
    """Optuna's objective: claims a slot of the ``n_trials`` (or ends as surplus), records who
    runs it, and runs :func:`run_trial` with its log in ``RESULTS/trials/trial-NNNN.log``."""
    logs = Path(results) / TRIAL_LOGS

    def run(trial) -> float:
        study = trial.study
        if signals is not None and signals.signum is not None:
            trial.set_user_attr("abandoned", "interrupted before it started")
            signals.check()
        recover(study)
        if sum(t.number < trial.number for t in counted_trials(study)) >= n_trials:
            trial.set_user_attr("surplus", True)
            study.stop()
            raise TrialFailed("surplus: the study already holds its trials")
        trial.set_user_attr("owner", owner())
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / f"trial-{trial.number:04d}.log", "a") as f:
            def log(line: str) -> None:
                f.write(line + "\n")
                f.flush()

            try:
                return run_trial(spec, trial, log, signals)
            except (KeyboardInterrupt, Interrupted):
                with contextlib.suppress(Exception):  # a second signal may cut the database off
                    trial.set_user_attr("abandoned", "interrupted")
                log("interrupted")
                raise

    return run


def trial_line(trial) -> str:
    """One line for the terminal: ``trial 3 pruned: pruned after evaluation 2 (return 21.40)
    [learning_rate=0.00123 ...]``."""
    state = {"FAIL": "failed"}.get(trial.state.name, trial.state.name.lower())
    if state == "complete":
        what = f"return {trial.value:.2f}"
    elif state == "pruned":
        last = max(trial.intermediate_values, default=None)
        what = trial.user_attrs.get("invalid") or (
            f"pruned after evaluation {last} (return {trial.intermediate_values[last]:.2f})"
            if last is not None else "pruned")
    else:
        what = str(trial.user_attrs.get("fail_reason") or trial.user_attrs.get("abandoned")
                   or "?")
    params = " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                      for k, v in trial.params.items())
    return f"trial {trial.number} {state}: {what}  [{params}]"


@dataclasses.dataclass(frozen=True)
class Options:
    """How a process (or a Ray task) works on a study: everything but the trials' settings."""

    url: str
    name: str
    n_trials: int
    results: str
    sampler: str = "tpe"
    pruner: str = "median"
    n_startup: int = 5
    timeout: float | None = None


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

BEST, REPORT = "best.yaml", "README.md"
FIGURES = {"history": "optimization_history.png", "importance": "param_importances.png",
           "intermediate": "intermediate_values.png"}


def best_trial(study):
    """The complete trial with the highest value (the first of equals), or None."""
    done = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    return max(done, key=lambda t: (t.value, -t.number)) if done else None


def best_yaml(spec: TuneSpec, trial, study_name: str) -> str:
    """A ready ``pgrad-train --config`` file: the run settings and every hyperparameter of the
    best trial, as ``config.yaml`` is laid out."""
    import agents

    cls = agents.get(spec.agent)
    cfg = config_lib.build(cls.Config, trial.user_attrs["hyperparameters"], {})
    settings = config_lib.RunSettings(agent=spec.agent, env=spec.env, seed=spec.seed,
                                      total_steps=spec.budget)
    body = config_lib.dump_run_config(settings, cfg)
    body = "\n".join(ln for ln in body.splitlines() if not ln.startswith("#")) + "\n"
    return (f"# pgrad-tune: the best trial of study {study_name!r}: trial {trial.number}, mean "
            f"return {trial.value:.2f} ({spec.eval_episodes} deterministic evaluation episodes "
            f"after {spec.budget:,} env steps).\n# Train with it: pgrad-train --config best.yaml "
            "--out DIR (total_steps is the trials' budget; --total-steps N for more).\n" + body)


def importances(study) -> dict[str, float]:
    """PED-ANOVA importances (Optuna's default evaluator; numpy only, no scikit-learn) of the
    complete trials; {} while fewer than two completed."""
    optuna = import_optuna()
    if sum(t.state.name == "COMPLETE" for t in study.get_trials(deepcopy=False)) < 2:
        return {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return optuna.importance.get_param_importances(
                study, evaluator=optuna.importance.PedAnovaImportanceEvaluator())
    except (ValueError, RuntimeError, ZeroDivisionError):
        return {}


def _figures(study, results: Path, with_importance: bool) -> list[str]:
    """Optuna's matplotlib figures of the study, as PNGs; returns the names written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pgrad.rl.files import write_atomic

    optuna = import_optuna()
    vis = optuna.visualization.matplotlib
    target = "mean evaluation return"
    plots = {"history": lambda s: vis.plot_optimization_history(s, target_name=target),
             "intermediate": vis.plot_intermediate_values}
    if with_importance:
        plots["importance"] = lambda s: vis.plot_param_importances(
            s, evaluator=optuna.importance.PedAnovaImportanceEvaluator(), target_name=target)
    written = []
    for key, plot in plots.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the matplotlib backend is "experimental"
            try:
                ax = plot(study)
            except (ValueError, RuntimeError):
                continue
        fig = ax.figure
        try:
            import io

            fig.set_size_inches(8, 5)
            fig.tight_layout()
            buf = io.BytesIO()
            fig.savefig(buf, format="png", dpi=100)
            write_atomic(results / FIGURES[key], buf.getvalue())
            written.append(FIGURES[key])
        finally:
            plt.close(fig)
    return written


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|")


def report(spec: TuneSpec, study, opts: Options, figures: list[str],
           weights: dict[str, float]) -> str:
    """The study's README.md: settings, best trial, importances, figures, every trial."""
    trials = study.get_trials(deepcopy=False)
    kept = [t for t in trials if counted(t)]
    states = {s: sum(t.state.name == s for t in kept) for s in ("COMPLETE", "PRUNED", "FAIL")}
    best = best_trial(study)
    names = [p.name for p in spec.space.params]
    others = len(trials) - len(kept)
    lines = [f"# Tuning {spec.agent} on {spec.env}", "",
             f"Study `{opts.name}` in `{opts.url}`: {len(kept)} of {opts.n_trials} trials "
             f"({states['COMPLETE']} complete, {states['PRUNED']} pruned, {states['FAIL']} "
             "failed)" + (f"; {others} more records not counted (a process that ended "
                          "mid-trial, or surplus claims)" if others else "") + ".",
             f"Each trial: {spec.budget:,} env steps, seed {spec.seed}, {spec.n_evaluations} "
             f"evaluations of {spec.eval_episodes} deterministic episodes (seeds from "
             f"{eval_seed(spec.seed)}); its value is the last one's mean return. Sampler "
             f"{opts.sampler}, pruner {opts.pruner}, space `{spec.space.path}`; the settings "
             "it samples over: the agent's defaults"
             + (f" < `{spec.tuned_from}`" if spec.tuned_from else "")
             + (" < --set " + " ".join(f"{k}={_cell(v)}" for k, v in spec.overrides.items())
                if spec.overrides else "") + ".", ""]
    if best is not None:
        lines += [f"**Best: trial {best.number}, return {best.value:.2f}** -- `{BEST}`: "
                  f"`pgrad-train --config {BEST} --out DIR`.", ""]
    lines += ["## Search space", "", "| parameter | sampled as |", "|---|---|"]
    lines += [f"| {p.name} | {_cell(p.describe())} |" for p in spec.space.params]
    if weights:
        lines += ["", f"## Parameter importance (PED-ANOVA over {states['COMPLETE']} complete "
                  "trials)", "",
                  "| parameter | importance |", "|---|---|"]
        lines += [f"| {k} | {v:.3f} |" for k, v in weights.items()]
    lines += [""] + [f"![{name}]({name})" for name in figures]
    lines += ["", "## Trials", "",
              "| trial | state | last evaluation | evaluations | " + " | ".join(names)
              + " | note |",
              "|---" * (len(names) + 5) + "|"]
    for t in sorted(kept, key=lambda t: t.number):
        note = (t.user_attrs.get("invalid") or t.user_attrs.get("fail_reason") or "")
        value = f"{t.value:.2f}" if t.value is not None else "-"
        lines.append(f"| {t.number} | {t.state.name.lower()} | {value} | "
                     f"{len(t.intermediate_values)} | "
                     + " | ".join(_cell(t.params.get(n, "-")) for n in names)
                     + f" | {_cell(note)} |")
    return "\n".join(lines) + "\n"


def write_outputs(spec: TuneSpec, opts: Options) -> Path | None:
    """Writes ``best.yaml`` (if a trial completed), the PNGs and ``README.md`` into the results
    folder (atomically: processes sharing a study may write them at once); returns best.yaml's
    path or None."""
    from pgrad.rl.files import write_atomic

    results = Path(opts.results)
    results.mkdir(parents=True, exist_ok=True)
    study = open_study(spec, opts.url, opts.name, create=False)
    best, weights = best_trial(study), importances(study)
    figures = _figures(study, results, with_importance=bool(weights))
    write_atomic(results / REPORT, report(spec, study, opts, figures, weights))
    if best is None:
        return None
    return write_atomic(results / BEST, best_yaml(spec, best, opts.name))
