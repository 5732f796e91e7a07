"""Process supervision's credit settings: the discount of the rewards-to-go (``gamma``) and the
per-position baseline, against plain Python loops."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from agents.algorithms.grpo import GRPOConfig
from agents.update.targets import GroupTargets
from pgrad.rl.advantages.groups import discounted_to_go, group_advantages, process_advantages


def loop_to_go(rewards, live, gamma):
    """``G[t, b] = sum_{u >= t, live} gamma^(u - t) r[u, b]`` by loops (0 off the live steps)."""
    T, B = rewards.shape
    out = np.zeros((T, B))
    for b in range(B):
        for t in range(T):
            if live[t, b]:
                out[t, b] = sum(gamma ** (u - t) * rewards[u, b] for u in range(t, T)
                                if live[u, b])
    return out


def loop_steps(rewards, live, G, scale, gamma, eps=1e-4):
    """DeepSeekMath's step normalisation, then discounted sums, by loops."""
    T, B = rewards.shape
    every = [rewards[t, b] for t in range(T) for b in range(B) if live[t, b]]
    norm = np.zeros((T, B))
    for g in range(B // G):
        cols = range(g * G, (g + 1) * G)
        steps = [rewards[t, b] for b in cols for t in range(T) if live[t, b]]
        std = {"group": np.std(steps, ddof=1), "batch": np.std(every, ddof=1), "none": None}[scale]
        for b in cols:
            for t in range(T):
                if live[t, b]:
                    norm[t, b] = (rewards[t, b] - np.mean(steps)) / (
                        1.0 if std is None else std + eps)
    return loop_to_go(norm, live, gamma)


def loop_position(rewards, live, G, scale, gamma, eps=1e-4):
    """Rewards-to-go minus the mean over the group's live completions at the same position,
    over their std (``"group"``) or the batch's std of every live rewards-to-go, by loops."""
    T, B = rewards.shape
    to_go = loop_to_go(rewards, live, gamma)
    every = [to_go[t, b] for t in range(T) for b in range(B) if live[t, b]]
    adv = np.zeros((T, B))
    for g in range(B // G):
        for t in range(T):
            cols = [b for b in range(g * G, (g + 1) * G) if live[t, b]]
            if len(cols) < 2:  # no std: advantage 0
                continue
            here = [to_go[t, b] for b in cols]
            std = {"group": np.std(here, ddof=1), "batch": np.std(every, ddof=1),
                   "none": None}[scale]
            for b in cols:
                adv[t, b] = (to_go[t, b] - np.mean(here)) / (1.0 if std is None else std + eps)
    return adv


def batch(seed=0, T=6, B=8):
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(T, B)).astype(np.float32)
    live = np.zeros((T, B), np.float32)
    for b in range(B):
        live[:rng.integers(1, T + 1), b] = 1
    return rewards, live


@pytest.mark.parametrize("gamma", [0.0, 0.5, 1.0])
def test_discounted_to_go_equals_a_python_loop(gamma):
    rewards, live = batch()
    got = discounted_to_go(tf.constant(rewards), tf.constant(live), gamma).numpy()
    np.testing.assert_allclose(got, loop_to_go(rewards, live, gamma), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("gamma", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("baseline", ["steps", "position"])
def test_process_advantages_equal_a_python_loop(baseline, gamma, scale):
    rewards, live = batch(seed=1)
    got = process_advantages(tf.constant(rewards), tf.constant(live), 4, scale, gamma=gamma,
                             baseline=baseline).numpy()
    loop = loop_position if baseline == "position" else loop_steps
    np.testing.assert_allclose(got, loop(rewards, live, 4, scale, gamma), rtol=1e-4, atol=1e-5)


def test_position_baseline_at_the_first_token_is_outcome_grpo():
    rewards, live = batch(seed=2)
    got = process_advantages(tf.constant(rewards), tf.constant(live), 4, "group", gamma=1.0,
                             baseline="position").numpy()[0]
    totals = (rewards * live).sum(axis=0)
    np.testing.assert_allclose(got, group_advantages(tf.constant(totals), 4).numpy(), rtol=1e-4,
                               atol=1e-5)


def test_gamma_zero_credits_each_token_with_its_own_reward_only():
    # two completions, equal rewards at t=0; completion 0 earns at t=1, completion 1 does not
    rewards = np.array([[1, 1], [1, 0], [5, 5]], np.float32)
    live = np.ones((3, 2), np.float32)
    adv = process_advantages(tf.constant(rewards), tf.constant(live), 2, "none", gamma=0.0,
                             baseline="position").numpy()
    np.testing.assert_allclose(adv, [[0, 0], [0.5, -0.5], [0, 0]])
    # gamma = 1 sends the later difference back to the first token
    adv1 = process_advantages(tf.constant(rewards), tf.constant(live), 2, "none", gamma=1.0,
                              baseline="position").numpy()
    np.testing.assert_allclose(adv1[0], [0.5, -0.5])


@pytest.mark.parametrize("kwargs, match", [
    ({"gamma": -0.1}, "gamma must be"), ({"gamma": 1.5}, "gamma must be"),
    ({"gamma": "0"}, "gamma must be"), ({"baseline": "mean"}, "baseline must be")])
def test_process_advantages_refuse_bad_settings(kwargs, match):
    rewards, live = batch()
    with pytest.raises(ValueError, match=match):
        process_advantages(tf.constant(rewards), tf.constant(live), 4, **kwargs)


def test_group_targets_pass_gamma_and_the_baseline():
    rewards, live = batch(seed=3)
    done = np.zeros_like(live, bool)
    for b in range(live.shape[1]):
        done[int(live[:, b].sum()) - 1, b] = True
    zeros = tf.zeros(rewards.shape)
    adv, *_ = GroupTargets(4, supervision="process", gamma=0.5, process_baseline="position")(
        tf.constant(rewards), tf.constant(done), tf.constant(np.zeros_like(done)), zeros, zeros)
    np.testing.assert_allclose(adv.numpy(), loop_position(rewards, live, 4, "group", 0.5),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("settings, match", [
    ({"gamma": 0.5}, "need supervision='process'"),
    ({"process_baseline": "position"}, "need supervision='process'"),
    ({"supervision": "process", "process_baseline": "tokens"}, "process_baseline must be"),
])
def test_config_refuses_credit_settings_it_cannot_use(settings, match):
    with pytest.raises(ValueError, match=match):
        GRPOConfig(**settings).validate()
