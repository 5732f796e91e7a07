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
