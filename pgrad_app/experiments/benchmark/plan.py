"""Planning a multi-seed benchmark: every run resolved and checked before anything starts.

:func:`plan` resolves every run's hyperparameters in this process (defaults < the tuned entry of
``pgrad_app/config/hyperparams/AGENT.yaml`` < ``--set``) into a :class:`RunSpec`, looking each
agent's entry for each env up once (:func:`tuned_entries`; a sweep passes them to every grid
point's plan); :func:`check_existing` compares the plan with the results already on disk (a
finished run is skipped, one made with other settings refused).
:mod:`pgrad_app.experiments.benchmark.launch` runs what is left.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pgrad_app.config import plugins, tuned
from pgrad_app.config import settings as config_lib
from pgrad_app.config.values import parse_set, to_plain
from pgrad_app.errors import UserError, one_line
from pgrad_app.experiments.benchmark.report import read_result

#: The folder holding pgrad/, agents/ and pgrad_app/ (tuned tables are recorded relative to it).
ROOT = Path(__file__).resolve().parents[3]
#: Each (agent, env)'s tuned entry, or None (no entry, or ``--no-tuned``).
TunedEntries = Mapping[tuple[str, str], tuned.Entry | None]


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run, fully resolved: what the child process is told (as JSON)."""

    agent: str
    env: str  # as given: an id, or module:EnvId
    seed: int
    budget: int  # env steps to train for
    hyperparameters: dict[str, Any]  # every Config field, plain YAML/JSON values
    tuned_from: str | None  # the tuned table used, if any
    overrides: dict[str, Any]  # the --set values
    eval_episodes: int = 20

    @property
    def name(self) -> str:
        env = self.env.split(":")[-1].replace("/", "_")
        return f"{self.agent}__{env}__seed{self.seed}"


def result_path(results: Path, spec: RunSpec) -> Path:
    return Path(results) / f"{spec.name}.json"


def tuned_entries(agent_names: Sequence[str], env_ids: Sequence[str],
                  no_tuned: bool = False) -> dict[tuple[str, str], tuned.Entry | None]:
    """Each agent's tuned entry for each env, each looked up once (all None with ``no_tuned``).

    Raises:
      UserError: a malformed table or a bad entry (naming the file, env and key).
    """
    return {(agent, env): None if no_tuned else tuned.lookup(agent, env)
            for agent in agent_names for env in env_ids}


def plan(agent_names: Sequence[str], env_ids: Sequence[str], seeds: Sequence[int],
         steps: int | None = None, sets: Sequence[str] = (), no_tuned: bool = False,
         eval_episodes: int = 20, entries: TunedEntries | None = None) -> list[RunSpec]:
    """Every run, hyperparameters resolved and validated (defaults < tuned < ``--set``).

    Args:
      agent_names, env_ids, seeds: the grid of runs.
      steps: env steps per run (default: the tuned entry's ``n_timesteps``).
      sets: ``KEY=VALUE`` overrides of every run.
      no_tuned: the plain defaults (ignored when ``entries`` is given).
      eval_episodes: deterministic evaluation episodes per run.
      entries: the tuned entries already looked up (:func:`tuned_entries`); default: looked up
        here, once per (agent, env).

    Raises:
      UserError: an unknown agent, env or key, a bad value, or no budget (no ``steps`` and no
        ``n_timesteps`` in the tuned entry), naming where it came from.
    """
    import agents

    if steps is not None and steps < 1:
        raise UserError(f"--steps must be >= 1; got {steps}.")
    if eval_episodes < 1:
        raise UserError(f"--eval-episodes must be >= 1; got {eval_episodes}.")
    if any(s < 0 for s in seeds):
        raise UserError(f"--seeds must be >= 0; got {list(seeds)}.")
    pairs = [parse_set(p) for p in sets]
    if entries is None:
        entries = tuned_entries(agent_names, env_ids, no_tuned)
    specs = []
    for agent_name in agent_names:
        try:
            config_cls = agents.get(agent_name).Config
        except ValueError as err:
            raise UserError(f"--agents: {one_line(err)}") from None
        overrides = {}
        for key, value in pairs:
            run, hyper = config_lib.split_keys({key: value}, config_cls,
                                               f"--set {key} (agent {agent_name})")
            if run:
                raise UserError(f"--set {key}: not a hyperparameter (the benchmark sets the "
                                "run itself: --agents, --envs, --seeds, --steps).")
            overrides.update(hyper)
        for env in env_ids:
            plugins.resolve_env(env)  # imports module:EnvId plug-ins, checks the id
            entry = entries[(agent_name, env)]
            tuned_values = entry.hyperparameters if entry is not None else {}
            tuned_from = entry.path if entry is not None else None
            source = {k: f"{tuned_from}: {env}: {k}" for k in tuned_values}
            source.update({k: f"--set {k} (agent {agent_name})" for k in overrides})
            cfg = config_lib.build(config_cls, {**tuned_values, **overrides}, source)
            budget = steps or (entry.budget if entry is not None else None)
            if budget is None:
                raise UserError(f"no budget for {agent_name} on {env}: "
                                f"{tuned.path_for(agent_name)} has no n_timesteps for "
                                "it; pass --steps N.")
            hyper = {f.name: to_plain(getattr(cfg, f.name))
                     for f in dataclasses.fields(cfg)}
            # The overrides as the config holds them (--set 7e-4 is YAML's string '7e-4').
            given = {k: hyper[k] for k in overrides}
            specs.extend(RunSpec(agent_name.lower(), env, int(seed), int(budget), hyper,
                                 shown_path(tuned_from), given, eval_episodes)
                         for seed in seeds)
    return specs


def shown_path(path: Path | None) -> str | None:
    """A tuned table's path as results record it: relative to the checkout for pgrad's own
    tables (so results name the same file on every machine), else as given."""
    if path is None:
        return None
    try:
        return Path(path).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def mismatch(spec: RunSpec, result: dict) -> str | None:
    """What differs between a planned run and the result on disk of the same name, or None."""
    for key in ("budget", "eval_episodes"):
        if result.get(key) != getattr(spec, key):
            return f"{key} {result.get(key)!r} there, {getattr(spec, key)!r} now"
    stored = result.get("hyperparameters", {})
    diff = sorted(k for k in {*stored, *spec.hyperparameters}
                  if stored.get(k) != spec.hyperparameters.get(k))
    if diff:
        k = diff[0]
        return f"hyperparameter {k} {stored.get(k)!r} there, {spec.hyperparameters.get(k)!r} now"
    return None


def check_existing(specs: Sequence[RunSpec], results: Path) -> list[RunSpec]:
    """The runs still to do; refuses a results folder whose finished runs had other settings.

    Raises:
      UserError: naming the first result file made with different settings.
    """
    todo = []
    for spec in specs:
        path = result_path(results, spec)
        if not path.exists() and not path.is_symlink():
            todo.append(spec)
            continue
        try:
            diff = mismatch(spec, read_result(path))
        except ValueError as err:
            raise UserError(one_line(err)) from None
        if diff:
            raise UserError(f"{path} was made with other settings ({diff}); use another "
                            "--results folder, or delete it to rerun.")
    return todo
