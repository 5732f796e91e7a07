"""Evaluation reports the success rate of envs that say ``info["is_success"]``."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import tensorflow as tf

import pgrad
from pgrad.rl.acting.policy import Policy
from pgrad.rl.tokens import register

register()


def one_digit():
    return gym.make("pgrad/Reversal-v0", min_digits=1, max_digits=1)


class WritesToken(Policy):
    """Writes ``token`` then the end of sequence (id 1), on 1-digit reversal prompts
    ``"d="`` (two tokens): right exactly when ``token`` is the prompt's digit."""

    def __init__(self, token):
        env = one_digit()
        super().__init__(env.observation_space, env.action_space,
                         pgrad.make_head(env.action_space))
        self.token, self.vocab = token, int(env.action_space.n)

    def params(self, flat):
        written = tf.reduce_sum(tf.cast(flat > 0, tf.int32), axis=1) - 2
        choice = tf.where(written < 1, self.token, 1)
        return 50.0 * tf.one_hot(choice, self.vocab)


class Stands(Policy):
    def __init__(self):
        env = gym.make("CartPole-v1")
        super().__init__(env.observation_space, env.action_space,
                         pgrad.make_head(env.action_space))

    def params(self, flat):
        return tf.zeros([tf.shape(flat)[0], 2])


def test_success_rate_counts_is_success_and_is_absent_when_never_reported():
    # token ids 2..11 are the digits "0".."9": each prompt is won by exactly one policy
    results = [pgrad.evaluate(WritesToken(d), one_digit, episodes=40, seed=0)
               for d in range(2, 12)]
    rates = [r["success_rate"] for r in results]
    assert abs(sum(rates) - 1.0) < 1e-9 and max(rates) < 1.0
    assert all(r["success_rate"] == np.mean(r["returns"]) for r in results)  # 0/1 reward
    plain = pgrad.evaluate(Stands(), "CartPole-v1", episodes=3, seed=0)
    assert "success_rate" not in plain
