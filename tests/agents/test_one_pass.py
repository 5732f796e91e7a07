"""A critic sharing the policy's features gets its values from the policy's own forward pass
(``agents.update.minibatch.ONE_PASS``), and with PPO's and A2C's chains the policy gradient and the
value and entropy terms from one backward pass (``FOLD_AUX``): each update equals the one with a
second pass for the value and a backward pass per term."""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import agents
import agents.base  # noqa: F401  (monkeypatched below)
import pgrad
from agents.update import compiled as update
from agents.update import minibatch as update_lib
from pgrad.rl.models.networks import ActorCritic

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from policies import ImageEnv  # noqa: E402

PLANES = "pgrad-test/Planes-v0"  # 10 x 10 x 4 bool, as MinAtar (minatar_cnn, shared)
if PLANES not in gym.registry:
    gym.register(PLANES, entry_point=ImageEnv, kwargs={"shape": (10, 10, 4), "dtype": np.bool_})


def clip_chain():  # per-step norms: the engine records taps for the policy's layers
    return pgrad.chain(pgrad.weight_by("advantages"), pgrad.clip_per_step(0.5),
                       pgrad.mean_steps())


CASES = {
    "ppo_cnn_entropy": ("ppo", PLANES, {"minibatch_size": 8, "epochs": 2, "ent_coef": 0.01}),
    "ppo_cnn_value_clip": ("ppo", PLANES, {"minibatch_size": 8, "epochs": 2,
                                           "clip_range_vf": 0.1}),
    "a2c_shared_trunk_scaled_full_path": ("a2c", "CartPole-v1", {
        "shared_trunk": True, "trunk_grad_scale": 0.5, "engine_path": "full"}),
    "a2c_cnn_clip_per_step": ("a2c", PLANES, {"transform": "clip"}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_one_pass_update_equals_a_second_pass_for_the_value(case, monkeypatch):
    name, env_id, options = CASES[case]
    options = dict(options)
    if options.pop("transform", None):
        options["transform"] = clip_chain()
    calls = []
    shared_pass = ActorCritic.params_and_value

    def spy(net, obs):
        calls.append(1)  # at trace time
        return shared_pass(net, obs)

    monkeypatch.setattr(ActorCritic, "params_and_value", spy)

    # (the acting call's own params_and_value, for V(o_t), would count too: off here)
    monkeypatch.setattr(agents.base, "VALUES_FROM_ACTING", False)

    def run(one_pass):
        monkeypatch.setattr(update_lib, "ONE_PASS", one_pass)
        calls.clear()
        agent = agents.make(name, env_id, seed=3, num_envs=2, n_steps=8, **options)
        metrics = agent.step()["metrics"]
        weights = [v.numpy() for v in agent.net.variables]
        agent.close()
        return metrics, weights, bool(calls)

    (m_one, w_one, used), (m_two, w_two, unused) = run(True), run(False)
    assert used and not unused  # the path really taken
    for a, b in zip(w_one, w_two):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for key in ("value_loss", "entropy", "policy_loss", "grad_norm", "pg_grad_norm"):
        if key in m_one:  # pg_grad_norm: not when the aux loss is folded (below)
            np.testing.assert_allclose(m_one[key], m_two[key], rtol=1e-5, atol=1e-6,
                                       err_msg=key)


def test_folded_backward_pass_equals_one_per_term(monkeypatch):
    """PPO's chain is its weighted sum alone: the policy gradient, value (clipped) and entropy
    terms come from one backward pass (FOLD_AUX), equal to a backward pass per term."""
    options = {"minibatch_size": 8, "epochs": 2, "ent_coef": 0.01, "clip_range_vf": 0.1}

    def run(fold):
        monkeypatch.setattr(update_lib, "FOLD_AUX", fold)
        agent = agents.make("ppo", PLANES, seed=3, num_envs=2, n_steps=8, **options)
        assert agent.updater.step.folded is fold
        metrics = agent.step()["metrics"]
        weights = [v.numpy() for v in agent.net.variables]
        agent.close()
        return metrics, weights

    (m_fold, w_fold), (m_two, w_two) = run(True), run(False)
    for a, b in zip(w_fold, w_two):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert "pg_grad_norm" not in m_fold and "pg_grad_norm" in m_two
    assert set(m_two) - set(m_fold) == {"pg_grad_norm"}
    for key in m_fold:
        np.testing.assert_allclose(m_fold[key], m_two[key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_no_one_pass_without_shared_features(monkeypatch):
    """A separate critic (MLP policy, or share_encoder off) keeps the update as it was."""
    called = []
    monkeypatch.setattr(ActorCritic, "params_and_value", lambda *a: called.append(1))
    for env_id, options in (("CartPole-v1", {}), (PLANES, {"share_encoder": False})):
        agent = agents.make("a2c", env_id, seed=0, num_envs=2, n_steps=4, **options)
        agent.step()
        agent.close()
    assert not called


SHORT = "pgrad-test/ShortPlanes-v0"  # episodes of 5 steps: ends inside every 8-step rollout
if SHORT not in gym.registry:
    gym.register(SHORT, entry_point=ImageEnv,
                 kwargs={"shape": (10, 10, 4), "dtype": np.bool_, "length": 5})


def test_next_values_from_the_following_rows_equal_a_pass_over_every_next_observation():
    """``V(o_{t+1})`` taken from the next row's value where the next observation is that row's
    (update.REUSE_NEXT_VALUES), else its own pass: the same values as a pass over all of them,
    for next observations that match the following row, end episodes, or differ anywhere."""
    agent = agents.make("ppo", SHORT, seed=2, num_envs=3, n_steps=8, minibatch_size=8)
    traj, _ = agent.collector.collect(agent.acting_fn(np.random.default_rng(0)), 8)
    obs, nxt = traj.observations.copy(), traj.next_observations.copy()
    nxt[2, 1, 0, 0, 0] = not nxt[2, 1, 0, 0, 0]  # one element off: that row needs its own value
    ends = traj.terminated + traj.truncated
    assert ends[:-1].any() and (ends[:-1] == 0).any()  # both kinds of rows are there
    values, next_values = agent.updater._encoded_values(obs, nxt, 8, 3)
    want = agent.net.value(nxt.reshape(-1, 10, 10, 4)).numpy().reshape(8, 3)
    np.testing.assert_allclose(next_values.numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(values.numpy(),
                               agent.net.value(obs.reshape(-1, 10, 10, 4)).numpy().reshape(8, 3),
                               rtol=1e-5, atol=1e-6)
    agent.close()


def test_update_with_reused_next_values_equals_a_pass_over_every_next_observation(monkeypatch):
    def run(reuse):
        monkeypatch.setattr(update, "REUSE_NEXT_VALUES", reuse)
        agent = agents.make("ppo", SHORT, seed=3, num_envs=2, n_steps=8, minibatch_size=8)
        metrics = [agent.step()["metrics"]]  # episodes of 5 steps end inside the rollout
        weights = [v.numpy() for v in agent.net.variables]
        agent.close()
        return metrics, weights

    (m_reuse, w_reuse), (m_all, w_all) = run(True), run(False)
    for a, b in zip(w_reuse, w_all):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for got, want in zip(m_reuse, m_all):
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6, err_msg=key)
