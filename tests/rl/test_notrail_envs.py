"""MinAtar/Breakout-NoTrail-v1 (:mod:`pgrad.rl.envs.notrail`): Breakout's frame without the trail
plane, checked against the game's own full frame step by step."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import pgrad  # noqa: F401  (first: silences TensorFlow)
from pgrad.rl.envs import notrail as notrail_envs
from pgrad.rl.envs import vector as envs

pytest.importorskip("minatar")

ID = "MinAtar/Breakout-NoTrail-v1"


def _unregister(monkeypatch, prefix: str):
    for key in [k for k in gym.registry if k.startswith(prefix)]:
        monkeypatch.delitem(gym.registry, key)


def test_registers_on_demand_with_minatar_and_after_it(monkeypatch):
    _unregister(monkeypatch, "MinAtar/")
    envs.ensure_registered(ID)  # registers MinAtar's own ids too (its make needs the base)
    env = gym.make(ID)
    assert "MinAtar/Breakout-v1" in gym.registry
    env.close()
    _unregister(monkeypatch, "MinAtar/")
    envs.ensure_registered("MinAtar/Breakout-v1")
    envs.ensure_registered(ID)  # MinAtar's ids already there: still registered
    assert ID in gym.registry


def test_vector_env_shape_dtype_and_actions():
    v = envs.make_vec_env(ID, 2)
    space = v.single_observation_space
    assert space.shape == (10, 10, 3) and space.dtype == bool
    assert v.single_action_space == gym.spaces.Discrete(3)  # Breakout-v1's minimal action set
    obs, _ = v.reset(seed=0)
    assert obs.shape == (2, 10, 10, 3) and obs.dtype == bool and space.contains(obs[0])
    v.close()


def test_the_dropped_plane_is_the_trail_and_the_rest_is_the_full_frame():
    # minatar/environments/breakout.py: channels paddle 0, ball 1, trail 2, brick 3
    env = gym.make(ID)
    game = env.unwrapped.game  # minatar.Environment: state() is the full 10 x 10 x 4 frame
    assert game.env.channels == {"paddle": 0, "ball": 1, "trail": 2, "brick": 3}
    obs, _ = env.reset(seed=3)
    ball_before, checked, moved, episodes = None, 0, 0, 0
    for _ in range(300):
        full = game.state()
        np.testing.assert_array_equal(obs, full[..., [0, 1, 3]])
        paddle, ball, bricks = obs[..., 0], obs[..., 1], obs[..., 2]
        assert paddle.sum() == 1 and paddle[9].sum() == 1 and ball.sum() == 1
        assert bricks.sum() == game.env.brick_map.sum()
        if ball_before is not None:  # the trail is where the ball was one step earlier
            np.testing.assert_array_equal(full[..., 2], ball_before)
            checked += 1
            moved += int(not np.array_equal(ball_before, ball))
        ball_before = ball.copy()
        # follow the ball (minimal actions: none, left, right) so that episodes last
        ball_x, paddle_x = np.argmax(ball.any(0)), np.argmax(paddle[9])
        obs, _, terminated, truncated, _ = env.step(int(np.sign(ball_x - paddle_x)) % 3)
        if terminated or truncated:
            obs, _ = env.reset()
            ball_before, episodes = None, episodes + 1
    assert checked > 200 and episodes > 1  # frames after resets too
    assert moved > 0.9 * checked  # the trail (the direction) is seldom where the ball is
    env.close()


def test_same_game_as_breakout_given_the_same_seed_and_actions():
    a, b = gym.make(ID), gym.make("MinAtar/Breakout-v1")
    oa, _ = a.reset(seed=7)
    ob, _ = b.reset(seed=7)
    for t in range(100):
        np.testing.assert_array_equal(oa, ob[..., [0, 1, 3]])
        action = t % 3
        oa, ra, ta, _, _ = a.step(action)
        ob, rb, tb, _, _ = b.step(action)
        assert (ra, ta) == (rb, tb)
        if ta:
            oa, _ = a.reset(seed=t)
            ob, _ = b.reset(seed=t)
    a.close()
    b.close()


def test_drop_channel_rejects_what_it_cannot_drop():
    flat = gym.make("CartPole-v1")
    with pytest.raises(ValueError, match=r"\[H, W, C\] Box"):
        notrail_envs.DropChannel(flat, 0)
    image = gym.make("MinAtar/Breakout-v1")
    with pytest.raises(ValueError, match=r"channel 4 is not in \[0, 4\)"):
        notrail_envs.DropChannel(image, 4)
    flat.close()
    image.close()


def test_tuned_entry_is_the_minatar_one_plus_the_core():
    """The benchmark compares the entry with and without the core; nothing else may differ."""
    from pgrad_app.config import tuned

    own, _ = tuned.tuned("ppo", ID)
    family = tuned.load_table("ppo")["minatar"]
    assert tuned.entry_key("ppo", ID) == ID and own["recurrent"] == "lstm"
    rest = {k: v for k, v in own.items() if k not in ("recurrent", "lstm_units")}
    assert rest == {k: v for k, v in family.items() if k != tuned.BUDGET_KEY}
