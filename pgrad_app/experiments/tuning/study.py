"""The study of ``pgrad-tune``: what every trial shares (:class:`TuneSpec`, :func:`plan`), the
storage and the study in it, the sampler and pruner, and which trials count (see
:mod:`pgrad_app.experiments.tuning.search`)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import os
import socket
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pgrad_app.config.settings import MAX_TOTAL_STEPS
from pgrad_app.config.values import to_plain
from pgrad_app.errors import UserError, one_line
from pgrad_app.experiments.benchmark import plan as planning
from pgrad_app.experiments.tuning import search_spaces

STUDY_FILE = "study.db"
BEST, REPORT = "best.yaml", "README.md"
TRIAL_LOGS = "trials"
#: Optuna's heartbeat (seconds): a running trial whose process stops beating for GRACE_S is
#: failed by the next trial that starts anywhere (for processes on other machines).
HEARTBEAT_S, GRACE_S = 60, 180
SAMPLERS = ("tpe", "random")
PRUNERS = ("median", "halving", "none")
INSTALL_HINT = "pip install 'pgrad[tune]'"
#: Bounds on how long a study runs, checked before trial 0: trials a study holds, evaluation
#: episodes per evaluation (pgrad.evaluate's own bound).
MAX_TRIALS = 10_000
MAX_EPISODES = 10_000


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
      UserError: as :func:`pgrad_app.experiments.benchmark.plan.plan`; a bad space file;
        ``--set`` fixing a key the space searches; evaluation counts out of range.
    """
    import agents

    if not 1 <= n_evaluations <= 1000:
        raise UserError(f"--n-evaluations must be in [1, 1000]; got {n_evaluations}.")
    if steps is not None and not 1 <= steps <= MAX_TOTAL_STEPS:
        raise UserError(f"--steps must be in [1, {MAX_TOTAL_STEPS:,}]; got {steps}.")
    if not 1 <= eval_episodes <= MAX_EPISODES:
        raise UserError(f"--eval-episodes must be in [1, {MAX_EPISODES:,}]; got {eval_episodes}.")
    (run,) = planning.plan([agent], [env], [seed], steps=steps, sets=sets, no_tuned=no_tuned,
                           eval_episodes=eval_episodes)
    checked = search_spaces.load(run.agent, agents.get(run.agent).Config, space)
    both = sorted(set(run.overrides) & set(checked.keys))
    if both:
        raise UserError(f"--set {both[0]} fixes a hyperparameter the search space "
                        f"{checked.path} samples; remove one of them.")
    search_spaces.check_values(checked, agents.get(run.agent).Config, run.hyperparameters,
                               run.agent)
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


#: How long pgrad-tune waits for a study database another process holds locked before it gives
#: up with one line (seconds; docs/tuning.md); the environment variable overrides it.
LOCK_WAIT_S = 60.0
LOCK_WAIT_ENV = "PGRAD_TUNE_LOCK_WAIT"
#: The longest wait the environment variable may ask for (one hour).
MAX_LOCK_WAIT_S = 3600.0


def lock_wait() -> float:
    """Seconds to wait for a locked SQLite study: ``$PGRAD_TUNE_LOCK_WAIT``, else
    :data:`LOCK_WAIT_S`.

    Raises:
      UserError: the variable is not a number in ``(0, MAX_LOCK_WAIT_S]``.
    """
    text = os.environ.get(LOCK_WAIT_ENV, "").strip()
    if not text:
        return LOCK_WAIT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= MAX_LOCK_WAIT_S:
        raise UserError(f"{LOCK_WAIT_ENV}={text!r}: expected seconds in (0, "
                        f"{MAX_LOCK_WAIT_S:g}].")
    return value


def _locked(err: BaseException) -> bool:
    return "locked" in str(getattr(err, "orig", err)).lower()


def open_storage(url: str):
    """Optuna's RDB storage on ``url``, with the heartbeat. A SQLite study another process holds
    locked is waited for up to :func:`lock_wait` seconds (60 by default) in all, then refused in
    one line; processes creating a new database at once retry until its tables exist.

    Raises:
      UserError: a URL SQLAlchemy cannot use, a database it cannot reach, or one still locked
        after the wait.
    """
    import time

    import sqlalchemy.exc

    optuna = import_optuna()
    wait = lock_wait()
    sqlite = url.startswith("sqlite")
    deadline = time.monotonic() + wait
    failed: BaseException | None = None
    attempt = 0
    while True:
        # SQLite's own busy wait never runs past the deadline (each statement waits at most
        # what is left of it; the storage keeps the full wait for the statements of trials).
        left = max(deadline - time.monotonic(), 0.05)
        engine = {"connect_args": {"timeout": min(left, wait)}} if sqlite else {}
        with warnings.catch_warnings():  # the heartbeat is marked experimental
            warnings.simplefilter("ignore")
            try:
                storage = optuna.storages.RDBStorage(url, engine_kwargs=engine,
                                                     heartbeat_interval=HEARTBEAT_S,
                                                     grace_period=GRACE_S)
                if sqlite:  # trials' statements wait the whole wait for a lock
                    storage.engine.dispose()
                    storage = optuna.storages.RDBStorage(
                        url, engine_kwargs={"connect_args": {"timeout": wait}},
                        heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S,
                        skip_table_creation=True, skip_compatibility_check=True)
                return storage
            except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.OperationalError) as err:
                # Processes creating a new database at once race for its schema tables: the
                # loser finds them half made; once the winner is done, they open.
                failed = err
            except Exception as err:  # a malformed URL, an unknown dialect, a missing driver
                raise UserError(f"--storage {url}: cannot open it: {one_line(err)}") from None
        attempt += 1
        if time.monotonic() >= deadline or (not _locked(failed) and attempt >= 6):
            break
        time.sleep(min(0.25 * attempt, max(deadline - time.monotonic(), 0)))
    if _locked(failed):
        raise UserError(f"--storage {url}: the study database is locked by another process; "
                        f"gave up after {wait:g} s (set {LOCK_WAIT_ENV}=SECONDS to wait "
                        "longer, or stop the other process).") from None
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


#: Seconds after which a running trial that never recorded its owner is taken as abandoned.
OWNERLESS_GRACE = 60.0


def owner() -> dict[str, Any]:
    """Who runs a trial: this machine, process and its start (a reused pid is another)."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "started": _process_start(pid)}


def recover(study) -> list[int]:
    """Fails the running trials whose process on this machine has ended; returns their
    numbers. They are marked ``abandoned`` and are not counted (their slot is run again). A
    running trial with no owner recorded (its process died in the instant after Optuna created
    it) is abandoned once it is :data:`OWNERLESS_GRACE` seconds old."""
    optuna = import_optuna()
    storage, host, found = study._storage, socket.gethostname(), []
    study_id = storage.get_study_id_from_name(study.study_name)
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        who = trial.user_attrs.get("owner")
        if who is None:
            # Killed between Optuna creating the trial and its first line (which names the
            # owner): no process can still be about to claim it after OWNERLESS_GRACE seconds.
            begun = trial.datetime_start
            if begun is None or (datetime.datetime.now() - begun).total_seconds() < OWNERLESS_GRACE:
                continue
        elif who.get("host") != host:
            continue
        else:
            started = _process_start(int(who["pid"]))
            if started is not None and started in ("?", who.get("started")):
                continue
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            whose = f"its process {host}:{who['pid']}" if who else "its process (unrecorded)"
            storage.set_trial_user_attr(trial_id, "abandoned",
                                        f"{whose} ended before the trial finished")
            storage.set_trial_state_values(trial_id, optuna.trial.TrialState.FAIL)
            found.append(trial.number)
    return found


# -- one trial --------------------------------------------------------------------------------


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
