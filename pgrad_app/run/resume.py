"""What ``--resume`` checks before it touches a run: config.yaml against the run's own record.

``config.yaml`` is a text file anyone can edit; the run also recorded what it is in
``agent.json`` (written when training starts: agent, env id, seed, every hyperparameter, the
transform's name) and in every checkpoint's ``meta.json`` (agent, env spec, seed, transform
spec). A resume whose config.yaml disagrees with that record would continue a different run
under the old one's name (old optimizer state, new env...), so it is refused, naming the
setting, both values and where each comes from. Reading the record reads JSON only: nothing is
imported and no TensorFlow state is restored.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from pgrad_app.config.plugins import same_spec
from pgrad_app.errors import UserError
from pgrad_app.run.layout import RunLayout

#: Settings that change what the run computes beside its specs, recorded in every checkpoint's
#: meta.json (older checkpoints lack them: then they are not compared).
ARGUMENTS = ("transform_args", "env_kwargs", "env_wrapper")


def as_recorded(value: Any) -> Any:
    """``value`` as meta.json holds it (JSON types: tuples as lists; anything else its repr)."""
    return json.loads(json.dumps(value, default=repr))


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def recorded(out: Path) -> dict[str, tuple[Any, str]]:
    """``{setting: (value, where)}`` the run recorded about itself (empty if it recorded nothing).

    Settings: ``agent``, ``env`` (spec, from a checkpoint), ``env_id`` (bare id, from
    agent.json), ``seed``, ``transform`` (spec, from a checkpoint), :data:`ARGUMENTS` (from a
    checkpoint), ``hyperparameters``.
    """
    from pgrad.rl.storage.checkpoint import CheckpointStore

    found: dict[str, tuple[Any, str]] = {}
    where = str(RunLayout(out).agent)
    try:
        record = json.loads(RunLayout(out).agent.read_text())
    except (OSError, ValueError):
        record = None
    if isinstance(record, dict):
        for key, name in (("agent", "agent"), ("env", "env_id"), ("seed", "seed"),
                          ("hyperparameters", "hyperparameters")):
            if record.get(key) is not None:
                found[name] = (record[key], where)
    store = CheckpointStore(RunLayout(out).checkpoints)
    for path in store.checkpoints():
        try:
            meta = store.verify(path)
        except ValueError:
            continue
        where = str(path / "meta.json")
        for key in ("agent", "env", "seed", "transform"):
            if key in meta and isinstance(meta[key], (str, int, type(None))):
                found[key] = (meta[key], where)
        for key in ARGUMENTS:
            if key in meta:
                found[key] = (meta[key], where)
        break
    return found


def check(out: Path, settings: Any, cfg: Any) -> None:
    """Refuses a resume whose config.yaml (``settings``, ``cfg``) differs from the run's record.

    Raises:
      UserError: naming the setting, both values and both sources.
    """
    record = recorded(out)
    config = RunLayout(out).config

    def refuse(name: str, ours: Any, theirs: Any, where: str) -> None:
        raise UserError(
            f"cannot resume {out}: {config} says {name} {ours!r} but the run recorded "
            f"{theirs!r} ({where}); config.yaml was edited. Restore it, or start a new run "
            "with --config.")

    if "agent" in record and str(record["agent"][0]).lower() != str(settings.agent).lower():
        refuse("agent", settings.agent, *record["agent"])
    if "env" in record and not same_spec(record["env"][0], settings.env):
        refuse("env", settings.env, *record["env"])
    # "package:Env-v0" records the id after the package; a "module:factory" env records itself
    bare = str(settings.env).split(":", 1)[-1]
    if "env_id" in record and record["env_id"][0] not in (bare, str(settings.env)):
        refuse("env", settings.env, *record["env_id"])
    if "seed" in record and int(record["seed"][0]) != int(settings.seed):
        refuse("seed", settings.seed, *record["seed"])
    if "transform" in record and not same_spec(record["transform"][0], settings.transform,
                                               split_last=True):
        refuse("transform", settings.transform, *record["transform"])
    for key in ARGUMENTS:
        if key in record and as_recorded(getattr(settings, key, None)) != record[key][0]:
            refuse(key, getattr(settings, key, None), *record[key])
    if "hyperparameters" in record and isinstance(record["hyperparameters"][0], dict):
        theirs, where = record["hyperparameters"]
        ours = {f.name: _plain(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
        for name in ours:
            if name in theirs and _plain(theirs[name]) != ours[name]:
                refuse(f"hyperparameter {name}", ours[name], theirs[name], where)
