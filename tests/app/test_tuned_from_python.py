"""Tuned hyperparameters from Python (issue 24, item 4): explicit, never by default.
``pgrad_app.tuned`` gives the keywords of pgrad-train's tuned layer for ``agents.make``,
``pgrad_app.tuned_budget`` its ``n_timesteps``; ``agents.make(..., tuned=True)`` points there."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

import agents
import pgrad_app
from pgrad_app.config import tuned as tables


def test_tuned_keywords_are_the_yaml_entry_and_build_the_agent_the_command_would():
    with open(tables.CONFIG_DIR / "ppo.yaml") as f:
        entry = dict(yaml.safe_load(f)["Pendulum-v1"])
    assert pgrad_app.tuned_budget("ppo", "Pendulum-v1") == entry.pop("n_timesteps") == 200_000
    hyper = pgrad_app.tuned("ppo", "Pendulum-v1")
    assert set(hyper) == set(entry)
    agent = agents.make("ppo", "Pendulum-v1", **{**hyper, "learning_rate": 5e-4})
    try:
        cfg, default = agent.cfg, agents.get("ppo").Config()
        assert cfg.learning_rate == 5e-4  # the caller's keyword wins
        for key, value in hyper.items():
            if key != "learning_rate":
                assert getattr(cfg, key) == value, key
        assert cfg.n_steps == entry["n_steps"] and cfg.n_steps != default.n_steps
        untouched = {f.name for f in dataclasses.fields(cfg)} - set(hyper)
        assert all(getattr(cfg, k) == getattr(default, k) for k in untouched)
    finally:
        agent.close()


def test_no_entry_is_empty_and_make_points_to_tuned():
    assert pgrad_app.tuned("ppo", "NoSuchEnv-v0") == {}
    assert pgrad_app.tuned_budget("ppo", "NoSuchEnv-v0") is None
    with pytest.raises(TypeError, match=r"\*\*pgrad_app\.tuned\('ppo', env\)"):
        agents.make("ppo", "Pendulum-v1", tuned=True)
    with pytest.raises(TypeError, match="looked up by env id"):
        pgrad_app.tuned("ppo", lambda: None)
