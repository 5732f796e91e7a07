"""Process-supervised GRPO: a token task's dense rewards, and the process advantages against
a plain Python loop."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

import agents
from agents.update.targets import GroupTargets
from pgrad.rl.advantages.groups import process_advantages
from pgrad.rl.tokens import register

register()


def loop_process(rewards, live, G, scale="group", eps=1e-4):
    """DeepSeekMath's process supervision by loops: normalise within the group's live steps,
    then sum each completion's normalised rewards from each step on."""
    T, B = rewards.shape
    adv = np.zeros((T, B))
    every = [rewards[t, b] for t in range(T) for b in range(B) if live[t, b]]
    for g in range(B // G):
        cols = range(g * G, (g + 1) * G)
        steps = [rewards[t, b] for b in cols for t in range(T) if live[t, b]]
        mean = np.mean(steps)
        std = {"group": np.std(steps, ddof=1), "batch": np.std(every, ddof=1), "none": None}[scale]
        for b in cols:
            for t in range(T):
                if not live[t, b]:
                    continue
                adv[t, b] = sum((rewards[u, b] - mean) / (1.0 if std is None else std + eps)
                                for u in range(t, T) if live[u, b])
    return adv


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_process_advantages_equal_a_python_loop(scale):
    rng = np.random.default_rng(0)
    T, B, G = 6, 8, 4
    rewards = rng.normal(size=(T, B)).astype(np.float32)
    live = np.zeros((T, B), np.float32)
    for b in range(B):
        live[:rng.integers(1, T + 1), b] = 1
    got = process_advantages(tf.constant(rewards), tf.constant(live), G, scale).numpy()
    np.testing.assert_allclose(got, loop_process(rewards, live, G, scale), rtol=1e-5, atol=1e-5)


def test_group_targets_with_process_supervision_use_each_steps_reward():
    rewards = np.array([[1, 0], [0, 1], [0, 0]], np.float32)  # [T=3, B=2]: equal totals
    done = np.array([[0, 0], [1, 1], [0, 0]], bool)
    zeros = tf.zeros((3, 2))
    outcome, *_ = GroupTargets(2)(tf.constant(rewards), tf.constant(done), tf.constant(done),
                                  zeros, zeros)
    process, _, extra = GroupTargets(2, supervision="process")(
        tf.constant(rewards), tf.constant(done), tf.constant(done), zeros, zeros)
    assert np.all(outcome.numpy() == 0)  # equal totals: no outcome signal
    # the token that earned (completion 1's second) is credited, the one that did not is not
    assert process.numpy()[1, 1] > 0 > process.numpy()[1, 0]
    np.testing.assert_array_equal(process.numpy()[2], [0, 0])  # after the end
    np.testing.assert_array_equal(extra["completion_mask"].numpy()[:, 0], [1, 1, 0])
    with pytest.raises(ValueError, match="supervision must be"):
        GroupTargets(2, "rloo", supervision="process")


def test_dense_rewards_pay_as_credit_accrues_and_sum_to_the_final_reward():
    dense = gym.make("pgrad/Reversal-v0", min_digits=4, max_digits=4, shaping=True,
                     dense_rewards=True)
    sparse = gym.make("pgrad/Reversal-v0", min_digits=4, max_digits=4, shaping=True)
    tok = dense.unwrapped.tokenizer
    for seed in range(5):
        _, info = dense.reset(seed=seed)
        sparse.reset(seed=seed)
        answer = info["prompt"][:-1][::-1]
        written = answer[:2] + ("0" if answer[2] != "0" else "1") + answer[3]
        paid, final = [], None
        for ch in [*written, None]:
            action = 1 if ch is None else tok.encode(ch)[0]  # 1: end of sequence
            _, r, term, _, info = dense.step(action)
            _, r_sparse, _, _, info_sparse = sparse.step(action)
            paid.append(r)
            final = r_sparse
            if term:
                break
        assert paid[:4] == pytest.approx([0.25, 0.25, 0.0, 0.25])
        assert sum(paid) == pytest.approx(final) == pytest.approx(0.75)
        assert info["is_success"] is info_sparse["is_success"] is False


def test_process_supervision_is_a_grpo_setting():
    cfg = agents.get("grpo").Config(supervision="process", num_envs=8, group_size=4)
    cfg.validate()
    with pytest.raises(ValueError, match="supervision must be 'outcome' or 'process'"):
        agents.get("grpo").Config(supervision="steps").validate()
    with pytest.raises(ValueError, match="supervision must be 'outcome'"):
        agents.get("rloo").Config(supervision="process").validate()
