"""What to evaluate: an agent, a :class:`pgrad.rl.acting.policy.Policy` or an export path, as a
policy.

:func:`as_policy` resolves the target :func:`pgrad.evaluate` is given, with the env it runs on:
an export path is loaded as data (its env id and options from ``pgrad_policy.json``, the code a
directory names checked by :mod:`pgrad.rl.storage.named_code`); an agent gives its ``policy`` and
the
env it was built from. The episode loop is :mod:`pgrad.rl.evaluation.episodes`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gymnasium as gym

from pgrad.rl.acting.policy import Policy


def as_policy(target: Any, env_id: Any,
              env_kwargs: dict | None = None) -> tuple[Policy, Any]:
    """``(policy, env id)`` for an agent, a Policy or an export path (see the module docstring)."""
    from pgrad.rl.export import saved_model as export
    from pgrad.rl.storage import named_code
    if isinstance(target, (str, os.PathLike)):
        path = Path(target)
        found = export.find_export(path)
        meta = export.read_metadata(found or path)
        given, env_id = env_id, env_id if env_id is not None else meta.get("env_id")
        if not env_id:
            raise ValueError(f"{target}: the export does not record its env id; pass env_id.")
        if not isinstance(env_id, str) and given is None:
            raise ValueError(f"{target}: the export's env id is not a string; pass env_id.")
        # The one rule for code a directory names, for the folder given and the run around it.
        around = os.path.dirname(os.path.abspath(found or target))
        for directory in sorted({around, os.path.abspath(target)}, key=len):  # outermost first
            named_code.check_env(env_id, directory, given=given)
        if given is None and meta.get("env_kwargs"):
            if not isinstance(meta["env_kwargs"], dict):
                raise ValueError(f"{target}: the export's env_kwargs are not an object "
                                 f"({type(meta['env_kwargs']).__name__}); pass env_id.")
            from pgrad.rl.envs.recipe import (
                EnvRecipe,  # the id with the options it was trained with
            )

            env_id = EnvRecipe(env_id, meta["env_kwargs"])
        probe = _probe(env_id, env_kwargs)
        try:
            policy = export.ExportedPolicy(path, probe.observation_space, probe.action_space)
        finally:
            probe.close()
        return policy, env_id
    policy = getattr(target, "policy", target)
    if not isinstance(policy, Policy):
        raise TypeError(f"cannot evaluate a {type(target).__name__}: expected an agent, a "
                        "pgrad Policy or the path of an exported policy.")
    if env_id is None:
        env_id = getattr(target, "env_id", None)
        why = getattr(target, "env_unbuildable", None)
        if why:
            raise ValueError(f"evaluation needs envs of its own, and {why}; or pass env_id= "
                             "(an id, a factory or an env).")
    if env_id is None:
        raise ValueError("pass env_id: the env to evaluate on (an id, a factory or an env).")
    return policy, env_id


def _probe(env_id: Any, env_kwargs: dict | None):
    """One env to read the spaces from (an instance is used as it is)."""
    from pgrad.rl.envs.recipe import make_env

    if isinstance(env_id, gym.Env):
        return Borrowed(env_id)
    return make_env(env_id, **(env_kwargs or {}))


class Borrowed(gym.Wrapper):
    """A user's env instance, stepped by the evaluation but closed by its owner."""

    def close(self):
        pass
