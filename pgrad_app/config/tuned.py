"""Tuned hyperparameters per env, rl-zoo style: ``pgrad_app/config/hyperparams/<agent>.yaml``.

Each file maps Gymnasium env ids to the hyperparameters (fields of the agent's ``Config``) tuned
for that env, plus an optional ``n_timesteps``, the benchmark budget in env steps::

    HalfCheetah-v5:
      n_timesteps: 1000000
      learning_rate: 2.0633e-5
      hidden: [256, 256]

An env with no entry of its own falls back to its family's entry, rl-zoo's ``atari`` key: ``atari``
for the ale-py ids pgrad preprocesses (``ALE/...``, ``...NoFrameskip-v4``) and ``minatar`` for
``MinAtar/...`` ids (:data:`FAMILIES`); an env's own entry wins.

The YAML files live inside the package (``pgrad_app/config/hyperparams/``, installed with it as
package data), so an installed wheel finds them exactly as a checkout does; that folder is the one
source of truth, and ``configs/README.md`` at the top of the repository points to it.
``pgrad-train`` applies an entry between the defaults and ``--config`` (``--no-tuned``
skips it); ``pgrad-benchmark`` uses it and its budget. Files are read with
``yaml.safe_load``; every key is checked against the agent's ``Config`` and every value typed
and validated, with errors naming the file, the env and the key. :func:`lookup` reads the table
once and returns the whole entry (hyperparameters, budget, key, file) for a run or a plan to pass
down; :func:`tuned`, :func:`budget` and :func:`entry_key` each give one part of it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from pgrad_app.config import settings as config_lib
from pgrad_app.config import yamlfile
from pgrad_app.config.values import coerce
from pgrad_app.errors import UserError

#: Where the tuned tables are: ``<agent name>.yaml`` each.
CONFIG_DIR = Path(__file__).resolve().parent / "hyperparams"
#: The one key of an entry that is not a hyperparameter: the benchmark budget in env steps.
BUDGET_KEY = "n_timesteps"
#: Family keys, first match wins: (key, id predicate). Strings only, so no env is imported.
FAMILIES = (
    ("minatar", lambda env_id: env_id.startswith("MinAtar/")),
    ("atari", lambda env_id: env_id.startswith("ALE/")
     or env_id.endswith(("NoFrameskip-v4", "NoFrameskip-v0"))),
)


def family(env_id: str) -> str | None:
    """The family key of ``env_id`` (``"atari"``, ``"minatar"``) or None."""
    return next((key for key, member in FAMILIES if member(env_id)), None)


@dataclasses.dataclass(frozen=True)
class Entry:
    """One agent's tuned entry for one env, read once and checked: what every caller needs."""

    key: str  # the table's key used: the env id, or its family (``"atari"``, ``"minatar"``)
    path: Path  # the table it comes from
    hyperparameters: dict[str, Any]  # typed as the Config fields; ``n_timesteps`` not among them
    budget: int | None  # the entry's ``n_timesteps`` (env steps), or None


def path_for(agent_name: str, directory: Path | None = None) -> Path:
    """The tuned table of ``agent_name`` (it may not exist)."""
    return Path(directory or CONFIG_DIR) / f"{agent_name.lower()}.yaml"


def _config_cls(agent_name: str) -> type:
    import agents

    try:
        return agents.get(agent_name).Config
    except ValueError as err:
        raise UserError(str(err)) from None


def load_table(agent_name: str, directory: Path | None = None) -> dict[str, dict[str, Any]]:
    """Every entry of the agent's table: ``{env_id: {key: raw YAML value}}`` ({} if no file).

    Raises:
      UserError: malformed YAML, or the file or an entry is not a mapping (naming file and env).
    """
    path = path_for(agent_name, directory)
    if not path.is_file():
        return {}
    table = yamlfile.load_yaml(path)
    for env_id, entry in table.items():
        if not isinstance(entry, dict):
            raise UserError(f"{path}: {env_id}: expected a mapping of hyperparameter: value; "
                            f"got {entry!r}.")
    return {str(env_id): entry for env_id, entry in table.items()}


def _checked(agent_name: str, env_id: str, entry: dict, path: Path) -> tuple[dict, int | None]:
    """Types and validates one entry: ``(hyperparameters, n_timesteps or None)``."""
    config_cls = _config_cls(agent_name)
    where = f"{path}: {env_id}"
    values = dict(entry)
    budget = values.pop(BUDGET_KEY, None)
    if budget is not None:
        budget = coerce(budget, int, f"{where}: {BUDGET_KEY}")
        if budget < 1:
            raise UserError(f"{where}: {BUDGET_KEY} must be >= 1; got {budget}.")
    # Under "hyperparameters:", every key must be a Config field (else an error naming it).
    _, hyper = config_lib.split_keys({config_lib.HYPER_KEY: values}, config_cls, where)
    source = {key: f"{where}: {key}" for key in hyper}
    cfg = config_lib.build(config_cls, hyper, source)  # types and validates (errors name key)
    return {key: getattr(cfg, key) for key in hyper}, budget


def lookup(agent_name: str, env_id: str, directory: Path | None = None) -> Entry | None:
    """The tuned entry of ``agent_name`` on ``env_id``: the table read once, the entry checked.

    Args:
      agent_name: a registered agent (``agents.names()``).
      env_id: a Gymnasium id; ``module:EnvId`` looks up ``EnvId``; an id with no entry of its
        own takes its family's (:func:`family`).
      directory: folder of the tables (default: :data:`CONFIG_DIR`).

    Returns:
      The :class:`Entry`, or None when the agent has no entry for the env (or no table).

    Raises:
      UserError: malformed YAML, an unknown key or a bad value in the entry, naming the file,
        env and key.
    """
    env_id = env_id.split(":")[-1]
    table = load_table(agent_name, directory)
    key = next((k for k in (env_id, family(env_id)) if k is not None and k in table), None)
    if key is None:
        return None
    path = path_for(agent_name, directory)
    hyper, budget = _checked(agent_name, key, table[key], path)
    return Entry(key, path, hyper, budget)


def tuned(agent_name: str, env_id: str,
          directory: Path | None = None) -> tuple[dict[str, Any], Path] | None:
    """``(hyperparameters, path)`` of :func:`lookup`'s entry, or None (no entry for the env)."""
    found = lookup(agent_name, env_id, directory)
    return None if found is None else (found.hyperparameters, found.path)


def entry_key(agent_name: str, env_id: str, directory: Path | None = None) -> str | None:
    """The key of the entry :func:`lookup` uses for ``env_id`` (its id or its family), or None."""
    found = lookup(agent_name, env_id, directory)
    return None if found is None else found.key


def budget(agent_name: str, env_id: str, directory: Path | None = None) -> int | None:
    """The entry's ``n_timesteps`` (env steps), or None if there is no entry or no budget."""
    found = lookup(agent_name, env_id, directory)
    return None if found is None else found.budget


def shipped() -> dict[str, list[str]]:
    """``{agent name: [env ids]}`` of every table in :data:`CONFIG_DIR`."""
    return {path.stem: list(load_table(path.stem)) for path in sorted(CONFIG_DIR.glob("*.yaml"))}
