"""A population's members acting in one call per env step (agents/population/acting.py).

References: each member's own NumpyPolicy forward pass and sampling (bit for bit), and the same
population collected one member after the other (weights, episodes and counters identical).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import agents
from agents.population import Population
from agents.population import loop as population_loop
from agents.population import members as population_members
from agents.population.acting import BatchedActing, lockstep_ready


def _members(env: str, seeds, **kw) -> list:
    return [agents.make("a2c", env, seed=s, hidden=(16, 8), num_envs=3, **kw) for s in seeds]


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
def test_batched_acting_equals_each_members_own_policy_bit_for_bit(env):
    members = _members(env, [1, 2, 3])
    try:
        acting = BatchedActing(members)
        acting.refresh([0, 1, 2])
        dim = members[0].observation_space.shape[0]
        obs = [np.random.default_rng(k).standard_normal((3, dim)).astype(np.float32)
               for k in range(3)]
        for rows in ([0, 1, 2], [0, 2]):  # [0, 2]: a member stopped mid-rollout
            got = acting.act(rows, [obs[i] for i in rows], [None] * len(rows),
                             [np.random.default_rng([7, i]) for i in rows])
            for i, (actions, env_actions, log_probs, values) in zip(rows, got):
                m = members[i].mirror
                params, _ = m.forward(obs[i])
                want_a, want_lp = m.sample(params, np.random.default_rng([7, i]))
                assert np.array_equal(actions, want_a) and np.array_equal(log_probs, want_lp)
                assert log_probs.dtype == want_lp.dtype and values is None
                assert np.array_equal(env_actions, members[i].head.to_env(want_a))
    finally:
        for m in members:
            m.close()


def test_masked_members_sample_each_with_its_own_mask():
    members = _members("CartPole-v1", [4, 5])
    try:
        acting = BatchedActing(members)
        acting.refresh([0, 1])
        obs = [np.zeros((3, 4), np.float32), np.ones((3, 4), np.float32)]
        masks = [np.array([[True, False]] * 3), np.array([[False, True]] * 3)]
        got = acting.act([0, 1], obs, masks, [np.random.default_rng(0)] * 2)
        assert (got[0][0] == 0).all() and (got[1][0] == 1).all()
    finally:
        for m in members:
            m.close()


def test_lockstep_needs_one_architecture_and_plain_rollouts():
    a, b = _members("CartPole-v1", [1, 2])
    c = agents.make("a2c", "CartPole-v1", seed=3, hidden=(8,), num_envs=3)
    d = agents.make("a2c", "CartPole-v1", seed=4, hidden=(16, 8), num_envs=3, n_steps=7)
    try:
        assert lockstep_ready([a, b])
        assert not lockstep_ready([a])  # one member: nothing to batch
        assert not lockstep_ready([a, c])  # other layer sizes
        assert not lockstep_ready([a, d])  # other rollout lengths
    finally:
        for m in (a, b, c, d):
            m.close()


@pytest.mark.parametrize("algo", ["a2c", "ppo"])
def test_lockstep_population_equals_one_member_after_another(algo, monkeypatch):
    """The same seeds with and without lock-step: identical weights, episodes and counters (the
    acting is bit for bit, so nothing may differ at all)."""
    kw = ({"num_envs": 4, "hidden": (16,)} if algo == "a2c" else
          {"num_envs": 4, "n_steps": 16, "minibatch_size": 32, "epochs": 2, "hidden": (16,)})
    monkeypatch.setattr(population_loop, "GROUPS", 1)
    runs = {}
    for lockstep in (True, False):
        monkeypatch.setattr(population_members, "LOCKSTEP", lockstep)
        seen: dict[int, list] = {}
        pop = Population(algo, "CartPole-v1", seeds=[6, 7, 8], **kw)
        assert (pop.acting is not None) is lockstep
        pop.learn(4 * pop.agents[0].steps_per_update(),
                  callbacks=lambda s, seen=seen: (lambda loop: seen.setdefault(s, []).extend(
                      loop.new_episodes)))
        runs[lockstep] = ([[v.numpy() for v in m.net.variables] for m in pop.agents],
                          [m.env_steps for m in pop.agents], seen)
        pop.close()
    (w1, steps1, eps1), (w0, steps0, eps0) = runs[True], runs[False]
    assert steps1 == steps0
    assert {s: [(t, n) for t, _, n in e] for s, e in eps1.items()} == \
        {s: [(t, n) for t, _, n in e] for s, e in eps0.items()}
    for a, b in zip(w1, w0):
        for x, y in zip(a, b):
            assert np.array_equal(x, y)


class _CrashAfter(gym.Wrapper):
    """CartPole whose step raises after 30 steps for the env seeded 20."""

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.crash = seed == 20
            self.count = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        self.count += 1
        if self.crash and self.count > 30:
            raise RuntimeError("the simulator lost its state")
        return self.env.step(action)


def test_a_member_whose_env_crashes_mid_lockstep_stops_alone(monkeypatch, capsys):
    monkeypatch.setattr(population_loop, "GROUPS", 1)  # all three step together
    pop = Population("a2c", lambda: _CrashAfter(gym.make("CartPole-v1")), seeds=[10, 20, 30],
                     num_envs=1, hidden=(16,))
    try:
        assert pop.acting is not None
        pop.learn(200)
        assert list(pop.failures) == [20] and "the simulator lost its state" in pop.failures[20]
        assert pop.agents[0].env_steps >= 200 and pop.agents[2].env_steps >= 200
        assert 0 < pop.agents[1].env_steps <= 30
        assert "warning: seed 20 stopped:" in capsys.readouterr().err
    finally:
        pop.close()


def test_lockstep_members_cartpoles_step_their_physics_in_one_call(physics_calls):
    pop = Population("a2c", "CartPole-v1", seeds=[0, 1, 2], num_envs=4, hidden=(16,))
    try:
        assert pop.acting is not None
        pop.step()
        assert physics_calls["n"] == pop.agents[0].cfg.n_steps  # one call a step, all three
    finally:
        pop.close()
