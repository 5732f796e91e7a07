"""Convolution figures: per-step clipping and per-step gradients of a NatureCNN policy.

Shapes: NatureCNN (Conv2D 32 8x8 stride 4, 64 4x4 stride 2, 64 3x3 stride 1, relu, Flatten,
Dense 512 relu, Dense 6 logits; 1.69M parameters) with a Categorical head on T = 256 uint8
84x84x4 observations, scaled by 1/255 inside the policy. Every side is a ``tf.function``, timed
interleaved after a warm-up, as a ratio to one batched gradient of ``sum_t log pi_t``
(:func:`pgrad_app.perf.common.interleaved`).
"""

from __future__ import annotations

import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf

import pgrad
from pgrad.core import conv_taps, recording
from pgrad.core.per_step import num_params
from pgrad_app.perf.common import figure, interleaved, ms, ratio

STEPS = 256
ACTIONS = 6


class NatureCNN:
    """The policy and one batch of ``STEPS`` observations, actions and advantages."""

    def __init__(self, steps: int = STEPS, seed: int = 0):
        tf.keras.utils.set_random_seed(seed)
        layers = keras.layers
        self.net = keras.Sequential([
            layers.Input((84, 84, 4)),
            layers.Conv2D(32, 8, strides=4, activation="relu"),
            layers.Conv2D(64, 4, strides=2, activation="relu"),
            layers.Conv2D(64, 3, strides=1, activation="relu"),
            layers.Flatten(),
            layers.Dense(512, activation="relu"),
            layers.Dense(ACTIONS),
        ])
        self.head = pgrad.make_head(gym.spaces.Discrete(ACTIONS))
        self.variables = self.net.trainable_variables
        rng = np.random.default_rng(seed)
        self.obs = tf.constant(rng.integers(0, 256, (steps, 84, 84, 4)), tf.uint8)  # [T, 84, 84, 4]
        self.act = self.head(self.net(self._scale(self.obs))).sample(seed=seed)  # [T]
        self.adv = tf.constant(rng.normal(size=(steps,)), tf.float32)  # [T]
        self.steps = steps

    @staticmethod
    def _scale(obs):
        return tf.cast(obs, tf.float32) / 255.0

    def log_prob(self, obs, act):
        return self.head(self.net(self._scale(obs))).log_prob(act)  # [T]

    def norm_methods(self) -> list[str]:
        """How the engine's clip path takes each convolution's kernel norms (it keeps rows)."""
        with tf.GradientTape() as tape, recording.recording(tape, self.variables) as rec:
            self.net(self._scale(self.obs[:2]))
        return [t.method(self.steps, keep=True) + f" (L k c {t.costs()['materialise']:,}, "
                f"L^2 (k + c) {t.costs()['ghost']:,})" for t in rec.layers]


def conv_figures(repeats: int = 5) -> dict:
    """Per-step clipping and per-step gradients of NatureCNN at T = 256, against one batched
    gradient. Goals: clipping <= 1.5x, per-step gradients <= 2x."""
    s = NatureCNN()
    clip = pgrad.chain(pgrad.weight_by("advantages"), pgrad.clip_per_step(1.0),
                       pgrad.mean_steps())
    state = clip.init(s.variables)

    @tf.function
    def batched(obs, act):
        with tf.GradientTape() as tape:
            total = tf.reduce_sum(s.log_prob(obs, act))
        return tape.gradient(total, s.variables)

    def engine(obs, act, adv):
        return pgrad.policy_gradients(clip, state, s.log_prob, s.variables, (obs, act),
                                      {"advantages": adv})[0]

    def generic_engine(obs, act, adv):
        with pgrad.taps.disabled():
            return engine(obs, act, adv)

    def per_step(obs, act):
        return pgrad.per_step_grads(s.log_prob, s.variables, obs, act)

    def generic_per_step(obs, act):
        with pgrad.taps.disabled():
            return per_step(obs, act)

    size = num_params(s.variables)

    @tf.function
    def fill(x):  # the floor under per-step gradients: allocate and write [T, params]
        return tf.fill([s.steps, size], x)

    clip_fn, generic_clip_fn = tf.function(engine), tf.function(generic_engine)
    rows_fn, generic_rows_fn = tf.function(per_step), tf.function(generic_per_step)
    fns = {
        "batched": lambda: batched(s.obs, s.act),
        "clip": lambda: clip_fn(s.obs, s.act, s.adv),
        "per_step": lambda: rows_fn(s.obs, s.act),
        "generic_clip": lambda: generic_clip_fn(s.obs, s.act, s.adv),
        "generic_per_step": lambda: generic_rows_fn(s.obs, s.act),
        "fill": lambda: fill(tf.constant(1.0)),
    }
    times = interleaved(fns, repeats, warmup=2)
    clip_ratio = ratio(times, "clip", "batched")
    rows_ratio = ratio(times, "per_step", "batched")
    diff_clip = max(float(tf.reduce_max(tf.abs(a - b))) for a, b in
                    zip(fns["clip"](), fns["generic_clip"]()))
    diff_rows = max(float(tf.reduce_max(tf.abs(a - b))) for a, b in
                    zip(fns["per_step"](), fns["generic_per_step"]()))
    details = {
        "T": s.steps, "params": size, "ms": {k: ms(times, k) for k in fns},
        "clip_ratio": round(clip_ratio, 3), "per_step_ratio": round(rows_ratio, 3),
        "generic_clip_ratio": round(ratio(times, "generic_clip", "batched"), 3),
        "generic_per_step_ratio": round(ratio(times, "generic_per_step", "batched"), 3),
        "fill_T_by_params_ratio": round(ratio(times, "fill", "batched"), 3),
        "conv_norms": s.norm_methods(), "norm_method_setting": conv_taps.NORM_METHOD,
        "max_abs_diff_clip_vs_generic": diff_clip,
        "max_abs_diff_per_step_vs_generic": diff_rows, "repeats": repeats,
    }
    met = clip_ratio <= 1.5 and rows_ratio <= 2.0
    return figure("conv_ratios", clip_ratio, "clip <= 1.5x and per-step grads <= 2x", met,
                  **details)


if __name__ == "__main__":
    import json

    print(json.dumps(conv_figures(), indent=1))
