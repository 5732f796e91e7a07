"""Recurrent cores (LSTM, GRU) for actor-critic policies, in TensorFlow and in exact numpy.

A core sits between the observation features and the actor / critic MLPs (sb3-contrib's
``MlpLstmPolicy``: ``obs -> LSTM -> mlp -> heads``). Its state is one float32 array per env,
``[N, S]``: ``[h, c]`` (``S = 2 units``) for an LSTM, ``h`` (``S = units``) for a GRU; zeros at
an episode start.

Sequences are env-major: the ``N = B L`` rows of a batch are ``B`` sequences of ``L`` steps,
row ``b L + t`` is step ``t`` of sequence ``b``. ``episode_starts[b, t] = 1`` resets the state
to zeros *before* step ``t`` reads its observation (an episode ended at ``t - 1``, terminated or
truncated); the state a sequence starts from (``state0 [B, S]``) is the one stored at collection.

Gates follow PyTorch (so sb3-contrib's): LSTM ``i, f, g, o = split(x W + h U + b + b_h)``,
``c' = f c + i g``, ``h' = o tanh(c')``; GRU ``r, z`` from ``x W + h U + b + b_h``,
``n = tanh(x W_n + b_n + r (h U_n + b_hn))``, ``h' = (1 - z) n + z h``.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

KINDS = ("lstm", "gru")


class RecurrentCore(keras.layers.Layer):
    """An LSTM or GRU over ``[N, in]`` features (PyTorch's gate layout; see the module).

    Initialisation (seeded): ``ortho_init=True``, orthogonal input and recurrent kernels, zero
    biases with the LSTM's forget bias at 1 (Keras' ``unit_forget_bias``); ``ortho_init=False``,
    PyTorch's ``nn.LSTM`` / ``nn.GRU`` default, every kernel and bias uniform in
    ``+-1/sqrt(units)`` -- sb3-contrib's ``MlpLstmPolicy`` core, whose ``ortho_init`` never
    reaches the LSTM.
    """

    def __init__(self, kind: str, units: int, input_dim: int, seed: int = 0,
                 ortho_init: bool = True, **kwargs: Any):
        super().__init__(**kwargs)
        if kind not in KINDS:
            raise ValueError(f"recurrent must be one of {KINDS}; got {kind!r}.")
        self.kind, self.units, self.input_dim = kind, int(units), int(input_dim)
        gates = 4 if kind == "lstm" else 3
        width = gates * self.units
        inits: list[Any]
        if ortho_init:
            bias = np.zeros(width, np.float32)
            if kind == "lstm":
                bias[self.units: 2 * self.units] = 1.0
            inits = [keras.initializers.Orthogonal(seed=seed),
                     keras.initializers.Orthogonal(seed=seed + 1),
                     keras.initializers.Constant(bias), "zeros"]
        else:  # PyTorch: k = 1/sqrt(hidden_size) for weight_ih, weight_hh, bias_ih, bias_hh
            k = 1.0 / np.sqrt(self.units)
            inits = [keras.initializers.RandomUniform(-k, k, seed=seed + i) for i in range(4)]
        self.kernel = self.add_weight(shape=(self.input_dim, width), name="kernel",
                                      initializer=inits[0])
        self.recurrent_kernel = self.add_weight(shape=(self.units, width),
                                                name="recurrent_kernel", initializer=inits[1])
        self.bias = self.add_weight(shape=(width,), name="bias", initializer=inits[2])
        self.recurrent_bias = self.add_weight(shape=(width,), name="recurrent_bias",
                                              initializer=inits[3])
        self.built = True

    @property
    def state_size(self) -> int:
        """``S``: the width of one env's state."""
        return 2 * self.units if self.kind == "lstm" else self.units

    def step(self, x: tf.Tensor, state: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """One step: ``([N, in], [N, S]) -> (h' [N, units], state' [N, S])``."""
        u = self.units
        h = state[:, :u]
        gx = tf.matmul(x, self.kernel) + self.bias
        gh = tf.matmul(h, self.recurrent_kernel) + self.recurrent_bias
        if self.kind == "lstm":
            i, f, g, o = tf.split(gx + gh, 4, axis=1)
            c = tf.sigmoid(f) * state[:, u:] + tf.sigmoid(i) * tf.tanh(g)
            h = tf.sigmoid(o) * tf.tanh(c)
            return h, tf.concat([h, c], 1)
        xr, xz, xn = tf.split(gx, 3, axis=1)
        hr, hz, hn = tf.split(gh, 3, axis=1)
        r, z = tf.sigmoid(xr + hr), tf.sigmoid(xz + hz)
        n = tf.tanh(xn + r * hn)
        h = (1.0 - z) * n + z * h
        return h, h

    def sequence(self, x: tf.Tensor, episode_starts: tf.Tensor, state0: tf.Tensor,
                 length: int | tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """The core over env-major sequences.

        Args:
          x: ``[B L, in]`` features; episode_starts: ``[B L]`` (1: reset before this step);
          state0: ``[B, S]`` each sequence's state before its first step; length: ``L``.

        Returns:
          ``(h [B L, units], states [B L, S])``: the output and the state after each step.
        """
        x = tf.reshape(x, [-1, length, self.input_dim])  # [B, L, in]
        keep = 1.0 - tf.reshape(tf.cast(episode_starts, x.dtype), [-1, length, 1])  # [B, L, 1]

        def body(carry, inputs):
            x_t, keep_t = inputs
            _, state = carry
            return self.step(x_t, state * keep_t)

        h0 = tf.zeros([tf.shape(state0)[0], self.units], x.dtype)
        hs, states = tf.scan(body, (tf.transpose(x, [1, 0, 2]), tf.transpose(keep, [1, 0, 2])),
                             initializer=(h0, tf.cast(state0, x.dtype)))  # [L, B, ...]
        return (tf.reshape(tf.transpose(hs, [1, 0, 2]), [-1, self.units]),
                tf.reshape(tf.transpose(states, [1, 0, 2]), [-1, self.state_size]))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def numpy_step(kind: str, weights: tuple, x: np.ndarray, state: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`RecurrentCore.step` in numpy (``weights``: kernel, recurrent kernel, biases)."""
    kernel, rkernel, bias, rbias = weights
    u = rkernel.shape[0]
    h = state[:, :u]
    gx = x @ kernel + bias
    gh = h @ rkernel + rbias
    if kind == "lstm":
        i, f, g, o = np.split(gx + gh, 4, axis=1)
        c = _sigmoid(f) * state[:, u:] + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        return h, np.concatenate([h, c], 1).astype(np.float32)
    xr, xz, xn = np.split(gx, 3, axis=1)
    hr, hz, hn = np.split(gh, 3, axis=1)
    r, z = _sigmoid(xr + hr), _sigmoid(xz + hz)
    h = ((1.0 - z) * np.tanh(xn + r * hn) + z * h).astype(np.float32)
    return h, h


def reset_rows(state: np.ndarray, episode_start: Any) -> np.ndarray:
    """``state [N, S]`` with the rows where ``episode_start [N]`` is set zeroed (a copy)."""
    if episode_start is None:
        return state
    start = np.asarray(episode_start, bool).reshape(-1)
    if not start.any():
        return state
    out = np.array(state, np.float32, copy=True)
    out[start] = 0.0
    return out


def actor_step(net: Any, obs: Any, state: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """One acting step of a recurrent :class:`pgrad.rl.models.networks.ActorCritic`: its
    :meth:`~pgrad.rl.models.networks.ActorCritic.actor_step` (kept here for callers of this
    name)."""
    return net.actor_step(obs, state)
