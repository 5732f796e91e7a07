"""Image rollouts written in place (pgrad.rl.frames): the same Trajectory as stacking the steps,
buffers on memory maps of their own, handed to TensorFlow without a copy."""

from __future__ import annotations

import mmap
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import pgrad  # noqa: F401  (first: silences TensorFlow)
from agents.update_inputs import frames_tensor as _frames_tensor
from pgrad.rl import rollout
from pgrad.rl.frames import page_array, writable_alias

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from policies import ImageEnv, assert_same_trajectory  # noqa: E402


def _collector(vector: int, dtype) -> rollout.Collector:
    envs = rollout.make_vec_env(lambda: ImageEnv((6, 5, 2), dtype, actions=3, length=3,
                                                 vector=vector), 3)
    col = rollout.Collector(envs, "images")
    col.reset(seed=4)
    return col


def _policy(seed: int):
    rng = np.random.default_rng(seed)

    def fn(obs):
        n = 3
        a = rng.integers(0, 3, n)
        return a, a, rng.random(n).astype(np.float32), None

    return fn


@pytest.mark.parametrize("vector, dtype", [(0, np.uint8), (2, np.uint8), (0, np.bool_)])
def test_in_place_rollout_equals_stacking_each_step(vector, dtype):
    """Two rollouts of 7 steps (episodes of 3 end inside them) through ``collect`` equal the
    plain loop over ``_step`` stacked with ``layout.stack``, field by field, bit for bit."""
    fast, plain = _collector(vector, dtype), _collector(vector, dtype)
    fast_fn, plain_fn = _policy(0), _policy(0)
    for _ in range(2):
        traj, _ = fast.collect(fast_fn, 7)
        ref = plain._trajectory([plain._step(plain_fn)[0] for _ in range(7)], None)
        assert_same_trajectory(traj, ref)
        for name in rollout.Trajectory._fields:  # the collector hands them over read-only
            for g in tf.nest.flatten(getattr(traj, name)):
                assert g is None or not g.flags.writeable, name
    assert (traj.terminated + traj.truncated).sum() > 0  # episode ends were inside
    fast.close()
    plain.close()


def test_frame_buffers_are_memory_maps_of_their_own():
    traj, _ = _collector(0, np.uint8).collect(_policy(0), 4)
    for x in (traj.observations, *traj.next_frames.frames):
        base = x
        while isinstance(base, np.ndarray):
            base = base.base
        assert isinstance(base.obj, mmap.mmap)  # np.frombuffer's memoryview of the map
        assert x.ctypes.data % mmap.PAGESIZE == 0


def test_frames_reach_tensorflow_without_a_copy_and_others_by_copy():
    frames = page_array((3, 2, 4), np.uint8)
    frames[:] = np.arange(24, dtype=np.uint8).reshape(3, 2, 4)
    frames.flags.writeable = False
    t = _frames_tensor(frames)
    np.testing.assert_array_equal(t.numpy(), frames)
    writable_alias(frames)[0, 0, 0] = 200  # the same memory: the tensor sees it
    assert int(t[0, 0, 0]) == 200

    plain = np.arange(24, dtype=np.uint8).reshape(3, 2, 4)
    plain.flags.writeable = False  # any other memory: copied, never aliased
    assert writable_alias(plain) is None
    t2 = _frames_tensor(plain)
    assert t2.dtype == tf.uint8
    np.testing.assert_array_equal(t2.numpy(), plain)


def test_writable_alias_refuses_other_memory():
    assert writable_alias(np.frombuffer(b"abcd", np.uint8)) is None
    assert writable_alias(np.zeros(3)) is None
