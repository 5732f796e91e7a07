"""Schedules as data: parsed from numbers, rl-zoo strings, Python functions and Keras schedules,
evaluated once per update relative to the run, and what the update receives."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import agents
from agents import schedules


def test_parse_numbers_strings_functions_and_keras_schedules():
    assert schedules.parse(3e-4, "lr")(0.3) == 3e-4
    assert schedules.parse("7e-4", "lr")(0.0) == 7e-4  # YAML reads 7e-4 as a string
    lin = schedules.parse("lin_3e-4", "lr")
    assert (lin(1.0), lin(0.5), lin(0.0)) == (3e-4, 1.5e-4, 0.0)
    to = schedules.parse("lin_1.0_0.5", "x")
    assert (to(1.0), to(0.0)) == (1.0, 0.5)
    assert schedules.parse(lambda p: 2 * p, "x")(0.25) == 0.5
    k = schedules.parse(keras.optimizers.schedules.ExponentialDecay(1.0, 1, 0.5), "lr")
    assert k.by_updates and k(2) == pytest.approx(0.25)
    for bad in ("lin_", "lin_x", "cos_1e-3", True, [1e-3]):
        with pytest.raises(ValueError, match="lr must be a number, 'lin_X'"):
            schedules.parse(bad, "lr")


def test_validation_checks_both_ends_of_a_schedule():
    agents.A2C.Config(learning_rate="lin_1e-3").validate()
    for bad, match in ((dict(learning_rate="lin_0"), "learning_rate must be > 0 at the start"),
                       (dict(learning_rate="lin_1e-3_-1"), r"learning_rate must stay in \[0"),
                       (dict(ent_coef="lin_-0.1"), "ent_coef must stay >= 0 over the run"),
                       (dict(learning_rate=lambda p: float("nan")), "must stay finite"),
                       (dict(learning_rate="lin_1e-3", lr_decay_steps=100), "two decays")):
        with pytest.raises(ValueError, match=match):
            agents.A2C.Config(**bad).validate()
    with pytest.raises(ValueError, match=r"clip_range must be in \(0, 1\]"):
        agents.PPO.Config(clip_range=1.5).validate()


def _run(name, steps, **hp):
    """The learning rate (and clip range) each update of agent.learn(steps) received."""
    agent = agents.make(name, "CartPole-v1", seed=0, num_envs=2, n_steps=8, hidden=[8], **hp)
    seen = []
    agent.learn(steps, callbacks=lambda loop: seen.append(
        (loop.env_steps, loop.metrics["learning_rate"], loop.metrics.get("clip_range"))),
        progress=False)
    weights = [v.numpy() for v in agent.net.variables]
    agent.close()
    return seen, weights


def test_lin_follows_the_run_and_equals_the_legacy_decay_over_the_same_steps():
    seen, weights = _run("a2c", 160, learning_rate="lin_1e-3")
    assert len(seen) == 10
    for env_steps, lr, _ in seen:  # after each update's rollout, relative to the budget 160
        assert lr == pytest.approx(np.float32(1e-3 * (1 - env_steps / 160)), rel=1e-6)
    assert seen[-1][1] == 0.0
    legacy, legacy_weights = _run("a2c", 160, learning_rate=1e-3, lr_decay_steps=160)
    assert [s[1] for s in legacy] == [s[1] for s in seen]
    for a, b in zip(weights, legacy_weights):
        np.testing.assert_array_equal(a, b)


def test_a_python_function_of_the_progress_remaining_and_a_clip_range_schedule():
    seen, _ = _run("ppo", 64, learning_rate=lambda remaining: 1e-3 * remaining ** 2,
                   clip_range="lin_0.2", minibatch_size=8, epochs=1)
    for env_steps, lr, clip in seen:
        remaining = 1 - env_steps / 64
        assert lr == pytest.approx(np.float32(1e-3 * remaining ** 2), rel=1e-6)
        assert clip == pytest.approx(max(np.float32(0.2 * remaining), 1e-3), rel=1e-6)
    assert seen[-1][2] == pytest.approx(1e-3)  # floored: a clip of 0 would freeze the policy


def test_stepping_by_hand_keeps_the_start_values_and_a_decay_that_ends_early_is_warned(capsys):
    agent = agents.make("a2c", "CartPole-v1", seed=0, num_envs=2, n_steps=8, hidden=[8],
                        learning_rate="lin_1e-3")
    assert agent.step()["metrics"]["learning_rate"] == pytest.approx(1e-3)
    agent.close()
    agent = agents.make("a2c", "CartPole-v1", seed=0, num_envs=2, n_steps=8, hidden=[8],
                        lr_decay_steps=32)
    agent.learn(64, progress=False)
    assert "lr_decay_steps=32 ends before this run does" in capsys.readouterr().err
    agent.close()


def test_python_schedules_are_named_in_agent_json_and_asked_for_on_load(tmp_path):
    def quadratic(remaining):
        return 1e-3 * remaining ** 2

    agent = agents.make("a2c", "CartPole-v1", seed=0, num_envs=2, n_steps=8, hidden=[8],
                        learning_rate=quadratic)
    agent.learn(32, progress=False)
    agent.save(tmp_path / "saved")
    agent.close()
    with pytest.raises(ValueError, match="Python schedules for learning_rate .*quadratic"):
        agents.load(tmp_path / "saved")
    loaded = agents.load(tmp_path / "saved", learning_rate=quadratic)
    assert loaded.env_steps == 32
    loaded.close()
