"""agents.population.threads: one intra-op thread for populations of small dense networks."""

from __future__ import annotations

import os
import subprocess
import sys

import gymnasium as gym
import numpy as np

from agents.population.threads import flat_observations, one_intra_op_thread

_IMAGE = gym.spaces.Box(0, 255, (84, 84, 3), np.uint8)
_FLAT = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)


def test_flat_observations_are_those_without_an_image_part():
    assert flat_observations(_FLAT)
    assert flat_observations(gym.spaces.Discrete(3))
    assert flat_observations(gym.spaces.Dict({"a": _FLAT, "b": gym.spaces.Discrete(2)}))
    assert not flat_observations(_IMAGE)
    assert not flat_observations(gym.spaces.Dict({"pixels": _IMAGE, "state": _FLAT}))
    assert not flat_observations(gym.spaces.Tuple((_FLAT, _IMAGE)))
    assert not flat_observations(gym.spaces.Box(0, 1, (10, 10, 4), np.bool_))  # MinAtar planes


def test_it_sets_one_thread_before_the_runtime_starts_and_leaves_a_users_choice(monkeypatch):
    code = ("from agents.population.threads import one_intra_op_thread\n"
            "import tensorflow as tf\n"
            "print(one_intra_op_thread(), tf.config.threading.get_intra_op_parallelism_threads())")
    env = {k: v for k, v in os.environ.items() if k != "TF_NUM_INTRAOP_THREADS"}  # conftest's
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True, env=env).stdout.split()
    assert out == ["True", "1"]
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "2")
    assert one_intra_op_thread() is False


def test_the_population_command_asks_for_one_thread_only_on_flat_observations(monkeypatch):
    from agents.population import threads
    from pgrad_app.cli import population as cli

    asked = []
    monkeypatch.setattr(threads, "one_intra_op_thread", lambda: asked.append(True) or True)
    cli._threads_for("CartPole-v1")
    assert asked == [True]
    cli._threads_for("MinAtar/Breakout-v1")  # images: TensorFlow's default pool
    cli._threads_for("NoSuchEnv-v0")  # its error comes when the members are built
    assert asked == [True]
