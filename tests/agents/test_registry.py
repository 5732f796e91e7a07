"""One registry: an algorithm is one declaration in one module (agents.catalog.declare), found
by agents.names(), the agent classes, the command line, saved agents and the docs' table."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from importlib import metadata

import pytest
from cli_helpers import ROOT

import agents
from agents import base
from agents.catalog import registry
from agents.catalog.declare import Algorithm
from agents.config import ActorCriticConfig

# A whole algorithm in one file: "vanilla policy gradient", reward-to-go weights, no critic term.
VPG_MODULE = '''
"""Vanilla policy gradient: the returns as weights (a test's algorithm)."""
from dataclasses import dataclass

from agents.catalog.declare import Algorithm
from agents.config import ActorCriticConfig, preset


@dataclass
class VPGConfig(ActorCriticConfig):
    """VPG hyperparameters."""

    num_envs: int = preset("num_envs", 4)
    n_steps: int = preset("n_steps", 32)
    gae_lambda: float = preset("gae_lambda", 1.0)


def vpg_chain(cfg):
    import pgrad

    return pgrad.chain(pgrad.weight_by("returns"), pgrad.mean_steps(), name="vpg")


ALGORITHMS = (Algorithm("vpg", "VPG", VPGConfig, chain=vpg_chain, summary="returns as weights"),)
'''

PROBE = '''
import sys, agents.algorithms
algos, out = sys.argv[1], sys.argv[2]
agents.algorithms.__path__.append(algos)  # as if vpg.py were in agents/algorithms/
import agents
print("NAMES", agents.names(), "tensorflow" in sys.modules)
from pgrad_app.cli import entry
sys.argv = ["pgrad-train"]
try:
    entry.run("train", ["--help"])
except SystemExit:
    pass
sys.path.insert(0, {docs!r})
import hooks
print("DOCS", [l for l in hooks._algorithms("<!-- pgrad:algorithms-table -->").splitlines()
               if "vpg" in l])
code = entry.run("train", ["--algo", "vpg", "--env", "CartPole-v1", "--total-steps", "256",
                           "--out", out + "/run", "--quiet"])
print("TRAIN", code)
a = agents.make("vpg", "CartPole-v1", seed=1)
a.step()
a.save(out + "/saved")
b = agents.load(out + "/saved")
print("LOAD", type(b).__name__, b.name, type(b) is agents.VPG, b.cfg.n_steps, b.transform.name)
'''


def test_an_algorithm_in_one_module_is_found_everywhere(tmp_path):
    (tmp_path / "algos").mkdir()
    (tmp_path / "algos" / "vpg.py").write_text(textwrap.dedent(VPG_MODULE))
    code = PROBE.replace("{docs!r}", repr(str(ROOT / "docs")))
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "algos"), str(tmp_path / "run")],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    out = r.stdout
    assert r.returncode == 0, r.stderr[-3000:]
    assert ("NAMES ['a2c', 'appo', 'grpo', 'impala', 'ippo', 'mappo', 'npg', 'ppo', 'reinforce', "
            "'rloo', 'trpo', 'vpg'] False" in out)  # found without TensorFlow
    assert "  vpg:\n" in out and "    n_steps=32" in out  # pgrad-train --help lists its config
    assert "| `vpg` | `agents.VPG` | `VPGConfig` |" in out  # the docs' table
    assert "TRAIN 0" in out, r.stderr[-3000:]
    assert "LOAD VPG vpg True 32 vpg" in out


@pytest.fixture
def clean_registry():
    saved = dict(registry._registered), dict(base._CLASSES)
    yield
    registry._registered.clear()
    registry._registered.update(saved[0])
    base._CLASSES.clear()
    base._CLASSES.update(saved[1])


def test_register_in_process(clean_registry):
    from dataclasses import dataclass

    @dataclass
    class MyConfig(ActorCriticConfig):
        """A user's algorithm's config."""

    agents.register(Algorithm("mine", "Mine", MyConfig, summary="a user's"))
    assert "mine" in agents.names() and agents.config_class("mine") is MyConfig
    cls = agents.get("mine")
    assert cls is agents.get("MINE") is agents.Mine and cls.Config is MyConfig
    assert cls.name == "mine" and cls.__name__ == "Mine"
    agent = cls(MyConfig(num_envs=2, n_steps=4), "CartPole-v1")
    try:
        assert agent.step()["env_steps"] == 8
        assert agent.transform.name == "mine"  # the actor-critic agent's chain, by its name
    finally:
        agent.close()


def test_bad_declarations_are_one_line():
    with pytest.raises(ValueError, match="the name must be lower case"):
        Algorithm("My-Algo", "X", ActorCriticConfig)
    with pytest.raises(ValueError, match="class_name '2x' is not a Python name"):
        Algorithm("x", "2x", ActorCriticConfig)
    with pytest.raises(TypeError, match="config must be an ActorCriticConfig subclass"):
        Algorithm("x", "X", dict)
    with pytest.raises(TypeError, match="chain must be a function of the config"):
        Algorithm("x", "X", ActorCriticConfig, chain="weight_by")
    with pytest.raises(ValueError, match="agent must be 'module:Class'"):
        Algorithm("x", "X", ActorCriticConfig, agent="agents.base.ActorCriticAgent")
    with pytest.raises(TypeError, match="register takes an agents.catalog.declare.Algorithm"):
        agents.register({"name": "x"})


def test_a_plugin_that_declares_a_taken_name_is_skipped_with_one_warning(tmp_path, monkeypatch):
    (tmp_path / "twice_a.py").write_text(
        "from agents.catalog.declare import Algorithm\nfrom agents.config import "
        "ActorCriticConfig\nALGORITHMS = (Algorithm('ppo', 'Again', ActorCriticConfig),)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    points = [metadata.EntryPoint("twice", "twice_a", registry.ENTRY_POINTS)]
    monkeypatch.setattr(registry.metadata, "entry_points", lambda group: points)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = registry._scan()
    assert found["ppo"].class_name == "PPO"  # the shipped one stays
    assert len(caught) == 1 and ("two algorithms are named 'ppo': in agents.algorithms.ppo and "
                                 "in entry point twice_a") in str(caught[0].message)


def test_entry_points_add_algorithms_and_a_broken_one_is_one_warning(tmp_path, monkeypatch):
    (tmp_path / "plugin_algos.py").write_text(
        "from agents.catalog.declare import Algorithm\nfrom agents.config import "
        "ActorCriticConfig\nALGORITHMS = (Algorithm('plugged', 'Plugged', ActorCriticConfig),)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    points = [metadata.EntryPoint("good", "plugin_algos", registry.ENTRY_POINTS),
              metadata.EntryPoint("bad", "no_such_module_xyz", registry.ENTRY_POINTS)]
    monkeypatch.setattr(registry.metadata, "entry_points", lambda group: points)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = registry._scan()
    assert "plugged" in found and "ppo" in found
    assert len(caught) == 1 and "entry point 'bad' (no_such_module_xyz) were not loaded" in str(
        caught[0].message)


def test_the_shipped_algorithms_are_declarations_without_tensorflow_and_agree_with_classes():
    declared = registry.declarations()
    assert sorted(declared) == agents.names()
    for name, alg in declared.items():
        cls = agents.get(name)
        assert cls.name == name and cls.Config is alg.config and cls.__name__ == alg.class_name
        assert getattr(agents, alg.class_name) is cls


def test_the_update_is_handed_parts_not_the_agent():
    """At most 2 reads through a whole agent in agents/update, and no branch on off_policy."""
    import re

    reads = 0
    for path in (ROOT / "agents" / "update").glob("*.py"):
        text = path.read_text()
        assert "off_policy" not in text, path
        reads += len(re.findall(r"\bagent\.\w+", "\n".join(
            line for line in text.splitlines() if not line.lstrip().startswith(("#", '"""'))
            and ":class:" not in line and "``" not in line)))
    assert reads <= 2
