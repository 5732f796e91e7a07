"""The application layer: run directories, settings, plug-ins, logs, training and evaluation
commands, tracking, sweeps. It drives ``agents`` and ``pgrad``; nothing below imports it.

From Python, ``RunDirectory`` (a training callback) writes the run directory ``pgrad-train``
writes: ``agent.learn(N, callbacks=pgrad_app.RunDirectory("runs/x"))``.

The tuned hyperparameters ``pgrad-train`` applies (``pgrad_app/config/hyperparams/``) are applied
from Python explicitly, never by default (``agents.make`` builds what it is given, as SB3's
constructors do)::

    agent = agents.make("ppo", "Pendulum-v1", **pgrad_app.tuned("ppo", "Pendulum-v1"))
    agent.learn(pgrad_app.tuned_budget("ppo", "Pendulum-v1"))
"""

from __future__ import annotations

from typing import Any


def tuned(agent: str, env_id: str) -> dict[str, Any]:
    """The tuned hyperparameters of ``agent`` on ``env_id`` (``pgrad-train``'s tuned layer) as
    ``agents.make`` keywords; ``{}`` when the agent has no entry for the env. Keywords given
    after them win: ``agents.make(agent, env_id, **{**pgrad_app.tuned(agent, env_id), ...})``.

    Raises:
      TypeError: ``env_id`` is not a registered id string (tables are keyed by id).
      UserError: an unknown agent, or a bad entry (naming the file, env and key).
    """
    from pgrad_app.config import tuned as tables

    found = tables.tuned(agent, _env_key(env_id))
    return {} if found is None else dict(found[0])


def tuned_budget(agent: str, env_id: str) -> int | None:
    """The tuned entry's ``n_timesteps`` (env steps; ``pgrad-train``'s default
    ``--total-steps``), or None when there is no entry or it names no budget."""
    from pgrad_app.config import tuned as tables

    return tables.budget(agent, _env_key(env_id))


def _env_key(env_id: Any) -> str:
    if not isinstance(env_id, str):
        raise TypeError(f"tuned hyperparameters are looked up by env id (a string such as "
                        f"'Pendulum-v1'); got {type(env_id).__name__}.")
    return env_id


def __getattr__(name: str):
    if name == "RunDirectory":  # imported on use: it loads TensorFlow and the agents
        from pgrad_app.run.recorder import RunDirectory

        return RunDirectory
    raise AttributeError(f"module 'pgrad_app' has no attribute {name!r}")
