"""Fixtures of the end-to-end tests: a finished run to copy and damage, user plug-in files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cli_helpers import run

BAD_ENVS = '''
import gymnasium as gym
import numpy as np


class Base(gym.Env):
    """Two floats in, two actions; misbehaves from step FAIL_AT of an episode in subclasses."""
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)
    fail_at = 3

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def obs(self):
        return np.full(2, 0.1, np.float32)

    def step(self, action):
        self.t += 1
        return self.obs(), 1.0, False, self.t >= 20, {}


class StepRaises(Base):
    def step(self, action):
        if self.t + 1 >= self.fail_at:
            raise RuntimeError("sensor offline")
        return super().step(action)


class CtorRaises(Base):
    def __init__(self):
        raise RuntimeError("license server unreachable")


class Huge(Base):  # declaring it is cheap; a batch of its observations is not
    observation_space = gym.spaces.MultiBinary([100000, 100000])


class StringObs(Base):
    def obs(self):
        return np.array(["a", "b"]) if self.t >= self.fail_at else super().obs()


class WrongShape(Base):
    def obs(self):
        return np.zeros(3, np.float32) if self.t >= self.fail_at else super().obs()


class ArrayTerminated(Base):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if self.t >= self.fail_at:
            terminated = np.array([False, False])
        return obs, reward, terminated, truncated, info


class NoRenderMode(Base):
    def __init__(self):  # takes no render_mode: fine unless a video is asked for
        super().__init__()


for cls in (StepRaises, CtorRaises, Huge, StringObs, WrongShape, ArrayTerminated, NoRenderMode):
    gym.register(f"Bad/{cls.__name__}-v0", entry_point=cls, max_episode_steps=50)
    first = type(cls.__name__ + "First", (cls,), {"fail_at": 1})  # fails at the first step
    gym.register(f"Bad/{cls.__name__}First-v0", entry_point=first, max_episode_steps=50)
'''

TRANSFORMS = '''
from typing import NamedTuple

import tensorflow as tf

import pgrad


def good(grads, *, advantages, **context):
    return [g * tf.reshape(advantages, [-1] + [1] * (len(g.shape) - 1)) for g in grads]


class Count(NamedTuple):
    n: tf.Tensor  # [] int32, updates so far


def late_blowup():
    """Advantage-weighted per-step gradients, x 1e25 from the 5th update on: finite, but their
    squares overflow RMSprop's running mean to inf (the optimizer state, not the weights)."""
    def init(variables):
        return Count(tf.zeros([], tf.int32))

    def update(grads, state, *, advantages, **context):
        w = tf.where(state.n >= 4, 1e25, 1.0) * advantages
        grads = [g * tf.reshape(w, [-1] + [1] * (len(g.shape) - 1)) for g in grads]
        return grads, Count(state.n + 1)

    blow = pgrad.GradientTransform(init, update, name="late_blowup")
    return pgrad.chain(blow, pgrad.mean_steps(), name="late_blowup")


def late_overflow():
    """From the 5th update on, per-step gradients rescaled so the largest entry is 1e38:
    finite, but a step of learning_rate 10 takes a weight past float32's range."""
    def init(variables):
        return Count(tf.zeros([], tf.int32))

    def update(grads, state, **context):
        def huge(g):
            return g / (tf.reduce_max(tf.abs(g)) + 1e-30) * 1e38
        grads = [tf.cond(state.n >= 4, lambda g=g: huge(g), lambda g=g: g) for g in grads]
        return grads, Count(state.n + 1)

    over = pgrad.GradientTransform(init, update, name="late_overflow")
    return pgrad.chain(over, pgrad.mean_steps(), name="late_overflow")
'''


@pytest.fixture(scope="session")
def plugins(tmp_path_factory) -> Path:
    """A folder with ``badenvs.py`` (misbehaving envs) and ``user_tf.py`` (transforms)."""
    d = tmp_path_factory.mktemp("plugins")
    (d / "badenvs.py").write_text(BAD_ENVS)
    (d / "user_tf.py").write_text(TRANSFORMS)
    return d


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory) -> Path:
    """A finished A2C CartPole run: 7 updates of 80 steps (560), checkpoints every 128 steps
    (kept: 320, 400 and 560). Copy it before changing it."""
    out = tmp_path_factory.mktemp("finished") / "run"
    proc = run("train.py", "--total-steps", 512, "--checkpoint-every", 128, "--quiet",
               "--out", out)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture
def run_copy(finished_run, tmp_path) -> Path:
    """A private copy of :func:`finished_run`."""
    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    return out
