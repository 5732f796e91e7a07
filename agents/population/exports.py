"""The members' policy exports with one trace: the first member's SavedModel, each other
member's variables written into a copy of it.

The members of a population have one architecture, so their exported SavedModels
(:func:`pgrad.rl.export.saved_model.export_policy`) hold the same graph and differ only in
their variables (the actor's weights, the normaliser's statistics). Tracing and serialising
that graph is most of an export's cost (~0.4 s of CPU for a 64-64 MLP); :class:`SharedExport`
pays it once: the first member exports as a single run does, and each further member's export
is a copy of that one with its own variables written in (a checkpoint of the template module
holding that member's values, the export's fingerprint written again; ``pgrad_policy.json``,
the same for every member, copied). Loaded, it is that
member's own export: the same functions, its own weights (tests/app/test_population_cli.py
compares a population's exports with single runs').

Only Dense-only feed-forward policies share (the :class:`pgrad.rl.export.feedforward.
DenseExport` variant); any other policy, or a member whose variables do not line up with the
template's, exports as a single run does.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import tensorflow as tf

from pgrad.rl.export.columns import read_columns
from pgrad.rl.export.feedforward import DenseExport


class _Values(DenseExport):
    """A member's export module without its functions: only its variables (copies of the
    member's weights and statistics), in the template's order."""

    def _functions(self, *specs: Any) -> None:
        pass


def _key(agent: Any) -> tuple:
    """What the export's metadata (``pgrad_policy.json``) and signatures depend on besides the
    variables: spaces, agent, env (an id, a recipe's record, or that very object)."""
    env = agent.env_id
    record = env.record() if hasattr(env, "record") else None
    return (str(agent.observation_space), str(agent.action_space), agent.name,
            env if isinstance(env, str) else repr(record) if record is not None else id(env))


def shareable(agent: Any) -> bool:
    """Whether ``agent``'s export is the Dense-only variant (the one :class:`SharedExport`
    shares)."""
    net = agent.net
    return (not net.recurrent and net.encoder is None
            and read_columns(net, agent.observation_space) is None)


class SharedExport:
    """Exports population members' policies, tracing the graph once (module docstring)."""

    def __init__(self):
        self._dir: Path | None = None  # the template export (a private copy)
        self._module: DenseExport | None = None
        self._key: tuple | None = None

    def export(self, agent: Any, path: str) -> None:
        """What ``agent.export_policy(path)`` writes, from the shared template where it can."""
        cls_export = type(agent).export_policy
        if not shareable(agent) or (self._key is not None and _key(agent) != self._key):
            return cls_export(agent, path)
        if self._module is None:
            cls_export(agent, path)
            self._dir = Path(tempfile.mkdtemp(prefix="pgrad-population-export-")) / "policy"
            shutil.copytree(path, self._dir)
            self._module = DenseExport(agent.net, agent.obs_norm, agent.observation_space)
            self._key = _key(agent)
            return None
        agent._sync()  # the acting copies current, as export_policy does
        values = _Values(agent.net, agent.obs_norm, agent.observation_space)
        template = self._module.variables
        if len(template) != len(values.variables) or any(
                t.shape != v.shape or t.dtype != v.dtype
                for t, v in zip(template, values.variables)):
            return cls_export(agent, path)
        for t, v in zip(template, values.variables):
            t.assign(v)
        assert self._dir is not None
        out = Path(path)
        shutil.copytree(self._dir, out, ignore=shutil.ignore_patterns("variables",
                                                                       "fingerprint.pb"))
        tf.train.Checkpoint(root=self._module).write(str(out / "variables" / "variables"))
        # the fingerprint hashes the variables too: written again as tf.saved_model.save does
        from tensorflow.python.saved_model import fingerprinting_utils

        fingerprinting_utils.write_fingerprint(str(out))
        return None

    def close(self) -> None:
        """Removes the template's private copy."""
        if self._dir is not None:
            shutil.rmtree(self._dir.parent, ignore_errors=True)
            self._dir = None
