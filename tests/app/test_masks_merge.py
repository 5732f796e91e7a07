"""Rollout workers' pieces with action masks merge into one [T, B, n] mask (padding: all legal)."""

import numpy as np

from pgrad.rl.collection.rollout import Trajectory
from pgrad_app.distributed import merge


def _piece(t, b, n=4, mask=None, seed=0):
    rng = np.random.default_rng(seed)
    zeros = np.zeros((t, b), np.float32)
    legal = rng.random((t, b, n)) < 0.5
    legal[..., 0] = True
    return Trajectory(np.zeros((t, b, 2), np.float32), np.zeros((t, b), np.int32), zeros, zeros,
                      zeros, zeros, None, np.zeros((t, b, 2), np.float32), mask, legal)


def test_action_masks_merge_in_env_order_and_padding_rows_allow_everything():
    a, b = _piece(3, 2, mask=np.ones((3, 2), np.float32)), _piece(5, 1, seed=1)
    out = merge.merge_trajectories([a, b])
    assert out.action_mask.shape == (5, 3, 4) and out.action_mask.dtype == bool
    np.testing.assert_array_equal(out.action_mask[:3, :2], a.action_mask)
    np.testing.assert_array_equal(out.action_mask[:, 2:], b.action_mask)
    assert out.action_mask[3:, :2].all()  # padded (masked-out) rows: every action legal
    assert out.mask[3:, :2].sum() == 0
    assert merge.merge_trajectories([_piece(2, 1)._replace(action_mask=None)]).action_mask is None
