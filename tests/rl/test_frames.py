"""Image rollouts written in place (pgrad.rl.observations.frames): the same Trajectory as stacking
the steps, buffers on memory maps of their own, handed to TensorFlow without a copy."""

from __future__ import annotations

import mmap
import pickle
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

import pgrad  # noqa: F401  (first: silences TensorFlow)
from agents.update.inputs import frames_tensor as _frames_tensor
from pgrad.rl.collection import rollout
from pgrad.rl.observations.frames import NextFrames, page_array, writable_alias
from pgrad_app.distributed import merge

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


class _Ends(ImageEnv):
    """Episodes ended by termination every ``term`` steps (0: never) and by truncation after
    ``length``."""

    def __init__(self, term: int, length: int, vector: int):
        super().__init__((6, 5, 2), np.uint8, actions=3, length=length, vector=vector)
        self.term = term

    def step(self, action):
        obs, reward, _, trunc, info = super().step(action)
        term = self.term > 0 and self.t % self.term == 0
        return obs, reward, term, trunc and not term, info


def _ends_collector(vector: int) -> rollout.Collector:
    """Three envs: truncated every 3 steps, terminated every 2, never ended (in a rollout of
    6 steps: ends at t = 1, 2, 3 and, both kinds and two envs at once, at the last row)."""
    envs = gym.vector.SyncVectorEnv(
        [lambda: _Ends(0, 3, vector), lambda: _Ends(2, 99, vector), lambda: _Ends(0, 99, vector)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    col = rollout.Collector(envs, "ends")
    col.reset(seed=4)
    return col


@pytest.mark.parametrize("vector", [0, 2])
def test_next_observations_stored_once_equal_the_whole_ones(vector):
    """The compact form (``[T + 1, B, ...]`` frames + final frames) gives the same
    next_observations as stacking every step's, with episodes ended by termination and
    truncation mid-rollout, in several envs at once and at the last row (plain and Dict)."""
    fast, plain = _ends_collector(vector), _ends_collector(vector)
    fast_fn, plain_fn = _policy(0), _policy(0)
    for _ in range(2):
        traj, _ = fast.collect(fast_fn, 6)
        ref = plain._trajectory([plain._step(plain_fn)[0] for _ in range(6)], None)
        nf = traj.next_frames
        assert nf is not None and nf.frames[0].shape == (7, 3, 6, 5, 2)
        assert_same_trajectory(traj, ref)  # next_observations materialised from the compact form
        done = traj.terminated + traj.truncated
        assert done[-1, 0] and done[-1, 1] and traj.terminated.any() and traj.truncated.any()
        assert [tuple(i) for i in nf.index] == [tuple(i) for i in np.argwhere(done > 0)]
        image = traj.observations[0] if vector else traj.observations
        assert np.shares_memory(image, nf.frames[0])  # observations are the buffer's rows
        np.testing.assert_array_equal(  # row T: the observation the next rollout starts from
            nf.frames[0][-1], fast.layout.split(fast._raw_obs)[0])
        # from whole arrays: row T is the last next observation, so no finals of the last row
        compact = NextFrames.of(traj.observations, traj.next_observations, fast.layout)
        np.testing.assert_array_equal(compact.index, nf.index[nf.index[:, 0] < 5])
        for a, b in zip(tf.nest.flatten(compact.full()), tf.nest.flatten(ref.next_observations)):
            np.testing.assert_array_equal(a, b)
    fast.close()
    plain.close()


def test_pickled_trajectory_carries_each_frame_once():
    """A Ray message (pickle) of a compact trajectory holds each frame once, and unpickles to
    the same trajectory with observations that are views of its frames."""
    col = _ends_collector(2)
    traj, _ = col.collect(_policy(1), 6)
    data = pickle.dumps(traj)
    frames = sum(f.nbytes for f in traj.next_frames.frames)
    assert len(data) < frames + 2 * traj.observations[0].nbytes // 6 + 4096
    back = pickle.loads(data)
    assert_same_trajectory(back, traj)
    assert back.next_frames is not None
    assert np.shares_memory(back.observations[0], back.next_frames.frames[0])
    col.close()


def test_workers_merge_compact_pieces_into_the_merge_of_whole_ones():
    """Two workers' compact pieces merge (env columns side by side) into the compact form of
    what merging their whole arrays gives."""
    cols = [_ends_collector(2), _ends_collector(2)]
    pieces = [c.collect(_policy(i), 6)[0] for i, c in enumerate(cols)]
    merged = merge.merge_trajectories(pieces)
    whole = merge.merge_trajectories([p._replace(next_observations=p.next_observations)
                                 for p in pieces])
    assert merged.next_frames is not None and whole.next_frames is None
    assert_same_trajectory(merged, whole)
    assert np.shares_memory(merged.observations[0], merged.next_frames.frames[0])
    for c in cols:
        c.close()
