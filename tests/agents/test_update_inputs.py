"""The update's packed inputs: what the graph unpacks is exactly the rollout that was collected."""

from __future__ import annotations

import numpy as np
import pytest

import agents
from pgrad.rl import flat_call


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
    floats, actions, mask, stats = agent.updater.inputs(traj, 12, [1e-3, 0.5, 0.25, 0.125, 2.0])
    assert mask is None
    (obs, next_obs, rewards, terminated, truncated, log_probs, taken,
     norm_stats, scheduled) = agent.updater.unpack(floats, actions, stats)
    assert agent.schedules.names == ["learning_rate", "vf_coef", "clip_range_vf", "ent_coef",
                                     "critic_learning_rate"]
    assert {k: float(v) for k, v in scheduled.items()} == dict(zip(
        agent.schedules.names, [np.float32(1e-3), 0.5, 0.25, 0.125, 2.0]))
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

    def run(flat):
        monkeypatch.setattr(flat_call, "FLAT_CALLS", flat)
        agent = agents.make(name, env_id, seed=1, num_envs=2, n_steps=8, **options)
        metrics = [agent.step()["metrics"] for _ in range(3)]
        called = next(iter(agent.updater.traced.concrete.values()))
        assert (getattr(called, "__name__", "") == "call") is flat  # the path really taken
        weights = [v.numpy() for v in agent.net.variables]
        state = (agent.env_steps, int(agent.updates_var.numpy()))
        agent.close()
        return metrics, weights, state

    (m_flat, w_flat, s_flat), (m_pub, w_pub, s_pub) = run(True), run(False)
    assert m_flat == m_pub and s_flat == s_pub
    for a, b in zip(w_flat, w_pub):
        np.testing.assert_array_equal(a, b)


def test_the_flat_call_is_used_only_with_the_signature_it_was_written_for():
    """``_call_flat`` is TensorFlow's private entry point: on the pinned TensorFlow it has the
    expected signature (so the fast path is taken); a different signature means the public
    call; a binding error on the first call falls back to the public call for good."""
    import tensorflow as tf

    concrete = tf.function(lambda x: x + 1.0).get_concrete_function(tf.constant(1.0))
    assert flat_call.flat_call_supported(concrete)
    call = flat_call.flat_caller(concrete)
    assert call is not concrete and float(call(tf.constant(2.0))) == 3.0

    class Changed:  # a future TensorFlow whose private entry point takes other arguments
        captured_inputs = []

        def __init__(self):
            self.public = 0

        def _call_flat(self, args, captured_inputs, cancellation_manager):
            raise AssertionError("must not be called")

        def __call__(self, *args):
            self.public += 1
            return "public"

    changed = Changed()
    assert not flat_call.flat_call_supported(changed)
    assert flat_call.flat_caller(changed) is changed

    class Refuses(Changed):  # the right names, but it refuses the arguments when called
        def _call_flat(self, tensor_inputs, captured_inputs):
            raise TypeError("bad arguments")

    refuses = Refuses()
    call = flat_call.flat_caller(refuses)
    assert call(1) == "public" and call(2) == "public" and refuses.public == 2


def test_pyproject_bounds_admit_the_tested_tensorflow_and_keras():
    """The upper bounds in pyproject.toml are the releases pgrad was tested with (the private
    entry points above, PerSampleModel's Keras internals): the installed ones must satisfy them."""
    from importlib.metadata import version
    from pathlib import Path

    import tomllib
    from packaging.requirements import Requirement

    deps = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    wanted = {Requirement(d).name: Requirement(d) for d in deps["project"]["dependencies"]}
    for name in ("tensorflow", "keras"):
        spec = wanted[name].specifier
        assert any(s.operator == "<" for s in spec), f"{name} has no upper bound"
        assert spec.contains(version(name)), (name, version(name), str(spec))
