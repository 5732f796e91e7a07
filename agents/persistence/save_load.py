"""Saving and loading agents: ``agent.save(path)`` and ``agents.load(path)``.

A saved agent is a directory::

    agent.json       what the agent is: preset name, env id, seed, every hyperparameter, chain
    checkpoints/     atomic, checksummed tf.train.Checkpoint(s) (pgrad.rl.storage.checkpoint):
    networks,
                     optimizer slots, transform state, normaliser statistics, counters, seed
    policy/          the exported deterministic policy (SavedModel; pgrad.rl.export.saved_model)

A training run directory has the same three entries (plus its logs), so ``agents.load`` takes
either. Loading reads data only (JSON, TensorFlow checkpoints): code named by the directory --
a custom transform, an env module -- is never imported from inside the directory, and only when
the caller names it (``env_id=``, ``transform=``; :mod:`pgrad.rl.storage.named_code`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents import schedules
from agents.persistence import archive
from pgrad.rl.storage import named_code
from pgrad.rl.storage.checkpoint import CheckpointStore
from pgrad.rl.storage.dirlock import RUN_MARKER, DirectoryInUse, DirectoryLock
from pgrad.rl.storage.files import temp_path, write_json_atomic

if TYPE_CHECKING:
    from agents.protocol import Agent

AGENT_FILE = "agent.json"
CHECKPOINTS = "checkpoints"
POLICY = "policy"
FORMAT = 1


def describe(agent: Agent) -> dict[str, Any]:
    """The ``agent.json`` record of an agent (JSON values only).

    A user's own encoder (a function or Keras model, Python only) is recorded by name under
    ``"encoder"``, its hyperparameter as ``"auto"``; a schedule given as a Python function (or a
    Keras schedule) by name under ``"schedules"``, its hyperparameter as its start value:
    loading needs them passed again.
    """
    hyperparameters = {f.name: getattr(agent.cfg, f.name)
                       for f in dataclasses.fields(agent.cfg)}  # asdict would deep-copy a model
    own = hyperparameters.get("encoder")
    own = None if isinstance(own, str) or own is None else own
    if own is not None:
        hyperparameters["encoder"] = "auto"
    functions = {}
    for name in agent.schedules.names:
        if not schedules.is_data(hyperparameters[name]):
            functions[name] = _name_of(hyperparameters[name])
            hyperparameters[name] = agent.schedules.start(name)
    env = _env_record(agent.env_id)
    return {
        "format": FORMAT,
        "agent": agent.name,
        **env,
        "seed": int(agent.seed_var.numpy()),
        "hyperparameters": _plain(hyperparameters),
        "transform": agent.transform.name if agent.custom_transform else None,
        "encoder": None if own is None else _name_of(own),
        "schedules": functions or None,
    }


def _env_record(env_id) -> dict[str, Any]:
    """``{"env": id}`` (an id's options and wrappers beside it), or ``{"env": None}``."""
    from pgrad.rl.envs.recipe import EnvRecipe

    if isinstance(env_id, str):
        return {"env": env_id}
    record = env_id.record() if isinstance(env_id, EnvRecipe) else None
    if record is None:
        return {"env": None}
    out = {"env": record["id"]}
    if record["kwargs"]:
        out["env_kwargs"] = record["kwargs"]
    if record["wrappers"]:
        out["env_wrapper"] = record["wrappers"]
    return out


def recorded_env(record: dict[str, Any], path: str | os.PathLike) -> Any:
    """The env an ``agent.json`` record names: its id, or an :class:`EnvRecipe` of its options
    and wrappers. A wrapper that is not a class Gymnasium defines is code: refused (pass
    ``env_id`` again)."""
    from pgrad.rl.envs.recipe import EnvRecipe

    env, kwargs, wrappers = record.get("env"), record.get("env_kwargs"), record.get("env_wrapper")
    if env is None or not (kwargs or wrappers):
        return env
    from pgrad.rl.storage.named_code import gymnasium_wrapper

    labels = [next(iter(w)) if isinstance(w, dict) else str(w) for w in wrappers or ()]
    foreign = [w for w in labels if gymnasium_wrapper(w) is None]
    if foreign:
        raise ValueError(f"{path}: the agent's env {env!r} is wrapped by {', '.join(foreign)}; "
                         "pass env_id= again (e.g. pgrad.rl.envs.EnvRecipe(id, kwargs, "
                         "wrappers); pgrad never imports code named by a saved agent).")
    return EnvRecipe(env, kwargs or {}, tuple(wrappers or ()))


def _name_of(obj) -> str:
    name = getattr(obj, "__qualname__", None) or getattr(obj, "name", None)
    module = getattr(obj, "__module__", None)
    return f"{module}.{name}" if module and name else (name or type(obj).__name__)


def _plain(value):
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def save_checkpoint(agent: Agent, directory: str | Path,
                    meta: dict[str, Any] | None = None, keep: int = 3) -> Path:
    """Writes one checkpoint of ``agent`` into ``directory`` (a CheckpointStore); returns it."""
    record = {"agent": describe(agent), **(meta or {})}
    store = CheckpointStore(directory, keep=keep)
    return store.save(agent.trackables(), record, agent.env_steps)


def _keep_others(old: Path, new: Path) -> None:
    """Moves what the new export did not write (e.g. a user's notes) from ``old`` into ``new``."""
    for entry in old.iterdir():
        target = new / entry.name
        if not target.exists():
            os.rename(entry, target)
        elif entry.is_dir() and target.is_dir() and not entry.is_symlink():
            _keep_others(entry, target)


def export(agent: Agent, path: str | Path) -> Path:
    """Exports the policy to ``path`` (written aside, then swapped in). Files in an existing
    ``path`` that the export does not write are kept (a recurrent policy's export takes and
    returns its state: :mod:`pgrad.rl.export.recurrent`)."""
    final = Path(path)
    tmp = temp_path(final)
    shutil.rmtree(tmp, ignore_errors=True)
    agent.export_policy(str(tmp))
    old = temp_path(final, "old")
    if final.exists():
        _keep_others(final, tmp)
        os.rename(final, old)
    os.rename(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def save(agent: Agent, path: str | Path) -> Path:
    """Saves ``agent`` into directory ``path`` (see the module docstring); returns it. A path
    ending in ``.zip`` is one file instead: this directory zipped (:mod:`.archive`).

    Only a new or empty directory, or one an earlier ``agent.save`` wrote, is saved into, under
    the lock a training holds on its run directory (:mod:`pgrad.rl.storage.dirlock`).

    Raises:
      ValueError: ``path`` is a run directory, another writer's, or not a saved agent's.
      pgrad.rl.storage.checkpoint.NonFiniteCheckpoint: the agent's state holds NaN/Inf
        (nothing saved).
      pgrad.rl.storage.checkpoint.CheckpointWriteError: the checkpoint could not be written.
    """
    if archive.is_zip_name(path):  # one file: the directory below, zipped and swapped in
        return archive.save_zip(agent, path, save)
    given, path = path, Path(path).absolute()
    check_save_target(path)
    if path.exists() and path.resolve() == Path.cwd().resolve():
        raise ValueError(f"agent.save({str(given)!r}): that is the working directory, which a "
                         "save replaces as a whole; name the directory from outside it.")
    path.mkdir(parents=True, exist_ok=True)
    try:
        lock = DirectoryLock(path)  # the lock a training holds on its run directory
    except DirectoryInUse as err:
        raise ValueError(f"agent.save({str(path)!r}): {err}; nothing saved.") from None
    with lock:
        check_save_target(path)  # again under the lock: it may have become a run meanwhile
        from agents.learning import progress_meta

        # The whole save is written aside and swapped in: agent.json, checkpoint and export are
        # always of one agent (never a description beside another save's weights, never a
        # checkpoint pruned by step name), and the user's own files (and the held lock) move
        # over.
        stage = temp_path(path)
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir()
        try:
            save_checkpoint(agent, stage / CHECKPOINTS, progress_meta(agent), keep=1)
            write_json_atomic(stage / AGENT_FILE, describe(agent))
            agent.export_policy(str(stage / POLICY))
            for entry in path.iterdir():
                if entry.name not in (AGENT_FILE, CHECKPOINTS, POLICY):
                    os.rename(entry, stage / entry.name)
        except BaseException:
            for entry in stage.iterdir():  # the user's files back where they were
                if entry.name not in (AGENT_FILE, CHECKPOINTS, POLICY):
                    os.rename(entry, path / entry.name)
            shutil.rmtree(stage, ignore_errors=True)
            raise
        old = temp_path(path, "old")
        shutil.rmtree(old, ignore_errors=True)
        os.rename(path, old)
        os.rename(stage, path)
        shutil.rmtree(old, ignore_errors=True)
    return Path(given)


def check_save_target(path: Path) -> None:
    """Refuses to save into a directory that is not a saved agent's (or new / empty): a
    ``pgrad-train`` run directory, or a folder holding ``checkpoints/`` or ``policy/`` of
    something else.

    Raises:
      ValueError: saying which; nothing written.
    """
    if not path.exists():
        return
    if not path.is_dir():
        raise ValueError(f"agent.save({str(path)!r}): not a directory; nothing saved.")
    if (path / RUN_MARKER).exists():
        raise ValueError(f"agent.save({str(path)!r}): that is a pgrad-train run directory; "
                         "saving would replace its record and checkpoints (continue it with "
                         "--resume, or save elsewhere); nothing saved.")
    if (path / AGENT_FILE).exists():
        read_description(path)  # ours (a saved agent): saved over; else ValueError
        return
    found = [n for n in (CHECKPOINTS, POLICY) if (path / n).exists()]
    if found:
        raise ValueError(f"agent.save({str(path)!r}): it holds {', '.join(found)} but no "
                         f"{AGENT_FILE}, so it is not a saved agent; pgrad will not write over "
                         "it; nothing saved.")


def read_description(path: str | Path) -> dict[str, Any]:
    """``agent.json`` of a saved agent or run directory.

    Raises:
      ValueError: no ``agent.json``, or one that is not a pgrad agent record.
    """
    with archive.readable(path) as where:
        file = where / AGENT_FILE
        try:
            data = json.loads(file.read_text())
        except FileNotFoundError:
            raise ValueError(f"{path} holds no saved agent (no {AGENT_FILE}).") from None
        except (OSError, ValueError) as err:
            raise ValueError(f"cannot read {Path(path) / AGENT_FILE}: {err}") from None
    if not isinstance(data, dict) or "agent" not in data or "hyperparameters" not in data:
        raise ValueError(f"{file} is not a pgrad agent record.")
    return data


def config_from(cls: type[Agent], hyperparameters: dict[str, Any]) -> Any:
    """``cls.Config`` from a JSON dict (lists back to tuples where the field is a tuple)."""
    fields = {f.name: f for f in dataclasses.fields(cls.Config)}
    unknown = sorted(set(hyperparameters) - set(fields))
    if unknown:
        raise ValueError(f"unknown hyperparameters for {cls.name}: {unknown}.")
    values = {}
    for key, value in hyperparameters.items():
        default = fields[key].default
        _check_type(key, value, default)
        values[key] = tuple(value) if isinstance(default, tuple) and isinstance(value, list) \
            else value
    try:
        return cls.Config(**values)
    except (TypeError, ValueError, ArithmeticError) as err:  # a tampered or foreign record
        raise ValueError(f"the recorded hyperparameters do not make a {cls.name} config: "
                         f"{' '.join(str(err).split())}") from None


def _check_type(key: str, value, default) -> None:
    """Refuses a recorded value of another JSON type than its field's default (a tampered
    ``agent.json``): ints and bools exactly, tuples as lists; floats also take schedules."""
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, tuple):
        ok = isinstance(value, (list, tuple))
    elif isinstance(default, float):
        ok = not isinstance(value, (bool, list)) and value is not None
    else:
        return
    if not ok:
        raise ValueError(f"hyperparameter {key} is recorded as {json.dumps(value)[:40]} "
                         f"({type(value).__name__}); expected a {type(default).__name__}.")


def restore(agent: Agent, directory: str | Path, acting_only: bool = False,
            warn: Callable[[str], None] | None = None) -> tuple[dict[str, Any], Path]:
    """Restores the newest good checkpoint under ``directory`` into ``agent``.

    ``acting_only`` restores the networks and normaliser statistics only (what acting needs;
    the optimizer and transform state of a custom chain need not match).

    Raises:
      ValueError: no checkpoint, or none that could be read.
    """
    wanted = agent.trackables()
    if acting_only:
        learning_only = ("optimizer", "critic_optimizer", "transform_state")
        wanted = {k: v for k, v in wanted.items() if k not in learning_only}
    found = CheckpointStore(directory).restore(wanted, warn=warn, partial=acting_only)
    if found is None:
        raise ValueError(f"{directory} holds no checkpoint.")
    return found


def load(path: str | Path, *, env_id: Any = None, transform: Any = None,
         acting_only: bool = False, registry: Callable[[str], type], **overrides: Any) -> Any:
    """:func:`load_directory` of ``path``, or of a ``.zip`` save extracted (``path`` itself, or
    ``path.zip`` when ``path`` does not exist: :mod:`.archive`)."""
    with archive.readable(path) as where:
        return load_directory(path, where, env_id=env_id, transform=transform,
                              acting_only=acting_only, registry=registry, **overrides)


def load_directory(path: str | Path, where: Path, *, env_id: Any = None, transform: Any = None,
                   acting_only: bool = False, registry: Callable[[str], type],
                   **overrides: Any) -> Any:
    """The agent saved in ``path`` (``agent.save`` or a training run directory), restored: an
    :class:`agents.base.ActorCriticAgent` of the recorded kind.

    Args:
      path: the directory (as the user named it: the errors say it).
      where: the directory read (``path``, or a zip save's extracted copy).
      env_id: build the agent on this env instead of the recorded one (an id, a factory, an
        env instance; needed when the record has none, e.g. an env factory; the recorded id's
        options and Gymnasium wrappers are rebuilt).
      transform: the chain, if the agent was trained with a custom one (its code is never
        imported from the directory).
      acting_only: restore only what acting needs (networks, normaliser statistics); then a
        custom chain need not be passed.
      registry: name -> agent class (``agents.get``; ``agents.load`` passes it: the classes
        sit above persistence).
      **overrides: hyperparameters to change on loading (e.g. ``num_envs=1`` for acting; the
        user's own ``encoder=`` if the agent was built with one).
    """
    record = read_description(where)
    try:
        cls = registry(str(record["agent"]))
    except (KeyError, ValueError) as err:
        raise ValueError(f"{path}: {AGENT_FILE} names no known agent: "
                         f"{' '.join(str(err).split())}") from None
    if not isinstance(record["hyperparameters"], dict):
        raise ValueError(f"{path}: {AGENT_FILE}'s hyperparameters are not a mapping.")
    if not isinstance(record.get("seed", 0), int) or isinstance(record.get("seed"), bool):
        raise ValueError(f"{path}: {AGENT_FILE}'s seed is not an integer.")
    try:
        cfg = config_from(cls, {**record["hyperparameters"], **overrides})
    except ValueError as err:
        raise ValueError(f"{path}: {AGENT_FILE}: {err}") from None
    env = env_id if env_id is not None else recorded_env(record, path)
    if env is None:
        raise ValueError(f"{path}: the agent's env (a factory or an env instance) cannot be "
                         "rebuilt from its record; pass env_id= (an id, a factory or an env).")
    named_code.check_env(env, path, given=env_id)  # before anything is imported
    if record.get("encoder") and "encoder" not in overrides:
        raise ValueError(f"{path}: the agent was built with its own encoder "
                         f"{record['encoder']!r}; pass it again as encoder= (pgrad never imports "
                         "code named by a saved agent).")
    missing = sorted(set(record.get("schedules") or {}) - set(overrides))
    if missing and not acting_only:
        names = ", ".join(record["schedules"][m] for m in missing)
        raise ValueError(f"{path}: the agent was trained with Python schedules for "
                         f"{', '.join(missing)} ({names}); pass them again as keywords (pgrad "
                         "never imports code named by a saved agent).")
    if record.get("transform") and transform is None and not acting_only:
        raise ValueError(f"{path}: the agent was trained with the transform "
                         f"{record['transform']!r}; pass it again as transform= (pgrad never "
                         "imports code named by a saved agent).")
    agent = cls(cfg, env_id=env, seed=int(record.get("seed", 0)), transform=transform)
    try:
        meta, _ = restore(agent, Path(where) / CHECKPOINTS, acting_only=acting_only)
        agent.learn_stats.load_meta(meta)
    except Exception:
        agent.close()
        raise
    return agent
