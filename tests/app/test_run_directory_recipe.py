"""``pgrad_app.RunDirectory`` from Python for an agent made from an id with env options and
wrappers (issue 24, item 1): config.yaml writes the recipe down as data, so pgrad-evaluate,
``agents.load`` and ``--resume`` rebuild the same env; an env it cannot write down is refused in
one line saying what to pass instead."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
import yaml
from cli_helpers import evaluate, train

import agents
from pgrad_app import RunDirectory
from pgrad_app.errors import UserError

WRAPPER = "gymnasium.wrappers.TimeAwareObservation"


def test_a_recipe_agent_s_run_directory_rebuilds_its_env_everywhere(tmp_path, capsys):
    out = tmp_path / "run"
    agent = agents.make("ppo", "Pendulum-v1", seed=1, env_kwargs={"g": 5.0,
                        "max_episode_steps": 30}, env_wrapper=WRAPPER, n_steps=32,
                        minibatch_size=32, epochs=1,
                        policy_kwargs=dict(net_arch=dict(pi=[16], vf=[32])))
    try:
        agent.learn(64, callbacks=RunDirectory(out), progress=False)
    finally:
        agent.close()
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["env"] == "Pendulum-v1"
    assert config["env_kwargs"] == {"g": 5.0, "max_episode_steps": 30}
    assert config["env_wrapper"] == [WRAPPER]
    assert config["hyperparameters"]["critic_hidden"] == [32]
    loaded = agents.load(out)
    try:  # the wrapper's extra time feature: 3 + 1 observations
        assert loaded.observation_space.shape == (4,) and loaded.cfg.critic_hidden == (32,)
    finally:
        loaded.close()
    code, _, err = evaluate(out, "--episodes", "2", "--trust-run-code", capsys=capsys)
    assert code == 0, err
    assert json.loads((out / "eval.json").read_text())["lengths"] == [30, 30]  # its options
    code, _, err = train("--resume", out, "--more-steps", "32", "--env-wrapper", WRAPPER,
                         "--quiet", capsys=capsys)
    assert code == 0, err
    assert yaml.safe_load((out / "config.yaml").read_text())["total_steps"] == 96


def test_an_env_config_yaml_cannot_name_is_refused_in_one_line(tmp_path):
    agent = agents.make("a2c", lambda: gym.make("CartPole-v1"), num_envs=1)
    try:
        with pytest.raises(UserError, match="RunDirectory writes the env into config.yaml as "
                                            "data.*registered id"):
            agent.learn(10, callbacks=RunDirectory(tmp_path / "r"), progress=False)
    finally:
        agent.close()
    assert not (tmp_path / "r" / "config.yaml").exists()
