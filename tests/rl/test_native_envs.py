"""pgrad's numpy CartPole (pgrad/rl/envs/native.py) against Gymnasium's sync vector env.

Reference: ``gym.make_vec("CartPole-v1", n, vectorization_mode="sync")`` in SAME_STEP mode,
stepped with the same actions: observations, rewards, terminations, truncations, final
observations and episode statistics equal bit for bit, over terminations, time-limit
truncations and resets with every kind of seed.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import agents
from pgrad.rl.collection.rollout import Collector, EnvError
from pgrad.rl.envs import native
from pgrad.rl.envs.native import CartPoleVector, native_vector_env
from pgrad.rl.envs.vector import make_vec_env

SAME_STEP = gym.vector.AutoresetMode.SAME_STEP


def _pair(env_id: str, n: int):
    ref = gym.make_vec(env_id, num_envs=n, vectorization_mode="sync",
                       vector_kwargs={"autoreset_mode": SAME_STEP})
    mine = native_vector_env(env_id, n)
    assert isinstance(mine, CartPoleVector)
    return (gym.wrappers.vector.RecordEpisodeStatistics(ref),
            gym.wrappers.vector.RecordEpisodeStatistics(mine))


def _same_step(got, want) -> bool:
    for k in range(4):
        assert got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k]), k
    gi, wi = got[4], want[4]
    assert gi.keys() == wi.keys()
    if "final_obs" in wi:
        assert np.array_equal(gi["_final_obs"], wi["_final_obs"])
        for g, w in zip(gi["final_obs"], wi["final_obs"]):
            assert (g is None and w is None) or (g.dtype == w.dtype and np.array_equal(g, w))
        for key in ("r", "l"):
            assert np.array_equal(gi["episode"][key], wi["episode"][key])
        assert np.array_equal(gi["_episode"], wi["_episode"])
        return True
    return False


@pytest.mark.parametrize("env_id,steps", [("CartPole-v1", 3000), ("CartPole-v0", 1500)])
def test_native_cartpole_steps_as_gymnasiums_bit_for_bit(env_id, steps):
    ref, mine = _pair(env_id, 8)
    assert mine.single_observation_space == ref.single_observation_space
    assert mine.observation_space == ref.observation_space
    assert mine.action_space == ref.action_space
    want, _ = ref.reset(seed=11)
    got, _ = mine.reset(seed=11)
    assert np.array_equal(got, want)
    rng = np.random.default_rng(0)
    obs, ended, truncated = want, 0, 0
    for _ in range(steps):
        # half the envs balance the pole (episodes reach the time limit), half act at random
        balance = (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64)
        actions = np.where(np.arange(8) < 4, balance, rng.integers(0, 2, 8))
        w, g = ref.step(actions), mine.step(actions)
        ended += _same_step(g, w)
        truncated += int(w[3].sum())
        obs = w[0]
    assert ended > 50 and truncated >= 4  # terminations and time limits both compared


def test_resets_take_seeds_as_gymnasium_does():
    ref, mine = _pair("CartPole-v1", 3)
    for seed in (5, [1, None, 9], None):  # None: each env's generator goes on
        assert np.array_equal(mine.reset(seed=seed)[0], ref.reset(seed=seed)[0])
    fresh = native_vector_env("CartPole-v1", 2)
    a, _ = fresh.reset()  # never seeded: a fresh generator each
    assert a.shape == (2, 4) and np.abs(a).max() <= 0.05


def test_make_vec_env_uses_it_only_where_it_is_gymnasiums_cartpole(monkeypatch):
    def inner(envs):
        return envs.unwrapped

    assert isinstance(inner(make_vec_env("CartPole-v1", 4)), CartPoleVector)
    assert isinstance(inner(make_vec_env("CartPole-v1", 4, env_kwargs={
        "sutton_barto_reward": True})), gym.vector.SyncVectorEnv)  # options: Gymnasium's
    assert isinstance(inner(make_vec_env("Acrobot-v1", 2)), gym.vector.SyncVectorEnv)
    monkeypatch.setenv(native.SWITCH, "0")
    assert isinstance(inner(make_vec_env("CartPole-v1", 4)), gym.vector.SyncVectorEnv)
    monkeypatch.delenv(native.SWITCH)
    gym.register("pgrad-test/CartPoleShort-v0", entry_point=native.NATIVE_IDS["CartPole-v1"],
                 max_episode_steps=20)
    try:  # another id (and time limit) for the same class: Gymnasium's own
        assert native_vector_env("pgrad-test/CartPoleShort-v0", 2) is None
    finally:
        gym.registry.pop("pgrad-test/CartPoleShort-v0")


def test_an_invalid_action_is_one_line_naming_the_env():
    collector = Collector(make_vec_env("CartPole-v1", 2), "CartPole-v1")

    def bad_policy(obs):
        n = len(obs)
        return (np.zeros(n, np.int32), np.full(n, 2), np.zeros(n, np.float32), None)

    with pytest.raises(EnvError, match=r"env 'CartPole-v1' failed at env step 2: "
                                       r"AssertionError: .*invalid"):
        collector.collect(bad_policy, 3)


def test_a_run_on_native_envs_is_the_run_on_gymnasiums(monkeypatch):
    """One A2C run each way: the same episodes and weights (the envs are the only change)."""
    runs = []
    for switch in ("1", "0"):
        monkeypatch.setenv(native.SWITCH, switch)
        agent = agents.make("a2c", "CartPole-v1", seed=2, num_envs=4, hidden=(16,))
        seen: list = []
        agent.learn(600, callbacks=lambda loop, seen=seen: seen.extend(loop.new_episodes),
                    progress=False)
        runs.append(([v.numpy() for v in agent.net.variables], [(s, n) for s, _, n in seen]))
        agent.close()
    (w1, e1), (w0, e0) = runs
    assert e1 == e0 and len(e1) > 10
    assert all(np.array_equal(a, b) for a, b in zip(w1, w0))


def test_step_together_steps_each_env_as_it_would_step_alone(physics_calls):
    """Three members' wrapped CartPoles (other seeds, one of another width) stepped together
    for 700 steps (terminations, truncations at 500, autoresets) against copies stepped alone:
    bit for bit, and one physics call per step for all three."""
    from gymnasium.wrappers.vector import RecordEpisodeStatistics

    widths, seeds = (4, 4, 3), (0, 7, 21)

    def build():
        envs = [RecordEpisodeStatistics(CartPoleVector(n)) for n in widths]
        for env, s in zip(envs, seeds):
            env.reset(seed=s)
        return envs

    together, alone = build(), build()
    rng = np.random.default_rng(0)
    calls = physics_calls
    for _ in range(700):
        acts = [rng.integers(0, 2, n) for n in widths]
        before = calls["n"]
        native.step_together(together, acts)
        got = [env.step(a) for env, a in zip(together, acts)]
        assert calls["n"] == before + 1  # every env took its share
        want = [env.step(a.copy()) for env, a in zip(alone, acts)]
        for (o1, r1, te1, tr1, i1), (o2, r2, te2, tr2, i2) in zip(got, want):
            np.testing.assert_array_equal(o1, o2)
            np.testing.assert_array_equal(r1, r2)
            np.testing.assert_array_equal(te1, te2)
            np.testing.assert_array_equal(tr1, tr2)
            assert sorted(i1) == sorted(i2)
            if "final_obs" in i1:
                for a, b in zip(i1["final_obs"], i2["final_obs"]):
                    assert (a is None and b is None) or np.array_equal(a, b)
            if "episode" in i1:
                np.testing.assert_array_equal(i1["episode"]["r"], i2["episode"]["r"])
    # a step with other actions than the ones stepped together computes its own physics
    acts = [np.zeros(n, np.int64) for n in widths]
    native.step_together(together, acts)
    before = calls["n"]
    other = np.ones(widths[0], np.int64)
    stepped = together[0].step(other)[0]
    assert calls["n"] == before + 1
    np.testing.assert_array_equal(stepped, alone[0].step(other.copy())[0])
