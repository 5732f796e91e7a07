"""Group-relative advantages on tiny hand-made rewards, against plain Python loops."""

import math
import statistics

import numpy as np
import pytest
import tensorflow as tf

from pgrad.rl.advantages.groups import (
    broadcast_to_tokens,
    group_advantages,
    rloo_advantages,
    token_context,
)

REWARDS = [1.0, 0.0, 0.5, 2.0, 2.0, 2.0, 0.3, -1.0, 1.3, 0.2, -1.0, 0.7]
G = 3


def loop_grpo(rewards, g, mode, eps=1e-4):
    out = []
    for start in range(0, len(rewards), g):
        group = rewards[start:start + g]
        mean = sum(group) / g
        if mode == "group":
            std = statistics.stdev(group)  # sample std, n - 1
        elif mode == "batch":
            std = statistics.stdev(rewards)
        out += [(r - mean) / (std + eps) if mode != "none" else r - mean for r in group]
    return out


def loop_rloo(rewards, g):
    out = []
    for start in range(0, len(rewards), g):
        group = rewards[start:start + g]
        out += [r - (sum(group) - r) / (g - 1) for r in group]
    return out


@pytest.mark.parametrize("mode", ["group", "batch", "none", True, False])
def test_group_advantages_against_a_loop(mode):
    name = {True: "group", False: "none"}.get(mode, mode)
    got = group_advantages(tf.constant(REWARDS), G, mode).numpy()
    np.testing.assert_allclose(got, loop_grpo(REWARDS, G, name), rtol=1e-5, atol=1e-6)


def test_a_group_of_equal_rewards_has_zero_advantage_and_std_uses_n_minus_one():
    got = group_advantages([2.0, 2.0, 2.0, 0.0, 1.0, 2.0], 3).numpy()
    assert np.all(got[:3] == 0.0)
    # Rewards 0, 1, 2: sample std 1, so (r - 1) / (1 + 1e-4).
    np.testing.assert_allclose(got[3:], np.array([-1.0, 0.0, 1.0]) / (1.0 + 1e-4), rtol=1e-6)


def test_a_nan_reward_is_left_out_and_gets_zero():
    r = [1.0, float("nan"), 3.0, 5.0]
    got = group_advantages(r, 2).numpy()
    # Group 0 has one scorable member: its std is undefined, every advantage 0 (as TRL).
    assert got.tolist()[:2] == [0.0, 0.0]
    np.testing.assert_allclose(group_advantages(r, 2, "none").numpy(), [0.0, 0.0, -1.0, 1.0])
    got = group_advantages([1.0, float("nan"), 3.0, 2.0, 0.0, 2.0], 3, "none").numpy()
    np.testing.assert_allclose(got, [-1.0, 0.0, 1.0, 2 / 3, -4 / 3, 2 / 3], rtol=1e-6)
    loo = rloo_advantages([1.0, float("nan"), 3.0, 2.0, 0.0, 2.0], 3).numpy()
    np.testing.assert_allclose(loo, [-2.0, 0.0, 2.0, 1.0, -2.0, 1.0], rtol=1e-6)


def test_rloo_against_a_loop_and_its_closed_form():
    got = rloo_advantages(REWARDS, G).numpy()
    np.testing.assert_allclose(got, loop_rloo(REWARDS, G), rtol=1e-5, atol=1e-6)
    centred = group_advantages(REWARDS, G, "none").numpy()
    np.testing.assert_allclose(got, G / (G - 1) * centred, rtol=1e-5, atol=1e-6)
    normed = rloo_advantages(REWARDS, G, normalize=True).numpy()
    want = np.array(loop_rloo(REWARDS, G))
    np.testing.assert_allclose(normed, (want - want.mean()) / (want.std(ddof=1) + 1e-4),
                               rtol=1e-5, atol=1e-6)
    assert np.all(rloo_advantages(REWARDS, 1).numpy() == 0.0)
    assert np.all(group_advantages(REWARDS, 1).numpy() == 0.0)


def test_group_size_must_divide_the_batch():
    with pytest.raises(ValueError, match="group size G=5 does not divide the batch N=12"):
        group_advantages(REWARDS, 5)
    with pytest.raises(ValueError, match="group size G=5 does not divide the batch N=12"):
        rloo_advantages(REWARDS, 5)
    with pytest.raises(ValueError, match="scale_rewards must be"):
        group_advantages(REWARDS, 3, "std")
    with pytest.raises(ValueError, match="rewards must be \\[N\\]"):
        group_advantages([[1.0, 2.0]], 1)


def test_tokens_and_the_flat_context():
    mask = np.array([[1, 1, 1], [1, 0, 0]], np.float32)
    adv = np.array([0.5, -2.0], np.float32)
    np.testing.assert_array_equal(broadcast_to_tokens(adv, mask).numpy(),
                                  [[0.5, 0.5, 0.5], [-2.0, 0.0, 0.0]])
    old = np.arange(6, dtype=np.float32).reshape(2, 3)
    ctx = token_context(mask, adv, behaviour_log_probs=old)
    assert ctx["sequence_ids"].numpy().tolist() == [0, 0, 0, 1, 1, 1]
    assert ctx["completion_mask"].numpy().tolist() == [1, 1, 1, 1, 0, 0]
    assert ctx["advantages"].numpy().tolist() == [0.5, 0.5, 0.5, -2.0, 0.0, 0.0]
    assert ctx["behaviour_log_probs"].numpy().tolist() == list(range(6))
    assert int(ctx["num_sequences"]) == 2
    with pytest.raises(ValueError, match="3 advantages for 2 completions"):
        broadcast_to_tokens([1.0, 2.0, 3.0], mask)
    with pytest.raises(ValueError, match="ref_log_probs must be \\[N, L\\]"):
        token_context(mask, ref_log_probs=np.zeros(6))
    assert not math.isnan(float(tf.reduce_sum(group_advantages(REWARDS, G))))
