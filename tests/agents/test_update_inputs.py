"""The update's packed inputs: what the graph unpacks is exactly the rollout that was collected."""

from __future__ import annotations

import numpy as np
import pytest

import agents


@pytest.mark.parametrize("env_id, options", [
    ("CartPole-v1", {}),
    ("Pendulum-v1", {"normalize_obs": True, "normalize_reward": True}),
])
def test_unpacked_update_inputs_equal_the_trajectory_and_statistics(env_id, options):
    agent = agents.A2C(agents.A2C.Config(num_envs=3, n_steps=4, **options), env_id=env_id,
                       seed=0)
    agent.step()  # statistics away from their start values
    rng = np.random.default_rng(0)
    traj, _ = agent.collector.collect(agent.acting_fn(rng), 4)
    floats, actions, mask, stats = agent.updater.inputs(traj, 12)
    assert mask is None
    (obs, next_obs, rewards, terminated, truncated, log_probs, taken,
     norm_stats) = agent.updater.unpack(floats, actions, stats)
    np.testing.assert_array_equal(actions.numpy(), traj.actions)
    for got, want in [(obs, traj.observations), (next_obs, traj.next_observations),
                      (rewards, traj.rewards), (terminated, traj.terminated),
                      (truncated, traj.truncated), (log_probs, traj.log_probs)]:
        assert got.shape == want.shape
        np.testing.assert_array_equal(got.numpy(), want)
    assert int(taken) == 12
    norms = [n for n in (agent.obs_norm, agent.reward_norm) if n is not None]
    assert len(norm_stats) == len(norms)
    for (mean, var, count), norm in zip(norm_stats, norms):
        np.testing.assert_array_equal(mean.numpy(), norm.rms.mean)
        np.testing.assert_array_equal(var.numpy(), norm.rms.var)
        assert float(count) == norm.rms.count
    agent.close()


@pytest.mark.parametrize("name, env_id, options", [
    ("a2c", "CartPole-v1", {}),
    ("ppo", "Pendulum-v1", {"normalize_obs": True, "normalize_reward": True,
                            "minibatch_size": 8, "epochs": 2}),
])
def test_flat_calls_run_the_update_exactly_as_the_public_call(name, env_id, options, monkeypatch):
    """The fixed-shape update's flat entry point gives the public call's weights, metrics and
    counters, bit for bit, over several updates."""
    from agents import update as update_lib

    def run(flat):
        monkeypatch.setattr(update_lib, "FLAT_CALLS", flat)
        agent = agents.make(name, env_id, seed=1, num_envs=2, n_steps=8, **options)
        metrics = [agent.step()["metrics"] for _ in range(3)]
        called = next(iter(agent.updater._concrete.values()))
        assert (getattr(called, "__name__", "") == "call") is flat  # the path really taken
        weights = [v.numpy() for v in agent.net.variables]
        state = (agent.env_steps, int(agent.updates_var.numpy()))
        agent.close()
        return metrics, weights, state

    (m_flat, w_flat, s_flat), (m_pub, w_pub, s_pub) = run(True), run(False)
    assert m_flat == m_pub and s_flat == s_pub
    for a, b in zip(w_flat, w_pub):
        np.testing.assert_array_equal(a, b)
