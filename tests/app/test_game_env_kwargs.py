"""``--env MODULE:FACTORY --env-kwargs k=v`` with a PettingZoo game's factory: the factory is
called with the keywords (it is no Gymnasium id), in the pre-flight probe, in training and in
evaluation; registered ids still go to ``gymnasium.make``."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from cli_helpers import evaluate, one_error_line, train

from pgrad.rl.envs.recipe import EnvRecipe, make_env, named_factory
from pgrad.rl.multiagent.cue_game import CueGame
from pgrad_app.errors import UserError
from pgrad_app.run.preflight import check_env_kwargs

GAME = "pgrad.rl.multiagent.cue_game:parallel_env"


def test_a_factory_name_is_called_with_its_keywords():
    game = make_env(GAME, n_agents=3, n_actions=2)
    assert isinstance(game, CueGame) and game.possible_agents == ["agent_0", "agent_1",
                                                                   "agent_2"]
    assert game.action_space("agent_0").n == 2
    built = EnvRecipe(GAME, {"n_agents": 5})()
    assert isinstance(built, CueGame) and len(built.possible_agents) == 5
    assert named_factory(GAME) is not None


def test_ids_still_go_to_gymnasium_make():
    assert named_factory("CartPole-v1") is None
    assert named_factory("gymnasium.envs.classic_control:CartPole-v1") is None  # module:EnvId
    env = make_env("gymnasium.envs.classic_control:CartPole-v1", sutton_barto_reward=True)
    assert isinstance(env, gym.Env) and env.spec.kwargs["sutton_barto_reward"] is True
    env.close()
    with pytest.raises(gym.error.NameNotFound):  # an unknown id: gymnasium's own error
        make_env("gymnasium.envs.classic_control:NoSuchEnv-v0")


def test_the_preflight_probe_steps_the_game_and_names_a_bad_keyword():
    check_env_kwargs(EnvRecipe(GAME, {"n_agents": 3}), {"n_agents": 3})  # no error
    with pytest.raises(UserError, match=r"--env-kwargs n_agents=1: .* cannot be made .*"
                                        r"n_agents >= 2"):
        check_env_kwargs(EnvRecipe(GAME, {"n_agents": 1}), {"n_agents": 1})
    with pytest.raises(UserError, match=r"unexpected keyword argument 'colour'"):
        check_env_kwargs(EnvRecipe(GAME, {"colour": 1}), {"colour": 1})


def test_pgrad_train_builds_the_game_with_the_keywords(tmp_path, capsys):
    run = tmp_path / "run"
    code, _, err = train("--algo", "ippo", "--env", GAME, "--env-kwargs", "n_agents=3",
                         "--total-steps", 40, "--set", "n_steps=8", "--set", "num_envs=2",
                         "--out", run, "--quiet", capsys=capsys)
    assert code == 0, err
    code, _, err = evaluate(run, "--episodes", 2, "--env", GAME, capsys=capsys)
    assert code == 0, err
    result = json.loads((run / "eval.json").read_text())
    assert set(result["agent_return_mean"]) == {"agent_0", "agent_1", "agent_2"}  # not 8
    code, _, err = train("--algo", "ippo", "--env", GAME, "--env-kwargs", "n_agents=one",
                         "--total-steps", 400, "--out", tmp_path / "bad", "--quiet",
                         capsys=capsys)
    assert code != 0 and "--env-kwargs n_agents=" in one_error_line(err)
    assert not (tmp_path / "bad").exists()
