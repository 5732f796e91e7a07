"""Any env a user has (issue 24, item 1): an id with options and wrappers, a gym.Env instance, a
VectorEnv -- through training, evaluation, EvalCallback, save/load, or one line saying why not."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

import agents
import pgrad
from pgrad.rl.envs.vector import EnvRecipe, recipe_of

SMALL = {"n_steps": 8, "num_envs": 2}


def first_env(agent) -> gym.Env:
    """Sub-env 0 of the agent's vector env."""
    return agent.collector.envs.unwrapped.envs[0]


class Unrecorded(gym.Wrapper):
    """A wrapper that does not record its arguments: an env with it cannot be rebuilt."""


def test_env_kwargs_and_wrapper_by_name_reach_every_env_and_survive_save_load(tmp_path):
    agent = agents.make("a2c", "Pendulum-v1", env_kwargs={"g": 5.0},
                        env_wrapper="gymnasium.wrappers.TimeAwareObservation", **SMALL)
    try:
        assert agent.observation_space.shape == (4,)  # the wrapper added the time
        assert first_env(agent).unwrapped.g == 5.0
        agent.learn(16, progress=False)
        result = pgrad.evaluate(agent, episodes=1)  # evaluation builds the same env
        assert result["env"] == "Pendulum-v1" and result["length_mean"] == 200
        agent.save(tmp_path / "saved")
    finally:
        agent.close()
    record = json.loads((tmp_path / "saved" / "agent.json").read_text())
    assert record["env"] == "Pendulum-v1" and record["env_kwargs"] == {"g": 5.0}
    assert record["env_wrapper"] == ["gymnasium.wrappers.TimeAwareObservation"]
    loaded = agents.load(tmp_path / "saved")
    try:
        assert loaded.observation_space.shape == (4,)
        assert first_env(loaded).unwrapped.g == 5.0
    finally:
        loaded.close()
    # the exported policy records the id's options: evaluating the path builds that env
    result = pgrad.evaluate(str(tmp_path / "saved"), episodes=1,
                            env_id=EnvRecipe("Pendulum-v1", {"g": 5.0},
                                             ("gymnasium.wrappers.TimeAwareObservation",)))
    assert result["episodes"] == 1


def test_wrapper_as_class_with_kwargs_and_a_callable():
    seen = []

    def tag(env):
        seen.append(env)
        return env

    agent = agents.make("a2c", "CartPole-v1", num_envs=1, n_steps=4,
                        env_wrapper=[{"gymnasium.wrappers.TimeLimit": {"max_episode_steps": 7}},
                                     tag])
    try:
        assert seen  # (one more env was built to check the observation size)
        lengths = [n for _, _, n in agent.step()["episodes"] + agent.step()["episodes"]]
        assert lengths and max(lengths) <= 7
        assert pgrad.evaluate(agent, episodes=2)["length_mean"] <= 7
    finally:
        agent.close()


def test_a_gym_env_instance_trains_evaluates_and_saves(tmp_path):
    env = gym.make("CartPole-v1", max_episode_steps=50)
    agent = agents.make("a2c", env, n_steps=4)  # num_envs defaults to 1 for an instance
    try:
        assert agent.cfg.num_envs == 1
        assert first_env(agent) is env  # the user's object is the one stepped
        agent.learn(20, progress=False)
        assert isinstance(agent.env_id, EnvRecipe)  # rebuilt from the spec gym.make gave it
        assert pgrad.evaluate(agent, episodes=2)["length_mean"] <= 50
        # an instance passed to evaluate runs its episodes one after the other, left open
        res = pgrad.evaluate(agent, env_id=gym.make("CartPole-v1"), episodes=3)
        assert len(res["returns"]) == 3
        agent.save(tmp_path / "s")
    finally:
        agent.close()
    loaded = agents.load(tmp_path / "s")
    try:
        assert first_env(loaded).spec.max_episode_steps == 50
    finally:
        loaded.close()


def test_an_instance_that_cannot_be_rebuilt_says_what_to_do(tmp_path):
    env = Unrecorded(gym.make("CartPole-v1"))
    assert recipe_of(env)[0] is None
    agent = agents.make("a2c", env, n_steps=4)
    try:
        agent.learn(8, progress=False)  # training is fine
        with pytest.raises(ValueError, match="cannot be built again: pass the env id"):
            pgrad.evaluate(agent)
        with pytest.raises(ValueError, match="EvalCallback.*cannot be built again"):
            agent.learn(8, callbacks=agents.callbacks.EvalCallback(every=4), progress=False)
        ok = agents.callbacks.EvalCallback(env_id="CartPole-v1", every=4, episodes=1,
                                           verbose=False)
        agent.learn(8, callbacks=ok, progress=False)
        assert ok.rows
        agent.save(tmp_path / "s")
    finally:
        agent.close()
    with pytest.raises(ValueError, match="cannot be rebuilt from its record; pass env_id="):
        agents.load(tmp_path / "s")
    agents.load(tmp_path / "s", env_id="CartPole-v1").close()


def test_instance_with_several_envs_refused_in_one_line():
    with pytest.raises(ValueError, match="one gym.Env instance is one env, but num_envs=4"):
        agents.make("a2c", gym.make("CartPole-v1"), num_envs=4)


def test_a_vector_env_instance():
    same = gym.vector.AutoresetMode.SAME_STEP
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3, autoreset_mode=same)
    agent = agents.make("a2c", envs, n_steps=4)
    try:
        assert agent.cfg.num_envs == 3
        info = agent.step()
        assert info["env_steps"] == 12
        with pytest.raises(ValueError, match="evaluation needs envs of its own"):
            pgrad.evaluate(agent)
    finally:
        agent.close()
    with pytest.raises(ValueError, match="autoreset mode NEXT_STEP; pgrad collects with "
                                         "SAME_STEP"):  # a vector env of its own kind, wrapped
        agents.make("a2c", gym.wrappers.vector.RecordEpisodeStatistics(
            gym.make_vec("CartPole-v1", 2)))


def test_env_kwargs_need_an_id():
    with pytest.raises(TypeError, match="need an env id"):
        agents.make("a2c", lambda: gym.make("CartPole-v1"), env_kwargs={"x": 1})
    with pytest.raises(ValueError, match="has no attribute 'Nope'"):
        agents.make("a2c", "CartPole-v1", env_wrapper="gymnasium.wrappers.Nope", num_envs=1)


def test_recipe_records_only_data():
    assert EnvRecipe("CartPole-v1", {}, ("gymnasium.wrappers.FlattenObservation",)).record() \
        == {"id": "CartPole-v1", "kwargs": {}, "wrappers":
            ["gymnasium.wrappers.FlattenObservation"]}
    assert EnvRecipe("CartPole-v1", {}, (lambda e: e,)).record() is None
    assert EnvRecipe(lambda: gym.make("CartPole-v1")).record() is None
    env = EnvRecipe("CartPole-v1", {"max_episode_steps": 9})()
    obs, _ = env.reset(seed=0)
    assert np.shape(obs) == (4,) and env.spec.max_episode_steps == 9
