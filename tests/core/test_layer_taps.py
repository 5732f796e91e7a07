"""Embedding and LayerNormalization taps (pgrad.core.layer_taps) against tape.jacobian.

Per-step gradients and norms, the engine's fused and full paths, eager and in tf.function with
static and dynamic T, and the cases left to the generic path.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from policies import (
    KerasPolicy,
    assert_all_close,
    jacobian_reference,
    reference_norms,
    reference_update,
)

import pgrad
from pgrad.core import layer_taps, taps
from pgrad.core import per_step as per_step_lib

VOCAB = 6


def token_policy(seq=5, **embedding):
    """ids [T, seq] -> Embedding -> Dense (on [T, seq, dim]) -> LayerNorm -> Flatten -> logits."""
    return KerasPolicy([keras.layers.Embedding(VOCAB, 4, **embedding),
                        keras.layers.Dense(5, activation="tanh"),
                        keras.layers.LayerNormalization(), keras.layers.Flatten()],
                       (seq,), kind="ids", vocab=VOCAB)


def single_id_policy():
    """ids [T] (one per step) -> Embedding [T, dim] -> Dense -> logits."""
    return KerasPolicy([keras.layers.Embedding(VOCAB, 4),
                        keras.layers.Dense(5, activation="tanh")], (), kind="ids", vocab=VOCAB)


def layer_norm_policy(shape=(3, 4), **kwargs):
    return KerasPolicy([keras.layers.Dense(4, activation="tanh"),
                        keras.layers.LayerNormalization(**kwargs), keras.layers.Flatten()],
                       shape)


LAYER_NORMS = {
    "last_axis_2d": {"shape": (4,)},
    "last_axis_3d": {},
    "axes_1_2": {"axis": [1, 2]},
    "middle_axis": {"axis": 1},
    "no_center": {"center": False},
    "no_scale": {"scale": False},
}


def assert_exact(p, obs, act):
    _, cap = taps.capture(p.log_prob, p.variables, (obs, act), obs.shape[0])
    assert all(cap.covered)
    want = jacobian_reference(p.log_prob, p.variables, obs, act)
    assert_all_close(pgrad.per_step_grads(p.log_prob, p.variables, obs, act), want)
    np.testing.assert_allclose(pgrad.per_step_norms(p.log_prob, p.variables, obs, act),
                               reference_norms(want), rtol=1e-4, atol=1e-6)


# --- the maths on hand-computed tensors ---------------------------------------------------------


def test_embedding_rows_and_norms_by_hand():
    """Step 0 looks up ids [1, 1, 2], step 1 ids [0, 2, 0]: repeated ids add their rows."""
    layer = keras.layers.Embedding(3, 1)
    layer.build()
    ids = tf.constant([[1, 1, 2], [0, 2, 0]])
    with tf.GradientTape() as tape, taps.recording(tape, layer.trainable_variables) as rec:
        layer(ids)
    (tap,) = rec.layers
    delta = tf.constant([[[1.0], [2.0], [4.0]], [[8.0], [16.0], [32.0]]])  # [2, 3, 1]
    rows = tap.rows("embeddings", delta, 2)[..., 0]  # [2, vocab]
    np.testing.assert_allclose(rows, [[0, 1 + 2, 4], [8 + 32, 0, 16]])
    np.testing.assert_allclose(tap.norms_sq("embeddings", delta, 2)[0],
                               [3.0**2 + 4**2, 40.0**2 + 16**2])
    np.testing.assert_allclose(tap.summed("embeddings", delta)[:, 0], [40, 3, 20])


def test_layer_norm_rows_by_hand():
    """gamma_t = sum over positions of delta_t * xhat_t; beta_t = sum of delta_t."""
    layer = keras.layers.LayerNormalization(epsilon=0.0)
    layer.build((None, 2, 2))
    x = tf.constant([[[1.0, 3.0], [0.0, 4.0]]])  # each row normalises to [-1, 1]
    with tf.GradientTape() as tape, taps.recording(tape, layer.trainable_variables) as rec:
        layer(x)
    (tap,) = rec.layers
    delta = tf.constant([[[1.0, 2.0], [3.0, 5.0]]])
    np.testing.assert_allclose(tap.rows("gamma", delta, 1), [[-1 - 3, 2 + 5]], rtol=1e-6)
    np.testing.assert_allclose(tap.rows("beta", delta, 1), [[4.0, 7.0]])


# --- per-step gradients and norms equal the jacobian --------------------------------------------


@pytest.mark.parametrize("make", [token_policy, single_id_policy], ids=["tokens", "single_id"])
def test_embedding_equals_jacobian(make):
    p = make()
    obs, act = p.batch(6)
    assert_exact(p, obs, act)


def test_negative_ids_wrap_as_keras_does():
    p = token_policy(seq=3)
    obs, act = p.batch(4)
    obs = obs - VOCAB  # -6..-1: the same rows, counted from the end
    assert_exact(p, obs, act)


def test_repeated_ids_in_one_step():
    p = token_policy(seq=7)
    obs = tf.constant([[1] * 7, [0, 1, 0, 1, 0, 1, 0], [5, 4, 3, 2, 1, 0, 5]], tf.int32)
    act = p.head(p.net(obs)).sample(seed=0)
    assert_exact(p, obs, act)


@pytest.mark.parametrize("name", sorted(LAYER_NORMS))
def test_layer_norm_equals_jacobian(name):
    p = layer_norm_policy(**LAYER_NORMS[name])
    obs, act = p.batch(5)
    assert_exact(p, obs, act)


@pytest.mark.parametrize("dynamic", [False, True])
def test_inside_tf_function(dynamic):
    p = token_policy()
    obs, act = p.batch(7)
    sig = [tf.TensorSpec([None, 5], tf.int32), tf.TensorSpec([None], act.dtype)]

    @tf.function(input_signature=sig if dynamic else None)
    def both(o, a):
        return (pgrad.per_step_grads(p.log_prob, p.variables, o, a),
                pgrad.per_step_norms(p.log_prob, p.variables, o, a))

    grads, norms = both(obs, act)
    want = jacobian_reference(p.log_prob, p.variables, obs, act)
    assert_all_close(grads, want)
    np.testing.assert_allclose(norms, reference_norms(want), rtol=1e-4, atol=1e-6)


# --- fallbacks ----------------------------------------------------------------------------------


def lora_embedding_policy():
    p = token_policy()
    p.net.layers[0].enable_lora(2)
    p.variables = p.net.trainable_variables
    return p


def rms_layer_norm_policy():
    return layer_norm_policy(rms_scaling=True)


@pytest.mark.filterwarnings("ignore:You passed `rms_scaling=True`")  # deprecated in Keras
@pytest.mark.parametrize("make", [lora_embedding_policy, rms_layer_norm_policy],
                         ids=["lora_embedding", "rms_scaling"])
def test_untapped_cases_are_generic_and_exact(make):
    p = make()
    obs, act = p.batch(4)
    _, cap = taps.capture(p.log_prob, p.variables, (obs, act), 4)
    assert not all(cap.covered) and any(cap.covered)
    want = jacobian_reference(p.log_prob, p.variables, obs, act)
    assert_all_close(pgrad.per_step_grads(p.log_prob, p.variables, obs, act), want)
    np.testing.assert_allclose(pgrad.per_step_norms(p.log_prob, p.variables, obs, act),
                               reference_norms(want), rtol=1e-4, atol=1e-6)


def test_embedding_shared_with_an_untapped_use_is_not_covered():
    p = single_id_policy()
    table = p.variables[0]

    def fn(obs, act):  # the table enters a second time, outside its layer
        return p.log_prob(obs, act) + tf.reduce_sum(table) * tf.cast(obs, tf.float32)

    obs, act = p.batch(5)
    _, cap = taps.capture(fn, p.variables, (obs, act), 5)
    assert cap.covered[0] is False and all(cap.covered[1:])
    assert_all_close(pgrad.per_step_grads(fn, p.variables, obs, act),
                     jacobian_reference(fn, p.variables, obs, act))


# --- the engine ---------------------------------------------------------------------------------


def chain(name, max_norm):
    if name == "weight_mean":
        return pgrad.chain(pgrad.weight_by("advantages"), pgrad.mean_steps())
    if name == "clip_mean":
        return pgrad.chain(pgrad.weight_by("advantages"), pgrad.clip_per_step(max_norm),
                           pgrad.mean_steps())
    return pgrad.chain(pgrad.weight_by("advantages"),
                       pgrad.stateless(lambda grads, **ctx: [g * g for g in grads]),
                       pgrad.mean_steps())


@pytest.mark.parametrize("name", ["weight_mean", "clip_mean", "stateless"])
@pytest.mark.parametrize("compiled", ["eager", "static", "dynamic"])
def test_engine_paths_equal_the_jacobian_reference(name, compiled):
    p = token_policy()
    t = 9
    obs, act = p.batch(t)
    adv = tf.constant(np.linspace(-2, 2, t), tf.float32)
    rows = jacobian_reference(p.log_prob, p.variables, obs, act)
    ch = chain(name, float(np.median(reference_norms(rows) * np.abs(adv))))
    want = reference_update(ch, p.variables, rows, {"advantages": adv})
    sig = [tf.TensorSpec([None, 5], tf.int32), tf.TensorSpec([None], act.dtype),
           tf.TensorSpec([None])]
    for path in ["fused", "full"] if pgrad.plan(ch) == "fused" else ["full"]:
        def f(o, a, w, path=path):
            return pgrad.policy_gradients(ch, ch.init(p.variables), p.log_prob, p.variables,
                                          (o, a), {"advantages": w}, path=path)[0]

        if compiled != "eager":
            f = tf.function(f, input_signature=sig if compiled == "dynamic" else None)
        assert_all_close(f(obs, act, adv), want, atol=1e-6)


def test_fused_clip_calls_no_materialiser(monkeypatch):
    def forbidden(*a, **k):
        raise AssertionError("per-step gradients materialised")

    p = token_policy()
    obs, act = p.batch(8)
    ctx = {"advantages": tf.constant(np.linspace(-2, 2, 8), tf.float32)}
    ch = chain("clip_mean", 0.3)
    want = pgrad.policy_gradients(ch, ch.init(p.variables), p.log_prob, p.variables, (obs, act),
                                  ctx, path="full")[0]
    for name in ("per_step_grads", "_generic_grads", "_generic_norms_sq", "_vectorized"):
        monkeypatch.setattr(per_step_lib, name, forbidden)
    monkeypatch.setattr(taps.Capture, "per_step_grads", forbidden)
    monkeypatch.setattr(layer_taps.EmbeddingTap, "rows", forbidden)  # no [T, vocab, dim]
    got = pgrad.policy_gradients(ch, ch.init(p.variables), p.log_prob, p.variables, (obs, act),
                                 ctx)[0]
    assert_all_close(got, want, atol=1e-6)
