"""``rollout/success_rate`` (issue 24, item 3) as Stable-Baselines3 logs it: the mean
``info["is_success"]`` of the last 100 training episodes that reported one, read back with
TensorBoard's ``EventAccumulator.Scalars()`` and from ``updates.csv``, against a plain Python
replay of the env's schedule."""

from __future__ import annotations

import csv

import gymnasium as gym
import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import agents
from agents import logger
from pgrad.rl.collection.rollout import ended_successes

LENGTH = 3  # every episode lasts 3 steps, whatever the actions


class Reporting(gym.Env):
    """Episode ``k`` of an instance reports ``is_success = (k % 2 == 0)``, except every fourth
    (``k % 4 == 3``), which reports nothing."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self):
        self.k, self.t = 0, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        done = self.t >= LENGTH
        info = {}
        if done:
            if self.k % 4 != 3:
                info["is_success"] = self.k % 2 == 0
            self.k += 1
        return np.full(2, self.t / LENGTH, np.float32), 1.0, done, False, info


# at import: Ray workers import this module (``--env tests.app.test_success_rate:Reporting-v0``)
if "Reporting-v0" not in gym.registry:
    gym.register("Reporting-v0", entry_point=Reporting)


def expected_rate(env_steps: int, num_envs: int) -> float | None:
    """The reference: replay which episodes ended by ``env_steps`` and what they reported."""
    reported = []
    for k in range(env_steps // num_envs // LENGTH):
        reported += [float(k % 2 == 0)] * num_envs if k % 4 != 3 else []
    return float(np.mean(reported[-100:])) if reported else None


def test_the_successes_of_one_vector_step_are_read_from_final_info():
    done = np.array([True, False, True, True])
    info = {"final_info": {"is_success": np.array([True, False, False, True]),
                           "_is_success": np.array([True, False, True, False])}}
    assert ended_successes(info, done) == [1.0, 0.0]  # env 3 ended without reporting
    assert ended_successes({"final_info": {}}, done) == []
    assert ended_successes({}, np.zeros(4, bool)) == []


def test_success_rate_in_tensorboard_and_updates_csv_over_the_last_100(tmp_path):
    from pgrad_app import RunDirectory

    agent = agents.make("a2c", "Reporting-v0", seed=0, num_envs=2, n_steps=5)
    try:  # 60 updates of 10 env steps: 200 episodes, 150 reported, past the window of 100
        agent.learn(600, progress=False, callbacks=[
            logger.TensorBoardLog(tmp_path / "tb", log_every=1),
            RunDirectory(tmp_path / "run", log_every=1)])
    finally:
        agent.close()
    acc = EventAccumulator(str(tmp_path / "tb" / "A2C_1"))
    acc.Reload()
    events = acc.Scalars("rollout/success_rate")
    steps = list(range(10, 601, 10))
    assert [e.step for e in events] == [s for s in steps if expected_rate(s, 2) is not None]
    for e in events:
        assert e.value == pytest.approx(expected_rate(e.step, 2)), e.step
    assert events[-1].value == pytest.approx(0.66)  # the last 100 of 150 (all of them: 2/3)
    with open(tmp_path / "run" / "updates.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == steps
    for r in rows:
        want = expected_rate(int(r["step"]), 2)
        if want is None:
            assert r["success_rate"] == ""
        else:
            assert float(r["success_rate"]) == pytest.approx(want)
    acc = EventAccumulator(str(tmp_path / "run" / "tb"))
    acc.Reload()
    assert [e.value for e in acc.Scalars("rollout/success_rate")] == pytest.approx(
        [e.value for e in events])


def test_an_env_that_reports_no_success_logs_no_success_rate(tmp_path):
    agent = agents.make("a2c", "CartPole-v1", seed=0, num_envs=2, n_steps=5)
    try:
        agent.learn(100, progress=False,
                    callbacks=logger.TensorBoardLog(tmp_path, log_every=1))
    finally:
        agent.close()
    acc = EventAccumulator(str(tmp_path / "A2C_1"))
    acc.Reload()
    assert "rollout/ep_rew_mean" in acc.Tags()["scalars"]
    assert "rollout/success_rate" not in acc.Tags()["scalars"]


@pytest.mark.subprocess
def test_success_rate_is_carried_back_from_a_ray_worker_and_an_async_actor(tmp_path):
    """Synchronous workers (A2C) and the asynchronous learner (IMPALA) collect in other
    processes; the successes come back with the trajectories, so the tag is the in-process one.
    One Ray start-up for both (it is slow here)."""
    pytest.importorskip("ray")
    from pgrad_app.distributed import async_learner, session, workers

    spec = "tests.app.test_success_rate:Reporting-v0"  # what the workers import
    runs = {"a2c": (workers, {}), "impala": (async_learner, {"queue_size": 1})}
    with session.ray_session(num_cpus=1):
        for name, (module, options) in runs.items():
            agent = agents.make(name, "Reporting-v0", seed=0, num_envs=2, n_steps=5, **options)
            try:  # 30 updates of 10 env steps: 100 episodes, 75 reported
                module.distribute(agent, 1, env_spec=spec)
                agent.learn(300, progress=False,
                            callbacks=logger.TensorBoardLog(tmp_path / name, log_every=1))
            finally:
                agent.close()
            acc = EventAccumulator(str(next((tmp_path / name).iterdir())))
            acc.Reload()
            events = acc.Scalars("rollout/success_rate")
            assert events, name
            assert events[-1].step == 300, name
            for e in events:
                assert e.value == pytest.approx(expected_rate(e.step, 2)), (name, e.step)
