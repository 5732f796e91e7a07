"""The recurrent core's fast sequence paths compute what stepping the core one step at a time does.

``RecurrentCore.sequence`` projects the inputs of all steps at once and unrolls short sequences
in the graph (``tf.scan`` for long ones or a length known only as a tensor). The reference is the
earlier implementation, kept here: ``tf.scan`` over :meth:`RecurrentCore.step` (the input
projection inside each step). Outputs, states, gradients, and one whole recurrent PPO update
(20 epochs of rl-zoo's CartPoleNoVel layout, shrunk) must agree to float32 round-off.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import agents
from pgrad.rl.models import recurrent

B, L, D = 3, 6, 4  # sequences, steps, observation width


def scan_reference(core, x, episode_starts, state0, length):
    """The earlier ``RecurrentCore.sequence``: ``tf.scan`` over ``core.step``."""
    x = tf.reshape(x, [-1, length, core.input_dim])  # [B, L, in]
    keep = 1.0 - tf.reshape(tf.cast(episode_starts, x.dtype), [-1, length, 1])  # [B, L, 1]

    def body(carry, inputs):
        x_t, keep_t = inputs
        return core.step(x_t, carry[1] * keep_t)

    h0 = tf.zeros([tf.shape(state0)[0], core.units], x.dtype)
    hs, states = tf.scan(body, (tf.transpose(x, [1, 0, 2]), tf.transpose(keep, [1, 0, 2])),
                         initializer=(h0, tf.cast(state0, x.dtype)))  # [L, B, ...]
    return (tf.reshape(tf.transpose(hs, [1, 0, 2]), [-1, core.units]),
            tf.reshape(tf.transpose(states, [1, 0, 2]), [-1, core.state_size]))


def _inputs(core, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B * L, D)).astype(np.float32)
    starts = np.zeros((B, L), np.float32)
    starts[0, 3] = starts[2, 1] = starts[2, 4] = starts[1, 0] = 1.0  # resets inside and at 0
    state0 = rng.standard_normal((B, core.state_size)).astype(np.float32)
    w = rng.standard_normal((B * L, core.units + core.state_size)).astype(np.float32)
    return [tf.constant(v) for v in (x, starts.ravel(), state0, w)]


def _loss_and_grads(core, sequence, length):
    """A traced ``(loss, grads)``: a weighted sum of every output and state, through
    ``sequence(core, x, starts, state0, length)`` (the gradients reach x and state0 too)."""

    @tf.function(autograph=False)
    def run(x, starts, state0, w):
        with tf.GradientTape() as tape:
            tape.watch([x, state0])
            h, states = sequence(core, x, starts, state0, length)
            loss = tf.reduce_sum(tf.concat([h, states], 1) * w)
        return (h, states), tape.gradient(loss, [*core.trainable_variables, x, state0])

    return run


def _fast(core, x, starts, state0, length):
    return core.sequence(x, starts, state0, length)


@pytest.mark.parametrize("kind", recurrent.KINDS)
@pytest.mark.parametrize("path", ["unrolled", "scan", "tensor_length"])
def test_sequence_paths_are_the_step_by_step_scan(kind, path, monkeypatch):
    core = recurrent.RecurrentCore(kind, 8, D, seed=3, ortho_init=False)
    args = _inputs(core)
    if path == "scan":
        monkeypatch.setattr(recurrent, "UNROLL_MAX", L - 1)  # one step too long to unroll
    length = tf.constant(L) if path == "tensor_length" else L
    (h, states), grads = _loss_and_grads(core, _fast, length)(*args)
    (h_ref, states_ref), grads_ref = _loss_and_grads(core, scan_reference, L)(*args)
    np.testing.assert_allclose(h.numpy(), h_ref.numpy(), atol=1e-6)
    np.testing.assert_allclose(states.numpy(), states_ref.numpy(), atol=1e-6)
    assert len(grads) == len(grads_ref) == 6
    for g, g_ref in zip(grads, grads_ref):
        scale = max(1.0, float(np.abs(g_ref.numpy()).max()))
        np.testing.assert_allclose(g.numpy(), g_ref.numpy(), atol=2e-6 * scale)


def test_unrolled_sequence_matches_numpy_steps_with_resets():
    """The unrolled path against the numpy mirror stepped row by row (state zeroed at starts)."""
    core = recurrent.RecurrentCore("lstm", 8, D, seed=4)
    x, starts, state0, _ = (a.numpy() for a in _inputs(core, seed=1))
    h, states = core.sequence(tf.constant(x), tf.constant(starts), tf.constant(state0), L)
    weights = tuple(v.numpy() for v in (core.kernel, core.recurrent_kernel, core.bias,
                                        core.recurrent_bias))
    for b in range(B):
        state = state0[b: b + 1]
        for t in range(L):
            row = b * L + t
            state = recurrent.reset_rows(state, starts[row: row + 1])
            out, state = recurrent.numpy_step("lstm", weights, x[row: row + 1], state)
            np.testing.assert_allclose(h.numpy()[row], out[0], atol=1e-6)
            np.testing.assert_allclose(states.numpy()[row], state[0], atol=1e-6)


def _trained_weights(monkeypatch, reference: bool) -> tuple[list, list, list]:
    """One recurrent PPO step (rollout + 20-epoch update) on CartPoleNoVel at rl-zoo's layout,
    shrunk (2 envs x 16 steps), with the fast sequence or the scan reference."""
    if reference:
        monkeypatch.setattr(recurrent.RecurrentCore, "sequence",
                            lambda self, *a: scan_reference(self, *a))
    agent = agents.make("ppo", "CartPoleNoVel-v1", seed=5, num_envs=2, n_steps=16,
                        minibatch_size=32, epochs=20, gamma=0.98, gae_lambda=0.8,
                        learning_rate=1e-3, ent_coef=0.0, normalize_obs=True,
                        normalize_reward=True, recurrent="lstm", lstm_units=16, hidden=[16],
                        activation="relu", ortho_init=False)
    try:
        before = [v.numpy() for v in agent.net.variables]
        metrics = [agent.step() for _ in range(2)]
        return before, [v.numpy() for v in agent.net.variables], metrics
    finally:
        agent.close()
        monkeypatch.undo()


def test_one_recurrent_ppo_update_is_unchanged(monkeypatch):
    """Two rollouts and their 20-epoch updates: the same actions (the same episodes) and the same
    weights after, with the fast sequence and with the step-by-step scan."""
    before, fast, fast_metrics = _trained_weights(monkeypatch, reference=False)
    _, ref, ref_metrics = _trained_weights(monkeypatch, reference=True)
    assert [m["episodes"] for m in fast_metrics] == [m["episodes"] for m in ref_metrics]
    assert len(fast) == len(ref) > 10
    for a, b in zip(fast, ref):
        np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-4)
    # the updates moved the weights: the comparison is not of two untouched nets
    assert sum(not np.allclose(a, b) for a, b in zip(fast, before)) >= 10
