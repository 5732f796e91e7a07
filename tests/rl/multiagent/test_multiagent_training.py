"""PPO on agent rows (shared parameters, IPPO): PettingZoo games through the ordinary agent."""

from __future__ import annotations

import numpy as np
from conftest import LeavingGame
from mpe2 import simple_spread_v3
from pettingzoo.classic import tictactoe_v3
from pettingzoo.utils.wrappers import BaseWrapper

import agents
from pgrad.rl import multiagent as ma


class CountMoves(BaseWrapper):
    """Counts the moves the AEC game receives and the illegal ones among them."""

    def __init__(self, env):
        super().__init__(env)
        self.moves = self.illegal = 0

    def step(self, action):
        if action is not None:
            self.moves += 1
            self.illegal += int(not self.env.observe(self.agent_selection)["action_mask"][action])
        super().step(action)


def _ppo(envs, seed: int = 0, **hp):
    return ma.use_agent_rows(agents.make("ppo", envs, seed=seed, **{
        "n_steps": 16, "epochs": 2, "minibatch_size": 32, **hp}))


def test_tictactoe_ppo_never_sends_an_illegal_move():
    envs = ma.make_agent_rows(lambda: CountMoves(tictactoe_v3.env()), 4)
    agent = _ppo(envs)
    agent.learn(2000, progress=False)
    assert agent.env_steps == 2048  # steps of the game: 4 copies x 16 steps x 32 updates
    games = [g.aec_env for g in envs.unwrapped.games]
    assert sum(g.moves for g in games) == 2048 and sum(g.illegal for g in games) == 0
    # greedy play, masked as in training
    obs, info = envs.reset(seed=1)
    for _ in range(100):
        acts = agent.act(obs, deterministic=True, action_masks=info["action_mask"])
        obs, _, _, _, info = envs.step(acts)
    assert sum(g.moves for g in games) == 2048 + 4 * 100 and sum(g.illegal for g in games) == 0
    agent.close()


def test_simple_spread_ppo_runs_on_rows_and_counts_game_steps():
    envs = ma.make_agent_rows(simple_spread_v3.parallel_env, 2)
    agent = _ppo(envs)
    info = {}
    episodes = []
    while agent.env_steps < 1600:  # 32 steps per update: 2 copies x 16
        info = agent.step()
        episodes += info["episodes"]
    assert agent.env_steps == 1600
    assert info["metrics"]["batch_steps"] == 16 * 6  # every agent acts: all rows live
    # one episode per agent: 3 agents x 1600 / 25 games
    assert len(episodes) == 3 * 64
    assert all(length == 25 for _, _, length in episodes)
    agent.close()


def _weights(agent) -> list[np.ndarray]:
    return [v.numpy() for v in agent.net.variables]


def test_dead_rows_carry_no_gradient():
    """Two identical agents update on the same rollout, except for everything at its dead steps
    (agents of LeavingGame leave one by one): the same weights after the update. Changing one
    live step instead changes them (the comparison can fail)."""
    made = [_ppo(ma.make_agent_rows(LeavingGame, 2), seed=3, minibatch_size=0)  # whole batch
            for _ in range(3)]
    traj, _ = made[0].collector.collect(made[0].acting_fn(np.random.default_rng(0)), 12)
    dead = traj.mask == 0
    assert 0.2 < dead.mean() < 0.8
    rng = np.random.default_rng(1)

    def changed(where: np.ndarray):
        x = {name: np.array(getattr(traj, name)) for name in (
            "observations", "next_observations", "actions", "rewards", "terminated",
            "truncated", "log_probs")}
        x["observations"][where] = rng.normal(size=x["observations"][where].shape) * 50
        x["next_observations"][where] = rng.normal(size=x["next_observations"][where].shape)
        x["actions"][where] = rng.integers(0, 3, where.sum())
        x["rewards"][where] = 100.0
        x["terminated"][where] = 0.0
        x["truncated"][where] = 1.0
        x["log_probs"][where] = -7.0
        return traj._replace(**x)

    one_live = np.zeros_like(dead)
    one_live[3, 1] = True
    assert not dead[3, 1]
    after = []
    for agent, batch in zip(made, (traj, changed(dead), changed(one_live))):
        before = _weights(agent)
        agent.updater(agent.updater.inputs(batch, batch.rewards.size), fixed_shape=False)
        after.append(_weights(agent))
        assert any(not np.array_equal(a, b) for a, b in zip(before, after[-1]))
    for same, other in zip(after[0], after[1]):
        np.testing.assert_array_equal(same, other)
    assert any(not np.array_equal(a, b) for a, b in zip(after[0], after[2]))
    for agent in made:
        agent.close()
