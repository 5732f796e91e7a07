"""What an evaluation acts with: a run directory's settings (:func:`run_settings`), its exported
``policy/`` (:func:`load_export`) or its newest good checkpoint restored into a fresh agent
(:func:`checkpoint_agent`). Reading a run reads data only (safe YAML, TensorFlow checkpoints, a
SavedModel graph)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pgrad_app.errors import UserError, one_line
from pgrad_app.run.eval_checks import build_env
from pgrad_app.run.layout import RunLayout


def run_settings(run_dir: Path) -> dict[str, Any]:
    """The run's ``config.yaml`` (safe YAML), or for a directory ``agent.save`` wrote, the same
    settings from its ``agent.json``; a :class:`UserError` if it is neither."""
    from pgrad_app.config.settings import saved_run_values
    from pgrad_app.config.yamlfile import load_yaml

    try:
        is_dir = run_dir.is_dir()
    except OSError as err:  # e.g. a name too long for the file system
        raise UserError(f"{run_dir}: {err.strerror or err}.") from None
    if not is_dir:
        raise UserError(f"{run_dir} is not a directory; expected a run directory from "
                        "pgrad-train or a directory from agent.save.")
    if RunLayout(run_dir).config.is_file():
        return load_yaml(RunLayout(run_dir).config)
    saved = saved_run_values(run_dir)
    if saved is None:
        raise UserError(f"{run_dir} holds no run (no config.yaml) and no saved agent (no "
                        "agent.json); expected a directory written by pgrad-train --out or "
                        "agent.save.")
    return saved


def checkpoint_agent(run_dir: Path, values: dict, env_id: str, one_env: bool = True):
    """A fresh agent of the run's kind on ``env_id`` with the newest good checkpoint's networks
    and normaliser statistics (what acting needs); on one env unless ``one_env`` is false (the
    run's own count: a game of many agents sizes its update by it)."""
    import agents
    from agents.persistence.save_load import restore
    from pgrad_app.config.settings import build, split_keys

    agent_cls = agents.get(str(values.get("agent")))
    _, hyper = split_keys(values, agent_cls.Config, str(RunLayout(run_dir).config))
    cfg = build(agent_cls.Config, dict(hyper, **({"num_envs": 1} if one_env else {}),
                                       vector_mode="sync"), {})
    try:
        agent = agent_cls(cfg, env_id=env_id, seed=int(values.get("seed", 0)))
    except ValueError as err:  # EnvError too: the env failed while being created
        raise UserError(f"cannot rebuild the agent of {run_dir}: {one_line(err)}") from None
    skipped: list[str] = []  # shown once a checkpoint was restored; else the error says it
    try:
        restore(agent, RunLayout(run_dir).checkpoints, acting_only=True, warn=skipped.append)
    except ValueError as err:
        agent.close()
        if "holds no checkpoint" in str(err):
            raise UserError(f"{run_dir} has neither an exported policy/ nor a checkpoint "
                            "yet.") from None
        raise UserError(f"{run_dir}: {one_line(err)}") from None
    for text in skipped:
        print(f"warning: {text}", file=sys.stderr, flush=True)
    return agent


def load_export(path: Path, env_id: str):
    """``(policy, None)`` for a loadable export at ``path``, else ``(None, why not)``."""

    from pgrad.rl.export.saved_model import ExportedPolicy

    probe = build_env(env_id)
    try:
        return ExportedPolicy(path, probe.observation_space, probe.action_space), None
    except ValueError as err:
        return None, one_line(err)
    finally:
        probe.close()
