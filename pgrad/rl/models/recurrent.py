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
#: The longest sequence :meth:`RecurrentCore.sequence` unrolls in the graph (a longer one, or a
#: length known only as a tensor, steps in a ``tf.scan``). Unrolled, rl-zoo's CartPoleNoVel
#: update (two cores over 8 x 32 steps, 20 epochs) takes ~0.55x the CPU time of the loop, for
#: ~4 s more tracing once (docs/performance.md, "Recurrent PPO's speed").
UNROLL_MAX = 64


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

    def _unrolled(self, gx: tf.Tensor, keep: tf.Tensor, state: tf.Tensor, steps: int
                  ) -> tuple[tf.Tensor, tf.Tensor]:
        """``steps`` steps unrolled in the graph: ``(gx [B, steps, G], keep [B, steps, 1],
        state [B, S])`` -> ``(h [B, steps, units], states [B, steps, S])``."""
        gx_t, keep_t = tf.unstack(gx, steps, axis=1), tf.unstack(keep, steps, axis=1)
        hs, states = [], []
        for t in range(steps):
            h, state = self._step_from(gx_t[t], state * keep_t[t])
            hs.append(h)
            states.append(state)
        return tf.stack(hs, 1), tf.stack(states, 1)

    @property
    def state_size(self) -> int:
        """``S``: the width of one env's state."""
        return 2 * self.units if self.kind == "lstm" else self.units

    def step(self, x: tf.Tensor, state: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """One step: ``([N, in], [N, S]) -> (h' [N, units], state' [N, S])``."""
        return self._step_from(tf.matmul(x, self.kernel) + self.bias, state)

    def _step_from(self, gx: tf.Tensor, state: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """One step from the input's gate pre-activations ``gx = x W + b`` ``[N, gates units]``
        (computed for every step of a sequence at once by :meth:`sequence`)."""
        u = self.units
        h = state[:, :u]
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

        The input projection ``x W + b`` runs once over all ``B L`` rows (one matmul, and one in
        the backward pass); only the recurrent part steps through time: unrolled in the graph
        when ``length`` is a Python int up to :data:`UNROLL_MAX` (a ``tf.scan``'s loop and its
        gradient's stacks cost more than the small steps themselves), else in a ``tf.scan``.
        Same maths as :meth:`step` applied step by step (tested against that loop).

        Args:
          x: ``[B L, in]`` features; episode_starts: ``[B L]`` (1: reset before this step);
          state0: ``[B, S]`` each sequence's state before its first step; length: ``L``.

        Returns:
          ``(h [B L, units], states [B L, S])``: the output and the state after each step.
        """
        gates = self.kernel.shape[1]
        gx = tf.matmul(tf.reshape(x, [-1, self.input_dim]), self.kernel) + self.bias  # [B L, G]
        gx = tf.reshape(gx, [-1, length, gates])  # [B, L, G]
        keep = 1.0 - tf.reshape(tf.cast(episode_starts, gx.dtype), [-1, length, 1])  # [B, L, 1]
        state = tf.cast(state0, gx.dtype)  # [B, S]
        if isinstance(length, (int, np.integer)) and length <= UNROLL_MAX:
            hs, states = self._unrolled(gx, keep, state, int(length))  # [B, L, ...]
        else:
            def body(carry, inputs):
                g_t, keep_t = inputs
                return self._step_from(g_t, carry[1] * keep_t)

            h0 = tf.zeros([tf.shape(state0)[0], self.units], gx.dtype)
            hs, states = tf.scan(body, (tf.transpose(gx, [1, 0, 2]),
                                        tf.transpose(keep, [1, 0, 2])),
                                 initializer=(h0, state))  # [L, B, ...]
            hs, states = tf.transpose(hs, [1, 0, 2]), tf.transpose(states, [1, 0, 2])
        return tf.reshape(hs, [-1, self.units]), tf.reshape(states, [-1, self.state_size])


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
