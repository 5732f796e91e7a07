"""Bad input from a game: one line naming the env, the copy, the agent and the step."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import LeavingGame

from pgrad.rl import multiagent as ma
from pgrad.rl.envs import EnvError


def _run(steps: int = 3, **kwargs) -> None:
    envs = ma.AgentRowsVectorEnv(lambda: LeavingGame(**kwargs), 2)
    _, info = envs.reset(seed=0)
    for _ in range(steps):
        mask = info.get("action_mask")
        acts = (np.zeros(6, int) if mask is None
                else np.array([np.flatnonzero(m)[0] for m in mask]))
        _, _, _, _, info = envs.step(acts)


@pytest.mark.parametrize("bad,says", [
    ("missing_reward", "agent 'a1' at step 2: the step gave no reward for this agent"),
    ("nan_reward", "agent 'a1' at step 2: reward is nan"),
    ("unknown_agent", "agent 'zz' at step 2: is not one of possible_agents"),
    ("space_change", "agent 'a1' at step 4: its observation space changed from Box"),
])
def test_a_misbehaving_game_is_one_line_naming_agent_and_step(bad, says):
    with pytest.raises(EnvError) as err:
        _run(4, bad=bad)
    text = str(err.value)
    assert text.startswith("env 'leaving_game' (copy 0), ") and says in text, text
    assert "\n" not in text


@pytest.mark.parametrize("bad,says", [
    ("mask_shape", "agent 'a0' at step 1: action_mask has shape (4,); the action space "
                   "needs 3 values"),
    ("mask_all_false", "agent 'a1' at step 1: action_mask forbids every action"),
])
def test_a_bad_action_mask_is_one_line_naming_agent_and_step(bad, says):
    with pytest.raises(EnvError) as err:
        _run(2, mask=True, bad=bad)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_an_illegal_action_is_refused_before_the_game_sees_it():
    envs = ma.AgentRowsVectorEnv(lambda: LeavingGame(mask=True), 1)
    _, info = envs.reset(seed=0)
    game = envs.games[0]
    assert info["action_mask"].tolist() == [[True, False, True]] * 3
    with pytest.raises(EnvError, match=r"agent 'a0' at step 1: action 1 is illegal \(legal: "
                                       r"\[0, 2\]\); it was not sent to the env"):
        envs.step(np.array([1, 0, 0]))
    assert game.sent == []
    with pytest.raises(EnvError, match="action 3 is outside the action space"):
        envs.step(np.array([3, 0, 0]))


def test_actions_of_the_wrong_shape_name_the_rows():
    envs = ma.AgentRowsVectorEnv(LeavingGame, 2)
    envs.reset(seed=0)
    with pytest.raises(ValueError, match=r"has 6 rows \(3 agents x 2 copies\); got actions "
                                         r"of shape \(3,\)"):
        envs.step(np.zeros(3, int))


def test_a_missing_termination_and_a_non_number_reward():
    class NoFlags(LeavingGame):
        def step(self, actions):
            obs, rew, te, tr, infos = super().step(actions)
            te.pop("a2")
            return obs, rew, te, tr, infos

    class TextReward(LeavingGame):
        def step(self, actions):
            obs, rew, te, tr, infos = super().step(actions)
            rew["a0"] = "1"
            return obs, rew, te, tr, infos

    for cls, says in ((NoFlags, "agent 'a2' at step 1: the step gave no termination"),
                      (TextReward, "agent 'a0' at step 1: reward '1' is not a number")):
        envs = ma.AgentRowsVectorEnv(cls, 1)
        envs.reset(seed=0)
        with pytest.raises(EnvError, match=says):
            envs.step(np.zeros(3, int))
