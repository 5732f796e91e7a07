"""Agent rows: each row is one agent of one copy of the game, exactly as the game gives it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from conftest import LeavingGame
from mpe2 import simple_adversary_v3, simple_reference_v3, simple_spread_v3
from pettingzoo.classic import connect_four_v3, tictactoe_v3

from pgrad.rl import multiagent as ma
from pgrad.rl.multiagent import TurnBasedParallelEnv


def test_rows_equal_each_agents_data_stepped_by_hand():
    """Two copies of a game whose agents leave one by one, stepped through the rows and by hand
    side by side: observations, rewards, flags, live rows, final observations and resets."""
    B, n, seed = 2, 3, 7
    envs = ma.AgentRowsVectorEnv(LeavingGame, B)
    refs = [LeavingGame() for _ in range(B)]
    obs, info = envs.reset(seed=seed)
    ref_obs = [g.reset(seed=seed + b)[0] for b, g in enumerate(refs)]
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(9):  # two episodes of 4 steps and a bit
        for b, g in enumerate(refs):
            for i, a in enumerate(g.possible_agents):
                r = b * n + i
                assert info["live"][r] == (a in g.agents)
                want = ref_obs[b][a] if a in g.agents else np.zeros(4)
                np.testing.assert_array_equal(obs[r], want)
        actions = rng.integers(0, 3, B * n)
        obs, rew, term, trunc, info = envs.step(actions)
        for b, g in enumerate(refs):
            present = list(g.agents)
            o, r_, te, tr, _ = g.step({a: int(actions[b * n + g.possible_agents.index(a)])
                                       for a in present})
            for i, a in enumerate(g.possible_agents):
                r = b * n + i
                if a in present:
                    assert (rew[r], term[r], trunc[r]) == (r_[a], te[a], tr[a])
                    if te[a] or tr[a]:
                        np.testing.assert_array_equal(info["final_obs"][r], o[a])
                else:  # left earlier: no reward, no flags
                    assert (rew[r], term[r], trunc[r]) == (0.0, False, False)
            if not g.agents:  # the game's copy reset in the same step
                ended += 1
                assert info["env_done"][b * n: (b + 1) * n].all()
                o, _ = g.reset()
            ref_obs[b] = o
    assert ended == 4


def test_simple_spread_rows_are_the_parallel_envs_observations_and_state():
    envs = ma.AgentRowsVectorEnv(simple_spread_v3.parallel_env, 2, global_state=True)
    ref = simple_spread_v3.parallel_env()
    obs, info = envs.reset(seed=3)
    ref_obs, _ = ref.reset(seed=3)
    np.testing.assert_array_equal(obs[:3], np.stack([ref_obs[a] for a in ref.possible_agents]))
    assert info["live"].all() and "action_mask" not in info
    np.testing.assert_allclose(info["state"][:3], np.repeat(ref.state()[None], 3, 0))
    acts = np.array([0, 1, 2, 3, 4, 0])
    obs, rew, *_ = envs.step(acts)
    ref_obs, ref_rew, *_ = ref.step({a: int(x) for a, x in zip(ref.possible_agents, acts)})
    np.testing.assert_array_equal(obs[:3], np.stack([ref_obs[a] for a in ref.possible_agents]))
    np.testing.assert_allclose(rew[:3], [ref_rew[a] for a in ref.possible_agents])
    envs.close()


def test_agent_id_appends_the_index_one_hot():
    envs = ma.AgentRowsVectorEnv(simple_reference_v3.parallel_env, 2, agent_id=True)
    obs, _ = envs.reset(seed=0)
    assert envs.single_observation_space.shape == (21 + 2,)
    np.testing.assert_array_equal(obs[:, 21:], np.tile(np.eye(2), (2, 1)))
    assert envs.observation_space.contains(obs)


def test_turn_based_game_only_the_mover_is_live_and_the_loser_hears_of_its_loss():
    """Tic-tac-toe: player_1 wins on its 3rd move; player_2 was waiting and gets -1 then."""
    envs = ma.make_agent_rows(tictactoe_v3.env, 1)
    _, info = envs.reset(seed=0)
    moves = [0, 3, 1, 4, 2]  # player_1 takes the top row
    for k, cell in enumerate(moves):
        mover = k % 2
        assert info["live"].tolist() == [mover == 0, mover == 1]
        assert info["action_mask"][1 - mover].all()  # the waiting row: anything (ignored)
        actions = np.zeros(2, int)
        actions[mover] = cell
        _, rew, term, _, info = envs.step(actions)
    assert rew.tolist() == [1.0, -1.0] and term.all()
    assert info["episode"]["r"].tolist() == [1.0, -1.0]
    assert info["episode"]["l"].tolist() == [3, 2]  # moves each made
    assert info["team_episode"]["r"].tolist() == [0.0, 0.0]
    assert info["team_episode"]["l"].tolist() == [5, 5]
    assert info["live"].tolist() == [True, False]  # a new game: player_1 moves first


def test_turn_based_rewards_equal_the_aec_games_cumulative_rewards():
    """Connect four played to its end through the adapter and through the AEC API by hand:
    each agent's rewards summed equal what ``last()`` reports."""
    game = TurnBasedParallelEnv(connect_four_v3.env())
    ref = connect_four_v3.env()
    game.reset(seed=1)
    ref.reset(seed=1)
    totals = dict.fromkeys(game.possible_agents, 0.0)
    ref_totals = dict.fromkeys(ref.possible_agents, 0.0)
    rng = np.random.default_rng(1)
    while game.agents:
        (mover,) = game.acting_agents
        assert mover == ref.agent_selection
        legal = np.flatnonzero(ref.observe(mover)["action_mask"])
        a = int(rng.choice(legal))
        _, rew, *_ = game.step({mover: a})
        for agent, r in rew.items():
            totals[agent] += r
        ref.step(a)
        while ref.agents:
            _, r, te, tr, _ = ref.last()
            ref_totals[ref.agent_selection] += r
            if not (te or tr):
                break
            ref.step(None)
    assert totals == ref_totals and sorted(totals.values()) == [-1.0, 1.0]


def test_as_parallel_and_is_pettingzoo():
    assert ma.is_pettingzoo(tictactoe_v3.env()) and not ma.is_pettingzoo(gym.make("CartPole-v1"))
    assert isinstance(ma.as_parallel(tictactoe_v3.env()), TurnBasedParallelEnv)
    spread = simple_spread_v3.env()  # an AEC env that says it is parallelizable
    assert type(ma.as_parallel(spread)).__name__ == "aec_to_parallel_wrapper"
    with pytest.raises(TypeError, match="a Gymnasium env"):
        ma.as_parallel(gym.make("CartPole-v1"))
    with pytest.raises(TypeError, match="got a dict"):
        ma.AgentRowsVectorEnv(lambda: {}, 1)


def test_agents_with_different_spaces_are_refused_naming_them():
    with pytest.raises(ValueError) as err:
        ma.AgentRowsVectorEnv(simple_adversary_v3.parallel_env, 1)
    text = str(err.value)
    assert "\n" not in text and "different observation spaces" in text
    assert "adversary_0: Box" in text and "agent_0, agent_1: Box" in text


def test_statistics_report_each_agents_episode_and_the_team_return():
    envs = ma.make_agent_rows(LeavingGame, 1)
    envs.reset(seed=0)
    actions = np.array([1, 2, 0])
    seen = {}
    for _ in range(4):
        _, _, _, _, info = envs.step(actions)
        if "episode" in info:
            for r in np.flatnonzero(info["_episode"]):
                seen[r] = (info["episode"]["r"][r], info["episode"]["l"][r])
    # agent i acts i + 2 steps with reward a_i + 10 i + 0.1 t
    want = {i: (sum(actions[i] + 10 * i + 0.1 * t for t in range(1, i + 3)), i + 2)
            for i in range(3)}
    assert seen.keys() == want.keys()
    for i in range(3):
        assert seen[i][0] == pytest.approx(want[i][0]) and seen[i][1] == want[i][1]
    team = info["team_episode"]
    assert team["r"][0] == pytest.approx(np.mean([w[0] for w in want.values()]))
    assert team["l"].tolist() == [4, 4, 4]
    assert list(envs.team_return_queue) == pytest.approx([team["r"][0]])


def test_the_last_agent_truncated():
    envs = ma.AgentRowsVectorEnv(lambda: LeavingGame(truncate=True), 1)
    envs.reset(seed=0)
    for _ in range(3):
        envs.step(np.zeros(3, int))
    _, _, term, trunc, info = envs.step(np.zeros(3, int))
    assert trunc.tolist() == [False, False, True] and not term.any()
    assert info["_final_obs"].tolist() == [False, False, True]
