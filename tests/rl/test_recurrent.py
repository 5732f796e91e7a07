"""Recurrent cores: the numpy mirror, resets at episode starts, and per-step gradients through
time (every engine path) against ``tape.jacobian``."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import pgrad
from pgrad.core import per_step
from pgrad.rl.models import recurrent

L, B, D = 4, 3, 3  # sequence length, sequences, observation width


def _core(kind, units=6):
    return recurrent.RecurrentCore(kind, units, D, seed=1)


def _batch(units, kind, seed=0):
    rng = np.random.default_rng(seed)
    size = 2 * units if kind == "lstm" else units
    x = rng.standard_normal((B * L, D)).astype(np.float32)
    starts = np.zeros((B, L), np.float32)
    starts[0, 2] = starts[2, 1] = starts[2, 3] = 1.0  # episode ends inside the sequences
    starts[1, 0] = 1.0  # and one at a sequence's first step (its stored state is dropped)
    state0 = rng.standard_normal((B, size)).astype(np.float32)
    return x, starts.ravel(), state0


@pytest.mark.parametrize("kind", recurrent.KINDS)
def test_numpy_step_is_the_tensorflow_step(kind):
    core = _core(kind)
    x, _, state0 = _batch(6, kind)
    h, state = core.step(tf.constant(x[:B]), tf.constant(state0))
    weights = tuple(v.numpy() for v in (core.kernel, core.recurrent_kernel, core.bias,
                                        core.recurrent_bias))
    h_np, state_np = recurrent.numpy_step(kind, weights, x[:B], state0)
    np.testing.assert_allclose(h_np, h.numpy(), atol=1e-6)
    np.testing.assert_allclose(state_np, state.numpy(), atol=1e-6)


@pytest.mark.parametrize("kind", recurrent.KINDS)
def test_sequence_resets_where_an_episode_starts(kind):
    """Each step is the core stepped one row at a time, the state zeroed before a start."""
    core = _core(kind)
    x, starts, state0 = _batch(6, kind)
    h, states = core.sequence(tf.constant(x), tf.constant(starts), tf.constant(state0), L)
    for b in range(B):
        state = state0[b: b + 1]
        for t in range(L):
            row = b * L + t
            if starts[row]:
                state = np.zeros_like(state)
            out, state = core.step(tf.constant(x[row: row + 1]), tf.constant(state))
            state = state.numpy()
            np.testing.assert_allclose(h.numpy()[row], out.numpy()[0], atol=1e-6)
            np.testing.assert_allclose(states.numpy()[row], state[0], atol=1e-6)


@pytest.mark.parametrize("kind", recurrent.KINDS)
def test_pytorch_init_without_ortho_init(kind):
    """ortho_init=False: every kernel and bias uniform in +-1/sqrt(units), as nn.LSTM / nn.GRU
    (sb3-contrib's core); ortho_init=True: orthogonal kernels, the LSTM's forget bias at 1."""
    units = 16
    core = recurrent.RecurrentCore(kind, units, D, seed=3, ortho_init=False)
    k = 1.0 / np.sqrt(units)
    weights = [v.numpy() for v in (core.kernel, core.recurrent_kernel, core.bias,
                                   core.recurrent_bias)]
    for w in weights:
        assert np.abs(w).max() <= k and np.abs(w).max() > 0.8 * k
        assert abs(w.std() - k / np.sqrt(3.0)) < 0.25 * k  # a uniform's spread, not a constant
    assert not np.allclose(weights[2], weights[3])  # seeded apart
    core = recurrent.RecurrentCore(kind, units, D, seed=3)
    u = core.recurrent_kernel.numpy()  # [units, gates units]: orthonormal rows
    np.testing.assert_allclose(u @ u.T, np.eye(units), atol=1e-5)
    forget = np.zeros_like(core.bias.numpy())
    if kind == "lstm":
        forget[units: 2 * units] = 1.0
    np.testing.assert_array_equal(core.bias.numpy(), forget)


@pytest.mark.parametrize("kind", recurrent.KINDS)
def test_core_is_pytorchs_lstm_and_gru(kind):
    """The same weights in torch.nn.LSTM / nn.GRU give the same outputs over a sequence with
    resets (torch's layout, so sb3-contrib's): weight_ih = kernel^T, weight_hh = U^T."""
    torch = pytest.importorskip("torch")
    units = 5
    core = recurrent.RecurrentCore(kind, units, D, seed=2, ortho_init=False)
    x, starts, state0 = _batch(units, kind)
    h, _ = core.sequence(tf.constant(x), tf.constant(starts), tf.constant(state0), L)
    cls = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
    ref = cls(D, units)
    with torch.no_grad():
        for name, v in (("weight_ih_l0", core.kernel.numpy().T),
                        ("weight_hh_l0", core.recurrent_kernel.numpy().T),
                        ("bias_ih_l0", core.bias.numpy()),
                        ("bias_hh_l0", core.recurrent_bias.numpy())):
            getattr(ref, name).copy_(torch.from_numpy(np.ascontiguousarray(v)))
        for b in range(B):
            state = torch.from_numpy(state0[b: b + 1])[None]  # [1, 1, S]
            for t in range(L):
                row = b * L + t
                state = state * (1.0 - float(starts[row]))  # sb3-contrib's reset
                split = ((state[..., :units].contiguous(), state[..., units:].contiguous())
                         if kind == "lstm" else state)
                out, new = ref(torch.from_numpy(x[row: row + 1])[None], split)
                state = torch.cat(new, -1) if kind == "lstm" else new
                np.testing.assert_allclose(out[0, 0].numpy(), h.numpy()[row], atol=1e-5)


def _policy(kind):
    core = _core(kind)
    head = keras.layers.Dense(3, name="head")
    head.build((None, core.units))
    variables = core.trainable_variables + head.trainable_variables
    x, starts, state0 = _batch(core.units, kind)
    actions = np.random.default_rng(1).integers(0, 3, B * L).astype(np.int32)
    rows0 = np.repeat(state0, L, axis=0)  # each row carries its sequence's first state

    def log_prob_fn(o, s, s0, a):
        h, _ = core.sequence(o, s, tf.reshape(s0, [-1, L, s0.shape[-1]])[:, 0], L)
        return -tf.nn.sparse_softmax_cross_entropy_with_logits(a, head(h))

    args = tuple(tf.constant(v) for v in (x, starts, rows0, actions))
    return log_prob_fn, variables, args


def _reference(log_prob_fn, variables, args):
    # over the batched output: every row a backward pass through all rows
    with tf.GradientTape(persistent=True) as tape:
        out = log_prob_fn(*args)
    return [j.numpy() for j in tape.jacobian(out, variables, experimental_use_pfor=False)]


@pytest.mark.parametrize("kind", recurrent.KINDS)
def test_per_step_grads_through_time_are_the_jacobian(kind):
    """Row t = d log pi(a_t | o_1..t) / d theta through the whole prefix, with episode
    boundaries inside the sequences; norms too. (Eager: building the graph of a jacobian
    through tf.scan takes minutes on a loaded machine; the agents' tests run it compiled.)"""
    fn, variables, args = _policy(kind)
    want = _reference(fn, variables, args)
    got = per_step.per_step_grads(fn, variables, *args, sequence_length=L, chunk_size=2 * L)
    for w, g in zip(want, got):  # (in chunks of whole sequences: 2 and 1)
        np.testing.assert_allclose(g.numpy(), w, atol=1e-5)
    # a step depends on earlier steps of its sequence: the gradient is not the one-row one
    assert np.abs(want[0][1]).max() > 0
    norms = per_step.per_step_norms(fn, variables, *args, sequence_length=L)
    flat = np.concatenate([w.reshape(B * L, -1) for w in want], 1)
    np.testing.assert_allclose(norms.numpy(), np.linalg.norm(flat, axis=1), rtol=1e-5)


def _clipped_mean(rows, adv, max_norm):
    """The chain weight_by(advantages), clip_per_step(max_norm), mean_steps() by hand on the
    jacobian's rows ``[B L, *shape]``."""
    weighted = [r * adv.reshape(-1, *[1] * (r.ndim - 1)) for r in rows]
    norm = np.linalg.norm(np.concatenate([w.reshape(B * L, -1) for w in weighted], 1), axis=1)
    scale = np.minimum(1.0, max_norm / np.maximum(norm, 1e-12))
    return [(w * scale.reshape(-1, *[1] * (w.ndim - 1))).mean(0) for w in weighted]


@pytest.mark.parametrize("path", ["fused", "full"])
def test_every_engine_path_is_exact_for_a_recurrent_policy(path):
    """Fused (one backward pass through time; with per-step norms for clipping) and full
    (materialised rows) equal the chain applied by hand to the jacobian's rows."""
    fn, variables, args = _policy("lstm")
    rows = _reference(fn, variables, args)
    adv = np.random.default_rng(2).standard_normal(B * L).astype(np.float32)
    chain = pgrad.chain(pgrad.weight_by("advantages"), pgrad.clip_per_step(0.05),
                        pgrad.mean_steps())
    out = pgrad.run_engine(chain, chain.init(variables), fn, variables, args,
                           {"advantages": tf.constant(adv)}, path=path, sequence_length=L)
    for g, want in zip(out.grads, _clipped_mean(rows, adv, 0.05)):
        np.testing.assert_allclose(g.numpy(), want, atol=1e-6)
    assert float(out.metrics["path_fused"]) == (1.0 if path == "fused" else 0.0)


def test_fused_path_without_norms_is_one_weighted_backward_pass():
    fn, variables, args = _policy("gru")
    rows = _reference(fn, variables, args)
    adv = np.linspace(-1, 1, B * L).astype(np.float32)
    chain = pgrad.chain(pgrad.weight_by("advantages"), pgrad.sum_steps())
    out = pgrad.run_engine(chain, chain.init(variables), fn, variables, args,
                           {"advantages": tf.constant(adv)}, path="fused", sequence_length=L)
    for g, r in zip(out.grads, rows):
        np.testing.assert_allclose(g.numpy(), np.tensordot(adv, r, 1), atol=1e-5)


def test_per_step_grads_through_a_cnn_and_the_core_are_the_jacobian():
    """encoder (MinAtar's CNN on bool planes) -> LSTM -> head: row t of every engine path is
    d log pi(a_t | o_1..t) / d theta through the CNN and the whole prefix, with episode
    boundaries inside the sequences (the conv layers untapped: the generic path)."""
    import gymnasium as gym

    from pgrad.rl.models import encoders
    from pgrad.rl.models.networks import actor_critic
    from pgrad.rl.observations import spaces

    layout = spaces.obs_layout(gym.spaces.Box(0, 1, (6, 6, 2), np.bool_))
    net = actor_critic(layout, lambda latent: pgrad.make_head(gym.spaces.Discrete(3)),
                       encoders.resolve("minatar_cnn", layout), seed=2, recurrent="lstm",
                       core_units=4)
    variables = net.policy_variables
    assert any(len(v.shape) == 4 for v in variables)  # a conv kernel among them
    rng = np.random.default_rng(5)
    _, starts, _ = _batch(4, "lstm")
    obs = rng.random((B * L, 6, 6, 2)) < 0.3
    rows0 = np.repeat(rng.standard_normal((B, 8)).astype(np.float32), L, axis=0)
    actions = rng.integers(0, 3, B * L).astype(np.int32)

    def fn(o, s, s0, a):
        params = net.params_sequence(o, s, tf.reshape(s0, [-1, L, 8])[:, 0], L)
        return net.head.distribution(params).log_prob(a)

    args = tuple(tf.constant(v) for v in (obs, starts, rows0, actions))
    want = _reference(fn, variables, args)
    got = per_step.per_step_grads(fn, variables, *args, sequence_length=L)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g.numpy(), w, atol=1e-5)
    adv = rng.standard_normal(B * L).astype(np.float32)
    chain = pgrad.chain(pgrad.weight_by("advantages"), pgrad.clip_per_step(0.05),
                        pgrad.mean_steps())
    out = pgrad.run_engine(chain, chain.init(variables), fn, variables, args,
                           {"advantages": tf.constant(adv)}, path="fused", sequence_length=L)
    for g, w in zip(out.grads, _clipped_mean(want, adv, 0.05)):
        np.testing.assert_allclose(g.numpy(), w, atol=1e-6)
