"""vector_mode 'overlap' (pgrad.rl.envs.overlap): the policy acts on one half of the envs while a
thread steps the other, and the rollouts are the ones 'sync' collects from the same seeds."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import agents
from pgrad.rl.collection import rollout
from pgrad.rl.envs.masked import OffersEnv
from pgrad.rl.envs.overlap import OverlapVectorEnv, merge_info
from pgrad.rl.observations.normalize import ObsNormalizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from policies import ImageEnv, assert_same_trajectory  # noqa: E402


def _rollouts(name, env, mode, steps, **hp):
    agent = agents.make(name, env, seed=3, num_envs=4, vector_mode=mode, **hp)
    fn = agent.acting_fn(np.random.default_rng(5))
    out = [agent.collector.collect(fn, steps) for _ in range(2)]
    agent.close()
    return out


def _assert_same(got, want, atol=0.0):
    for (traj, episodes), (ref, ref_episodes) in zip(got, want):
        assert episodes == ref_episodes
        # the network saw half batches: float round-off at most in the log-probs
        assert_same_trajectory(traj, ref, log_probs_atol=max(atol, 1e-6))


def test_overlap_collects_the_sync_rollouts_mlp():
    """A2C on CartPole (numpy mirror), 2 x 40 steps of 4 envs: episodes end inside."""
    got = _rollouts("a2c", "CartPole-v1", "overlap", 40)
    want = _rollouts("a2c", "CartPole-v1", "sync", 40)
    assert sum(len(e) for _, e in want) > 2
    _assert_same(got, want)


def test_overlap_collects_the_sync_rollouts_images():
    """PPO with a CNN (the compiled acting call) on Dict observations (uint8 image + vector):
    frames written in place, truncations inside, the same Trajectory and episodes."""
    def env():
        return ImageEnv((10, 10, 3), np.uint8, actions=3, length=5, vector=2)

    got = _rollouts("ppo", env, "overlap", 12)
    want = _rollouts("ppo", env, "sync", 12)
    assert want[0][0].truncated.sum() > 0
    _assert_same(got, want)


def test_merge_info_fills_a_half_without_the_key():
    a = {"x": np.array([1.0, 2.0]), "_x": np.array([True, True]),
         "final_info": {"s": np.array([None, "a"], object)}}
    b = {"y": np.array([3], np.int64), "_y": np.array([True])}
    out = merge_info(a, b, 2, 1)
    np.testing.assert_array_equal(out["x"], [1.0, 2.0, 0.0])
    np.testing.assert_array_equal(out["_x"], [True, True, False])
    np.testing.assert_array_equal(out["y"], [0, 0, 3])
    np.testing.assert_array_equal(out["_y"], [False, False, True])
    assert list(out["final_info"]["s"]) == [None, "a", None]


def test_an_abandoned_rollout_leaves_no_half_stepping():
    """A policy function that raises mid-rollout: the next rollout runs."""
    envs = rollout.make_vec_env("CartPole-v1", 4, "overlap")
    assert isinstance(envs, OverlapVectorEnv)
    col = rollout.Collector(envs, "CartPole-v1")
    col.reset(seed=0)
    calls = []

    def fn(obs):
        calls.append(len(obs))
        if len(calls) == 5:
            raise RuntimeError("policy failed")
        a = np.zeros(len(obs), np.int64)
        return a, a, np.zeros(len(obs), np.float32), None

    with pytest.raises(RuntimeError, match="policy failed"):
        col.collect(fn, 10)
    traj, _ = col.collect(fn, 3)
    assert traj.actions.shape == (3, 4) and set(calls) == {2}
    col.close()


def test_overlap_refuses_what_it_cannot_keep_exact():
    with pytest.raises(ValueError, match="num_envs >= 2"):
        rollout.make_vec_env("CartPole-v1", 1, "overlap")
    with pytest.raises(ValueError, match="overlap.*normalize_obs"):
        agents.make("ppo", "CartPole-v1", num_envs=2, vector_mode="overlap", normalize_obs=True)
    with pytest.raises(ValueError, match="overlap.*recurrent"):
        agents.make("ppo", "CartPole-v1", num_envs=2, vector_mode="overlap", recurrent="lstm",
                    n_steps=8, minibatch_size=16)
    envs = rollout.make_vec_env("CartPole-v1", 2, "overlap")
    with pytest.raises(ValueError, match="observation normalisation"):
        rollout.Collector(envs, "CartPole-v1", obs_norm=ObsNormalizer(4))
    envs.close()
    # the env's action masks are known at the first reset: the first collect refuses them
    envs = rollout.make_vec_env(lambda: OffersEnv(mask="info"), 2, "overlap")
    col = rollout.Collector(envs, "offers")
    with pytest.raises(ValueError, match="env 'offers'.*action masks.*vector_mode 'sync'"):
        col.collect(lambda obs, action_mask: None, 2)
    col.close()
