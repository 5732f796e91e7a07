"""Convolution taps (pgrad.core.conv_taps) against tape.jacobian.

Per-step gradients and norms (ghost and materialised) for Conv1D/Conv2D with same/valid/causal
padding, strides, dilation and groups, and Dense on [T, ..., in]; the engine's fused and full
paths on a small CNN policy; eager, tf.function with static and dynamic T; the fallbacks; and
that the fused clip path materialises no [T, params] tensor.
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
from pgrad.core import conv_taps, taps
from pgrad.core import per_step as per_step_lib

CONV2D = {
    "valid": {},
    "same": {"padding": "same"},
    "stride2": {"strides": 2},
    "stride2_same": {"strides": 2, "padding": "same"},
    "stride_2x1_kernel_3x2": {"strides": (2, 1), "kernel_size": (3, 2)},
    "stride3_kernel4_same": {"strides": 3, "kernel_size": 4, "padding": "same"},
    "dilation2": {"dilation_rate": 2},
    "dilation2_same": {"dilation_rate": 2, "padding": "same"},
    "groups2_stride2": {"groups": 2, "strides": 2},
    "no_bias": {"use_bias": False, "padding": "same"},
}
CONV1D = {
    "valid": {},
    "causal_dilation2": {"padding": "causal", "dilation_rate": 2},
    "stride3_same": {"strides": 3, "padding": "same"},
    "groups2": {"groups": 2},
}


def conv2d_policy(kwargs, channels=4):
    kwargs = {"kernel_size": 3, **kwargs}
    return KerasPolicy([keras.layers.Conv2D(6, activation="tanh", **kwargs),
                        keras.layers.Flatten()], (7, 8, channels))


def conv1d_policy(kwargs):
    return KerasPolicy([keras.layers.Conv1D(6, 3, activation="tanh", **kwargs),
                        keras.layers.Flatten()], (9, 4))


def cnn_policy():
    """Conv2D -> Conv2D -> Flatten -> Dense -> logits on uint8 frames (a NatureCNN in small)."""
    return KerasPolicy([keras.layers.Conv2D(4, 4, strides=2, activation="relu"),
                        keras.layers.Conv2D(5, 3, activation="relu"), keras.layers.Flatten(),
                        keras.layers.Dense(8, activation="relu")], (12, 12, 2), kind="uint8")


@pytest.fixture(params=["ghost", "materialise"])
def method(request, monkeypatch):
    monkeypatch.setattr(conv_taps, "NORM_METHOD", request.param)
    return request.param


def assert_exact(p, t=5, seed=1):
    obs, act = p.batch(t, seed)
    _, cap = taps.capture(p.log_prob, p.variables, (obs, act), t)
    assert all(cap.covered)
    want = jacobian_reference(p.log_prob, p.variables, obs, act)
    assert_all_close(pgrad.per_step_grads(p.log_prob, p.variables, obs, act), want)
    np.testing.assert_allclose(pgrad.per_step_norms(p.log_prob, p.variables, obs, act),
                               reference_norms(want), rtol=1e-4, atol=1e-6)


# --- the maths on hand-computed tensors ---------------------------------------------------------


def test_conv1d_rows_by_hand():
    """z[l] = x[l] w0 + x[l+1] w1 (one channel, valid): dW = [sum x[l] d[l], sum x[l+1] d[l]]."""
    layer = keras.layers.Conv1D(1, 2, use_bias=False)
    layer.build((None, 3, 1))
    x = tf.constant([[[1.0], [2.0], [3.0]]])  # [1, 3, 1]
    with tf.GradientTape() as tape, taps.recording(tape, layer.trainable_variables) as rec:
        layer(x)
    (tap,) = rec.layers
    delta = tf.constant([[[10.0], [100.0]]])  # [1, 2, 1] = d f / d z
    rows = tap.rows("kernel", delta, 1)  # [1, 2, 1, 1]
    np.testing.assert_allclose(np.ravel(rows), [1 * 10 + 2 * 100, 2 * 10 + 3 * 100])
    for m in ("ghost", "materialise"):
        conv_taps.NORM_METHOD = m
        try:
            sq = tap.norms_sq("kernel", delta, 1)[0]
        finally:
            conv_taps.NORM_METHOD = "auto"
        np.testing.assert_allclose(sq, [210.0**2 + 320.0**2], rtol=1e-6)


def test_stride_with_kernel_taps_past_the_blocks_by_hand():
    """Kernel 3, stride 2 (the space-to-depth form pads the kernel to 4 taps; the 4th reads
    real input and must not count): x = [1, 2, 3, 4, 5], two outputs, read x[0:3] and x[2:5]."""
    layer = keras.layers.Conv1D(1, 3, strides=2, use_bias=False)
    layer.build((None, 5, 1))
    x = tf.constant([[[1.0], [2.0], [3.0], [4.0], [5.0]]])
    with tf.GradientTape() as tape, taps.recording(tape, layer.trainable_variables) as rec:
        layer(x)
    (tap,) = rec.layers
    delta = tf.constant([[[1.0], [-1.0]]])
    want = [1 - 3, 2 - 4, 3 - 5]
    np.testing.assert_allclose(np.ravel(tap.rows("kernel", delta, 1)), want)
    for m in ("ghost", "materialise"):
        conv_taps.NORM_METHOD = m
        try:
            np.testing.assert_allclose(tap.norms_sq("kernel", delta, 1)[0], [12.0], rtol=1e-6)
        finally:
            conv_taps.NORM_METHOD = "auto"
    np.testing.assert_allclose(np.ravel(tap.summed("kernel", delta)), want)


def test_method_choice_on_nature_cnn_shapes():
    net = keras.Sequential([keras.layers.Input((84, 84, 4)),
                            keras.layers.Conv2D(32, 8, strides=4), keras.layers.Conv2D(64, 4, 2),
                            keras.layers.Conv2D(64, 3, 1)])
    with tf.GradientTape() as tape, taps.recording(tape, net.trainable_variables) as rec:
        net(tf.zeros([2, 84, 84, 4]))
    c1, c2, c3 = rec.layers
    # per step: L k c against L^2 (k + c); k = kh kw cin, L = output positions
    assert c1.costs() == {"materialise": 400 * 256 * 32, "ghost": 400**2 * (256 + 32)}
    assert c3.costs() == {"materialise": 49 * 576 * 64, "ghost": 49**2 * (576 + 64)}
    assert [c.method(256, keep=False) for c in (c1, c2, c3)] == ["materialise"] * 2 + ["ghost"]
    # a reweighted sum follows and the rows fit: materialise and reuse them
    assert [c.method(256, keep=True) for c in (c1, c2, c3)] == ["materialise"] * 3
    # rows beyond the byte budget cannot be kept: the cheaper per step again
    assert c3.method(10**6, keep=True) == "ghost"
    assert c3.method(tf.constant(256), keep=True) == "ghost"  # unknown T: nothing kept


# --- per-step gradients and norms equal the jacobian --------------------------------------------


@pytest.mark.parametrize("name", sorted(CONV2D))
def test_conv2d_equals_jacobian(name, method):
    assert_exact(conv2d_policy(CONV2D[name]))


@pytest.mark.parametrize("name", sorted(CONV1D))
def test_conv1d_equals_jacobian(name, method):
    assert_exact(conv1d_policy(CONV1D[name]))


def test_cnn_policy_equals_jacobian(method):
    assert_exact(cnn_policy(), t=6)


def test_dense_on_3d_inputs_equals_jacobian(method):
    p = KerasPolicy([keras.layers.Dense(5, activation="tanh"), keras.layers.Dense(2),
                     keras.layers.Flatten()], (3, 4))
    assert_exact(p)


def test_conv_layer_called_twice_sums_both_uses():
    conv = keras.layers.Conv2D(3, 3, activation="tanh")
    p = KerasPolicy([keras.layers.Flatten()], (5, 5, 2))
    conv.build((None, 5, 5, 2))
    variables = p.variables + conv.trainable_variables
    dense = keras.layers.Dense(3)

    def fn(obs, act):
        h = tf.concat([conv(obs), conv(obs[:, ::-1])], -1)
        return p.log_prob(obs, act) + tf.reduce_sum(dense(tf.reshape(h, [-1, 54])), 1)

    obs, act = p.batch(4)
    _, cap = taps.capture(fn, variables, (obs, act), 4)
    assert cap.covered[-2:] == [True, True]
    want = jacobian_reference(fn, variables, obs, act)
    assert_all_close(pgrad.per_step_grads(fn, variables, obs, act), want)
    np.testing.assert_allclose(pgrad.per_step_norms(fn, variables, obs, act),
                               reference_norms(want), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("dynamic", [False, True])
def test_inside_tf_function(dynamic, method):
    p = cnn_policy()
    obs, act = p.batch(7)
    sig = [tf.TensorSpec([None, 12, 12, 2], tf.uint8), tf.TensorSpec([None], act.dtype)]

    @tf.function(input_signature=sig if dynamic else None)
    def both(o, a):
        return (pgrad.per_step_grads(p.log_prob, p.variables, o, a),
                pgrad.per_step_norms(p.log_prob, p.variables, o, a))

    grads, norms = both(obs, act)
    want = jacobian_reference(p.log_prob, p.variables, obs, act)
    assert_all_close(grads, want)
    np.testing.assert_allclose(norms, reference_norms(want), rtol=1e-4, atol=1e-6)


def test_chunked_rows_and_norms_equal_jacobian(monkeypatch, method):
    monkeypatch.setattr(conv_taps, "MAX_BYTES", 1)  # one row per chunk: the while loop
    assert_exact(cnn_policy(), t=5)


# --- fallbacks: whatever a tap cannot do exactly goes to the generic path ----------------------


class RowsAreNotSteps:
    """A convolution applied to [2T, ...] images (two per step): its taps must not be used."""

    def __init__(self):
        self.p = KerasPolicy([keras.layers.Flatten()], (36,))
        self.conv = keras.layers.Conv2D(2, 3, activation="tanh")
        self.conv.build((None, 4, 4, 1))
        self.variables = self.p.variables + self.conv.trainable_variables

    def log_prob(self, obs, act):  # obs [T, 32] -> [2T, 4, 4, 1] -> [T, 2 * 2 * 2 * 2] + pad
        h = tf.reshape(self.conv(tf.reshape(obs[:, :32], [-1, 4, 4, 1])), [-1, 16])
        return self.p.log_prob(tf.concat([h, obs[:, 16:]], 1)[:, :36], act)


@pytest.mark.parametrize("mode", ["eager", "dynamic"])
def test_conv_rows_that_are_not_steps_fall_back(mode):
    m = RowsAreNotSteps()
    obs, act = m.p.batch(5)
    want = jacobian_reference(m.log_prob, m.variables, obs, act)
    fn = lambda o, a: pgrad.per_step_grads(m.log_prob, m.variables, o, a)  # noqa: E731
    if mode == "dynamic":
        fn = tf.function(fn, input_signature=[tf.TensorSpec([None, 36]),
                                              tf.TensorSpec([None], act.dtype)])
    else:
        _, cap = taps.capture(m.log_prob, m.variables, (obs, act), 5)
        assert cap.covered[-2:] == [False, False]
    assert_all_close(fn(obs, act), want)


def lora_policy():
    p = conv2d_policy({})
    p.net.layers[0].enable_lora(2)
    p.variables = p.net.trainable_variables
    return p


def conv3d_policy():
    return KerasPolicy([keras.layers.Conv3D(2, 2, activation="tanh"), keras.layers.Flatten()],
                       (3, 3, 3, 1))


@pytest.mark.parametrize("make", [lora_policy, conv3d_policy], ids=["lora", "conv3d"])
def test_untapped_convolutions_are_generic_and_exact(make):
    p = make()
    obs, act = p.batch(4)
    _, cap = taps.capture(p.log_prob, p.variables, (obs, act), 4)
    assert not all(cap.covered) and cap.covered[-2:] == [True, True]  # the logits layer
    want = jacobian_reference(p.log_prob, p.variables, obs, act)
    assert_all_close(pgrad.per_step_grads(p.log_prob, p.variables, obs, act), want)
    np.testing.assert_allclose(pgrad.per_step_norms(p.log_prob, p.variables, obs, act),
                               reference_norms(want), rtol=1e-4, atol=1e-6)


def test_recording_leaves_the_layer_classes_as_they_were():
    before = {cls: dict(cls.__dict__).get("call") for cls in
              (keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Embedding,
               keras.layers.LayerNormalization, keras.layers.Dense)}
    assert before[keras.layers.Conv2D] is None  # Conv2D inherits BaseConv.call
    p = cnn_policy()
    obs, act = p.batch(3)
    with tf.GradientTape() as tape, taps.recording(tape, p.variables) as rec:
        assert "call" in keras.layers.Conv2D.__dict__
        p.log_prob(obs, act)
    assert len(rec.layers) == 2 and len(rec.dense) == 2  # two convolutions, two Dense
    assert {cls: dict(cls.__dict__).get("call") for cls in before} == before


# --- the engine ---------------------------------------------------------------------------------


def chains(max_norm):
    def user_fn(grads, **ctx):  # needs the full per-step vectors
        return [tf.tanh(g) for g in grads]

    return {
        "weight_mean": pgrad.chain(pgrad.weight_by("advantages"), pgrad.mean_steps()),
        "clip_mean": pgrad.chain(pgrad.weight_by("advantages"), pgrad.clip_per_step(max_norm),
                                 pgrad.mean_steps()),
        "stateless": pgrad.chain(pgrad.weight_by("advantages"), pgrad.stateless(user_fn),
                                 pgrad.mean_steps()),
    }


@pytest.mark.parametrize("name", ["weight_mean", "clip_mean", "stateless"])
@pytest.mark.parametrize("compiled", ["eager", "static", "dynamic"])
def test_engine_paths_equal_the_jacobian_reference(name, compiled, method):
    p = cnn_policy()
    t = 10
    obs, act = p.batch(t)
    adv = tf.constant(np.linspace(-2, 2, t), tf.float32)
    rows = jacobian_reference(p.log_prob, p.variables, obs, act)
    max_norm = float(np.median(reference_norms(rows) * np.abs(adv)))  # about half clipped
    ch = chains(max_norm)[name]
    want = reference_update(ch, p.variables, rows, {"advantages": adv})
    paths = ["fused", "full"] if pgrad.plan(ch) == "fused" else ["full"]
    sig = [tf.TensorSpec([None, 12, 12, 2], tf.uint8), tf.TensorSpec([None], act.dtype),
           tf.TensorSpec([None])]
    for path in paths:
        def f(o, a, w, path=path):
            return pgrad.policy_gradients(ch, ch.init(p.variables), p.log_prob, p.variables,
                                          (o, a), {"advantages": w}, path=path)[0]

        if compiled != "eager":
            f = tf.function(f, input_signature=sig if compiled == "dynamic" else None)
        assert_all_close(f(obs, act, adv), want, atol=1e-6)


def test_fused_clip_calls_no_materialiser(monkeypatch):
    """The clip chain on the CNN runs with every per-step-gradient materialiser disabled."""

    def forbidden(*a, **k):
        raise AssertionError("per-step gradients materialised")

    p = cnn_policy()
    obs, act = p.batch(8)
    ctx = {"advantages": tf.constant(np.linspace(-2, 2, 8), tf.float32)}
    ch = chains(0.3)["clip_mean"]
    want = pgrad.policy_gradients(ch, ch.init(p.variables), p.log_prob, p.variables, (obs, act),
                                  ctx, path="full")[0]
    for name in ("per_step_grads", "_generic_grads", "_generic_norms_sq", "_vectorized"):
        monkeypatch.setattr(per_step_lib, name, forbidden)
    monkeypatch.setattr(taps.Capture, "per_step_grads", forbidden)
    monkeypatch.setattr(conv_taps.PatchTap, "rows", forbidden)
    got = pgrad.policy_gradients(ch, ch.init(p.variables), p.log_prob, p.variables, (obs, act),
                                 ctx)[0]
    assert_all_close(got, want, atol=1e-6)


def _static_shapes(graph) -> set[tuple]:
    shapes, graphs = set(), [graph]
    while graphs:
        g = graphs.pop()
        for op in g.get_operations():
            for out in op.outputs:
                if out.shape.rank is not None and out.shape.is_fully_defined():
                    shapes.add(tuple(out.shape.as_list()))
        graphs.extend(f.graph for f in g._functions.values() if hasattr(f, "graph"))
    return shapes


@pytest.mark.parametrize("norms", ["ghost", "materialise"])
def test_graph_of_fused_clip_with_ghost_norms_has_no_per_step_kernel(norms, monkeypatch):
    """Ghost norms never form per-step kernel gradients; materialised ones form them one kernel
    shift at a time, [T, c, cin] (so the check can fail), and never the whole [T, *kernel].
    Shapes: 7x7x16 in, 3x3 valid, 32 filters: L = 25, k = 144, c = 32."""
    monkeypatch.setattr(conv_taps, "NORM_METHOD", norms)
    t = 64
    p = KerasPolicy([keras.layers.Conv2D(32, 3, activation="tanh"),
                     keras.layers.GlobalAveragePooling2D()], (7, 7, 16))
    obs, act = p.batch(t)
    adv = tf.constant(np.linspace(-2, 2, t), tf.float32)
    ch = chains(0.5)["clip_mean"]

    @tf.function
    def run(o, a, w):
        return pgrad.policy_gradients(ch, ch.init(p.variables), p.log_prob, p.variables, (o, a),
                                      {"advantages": w}, path="fused")[0]

    shapes = _static_shapes(run.get_concrete_function(obs, act, adv).graph)
    assert ((t, 32, 16) in shapes) == (norms == "materialise")  # one shift's rows, [T, c, cin]
    assert not shapes & {(t, 3, 3, 16, 32), (t, 144, 32), (t, 32, 144)}
    largest = max(np.prod(s) for s in shapes if s)
    assert largest < t * per_step_lib.num_params(p.variables)  # never [T, params]


@pytest.mark.parametrize("compiled", ["eager", "dynamic"])
def test_engine_aux_loss_gradient_through_conv_taps(compiled):
    """An entropy bonus differentiated from the same recorded pass (the agents' aux_loss)."""
    p = cnn_policy()
    t = 8
    obs, act = p.batch(t)
    adv = tf.constant(np.linspace(-2, 2, t), tf.float32)
    ch = chains(0.3)["clip_mean"]

    def with_entropy(o, a):
        dist = p.head(p.net(tf.cast(o, tf.float32) / 255.0))
        return dist.log_prob(a), {"entropy": dist.entropy()}

    def aux(log_probs, extras):
        return -0.01 * tf.reduce_mean(extras["entropy"])

    def f(o, a, w):
        out = pgrad.run_engine(ch, ch.init(p.variables), with_entropy, p.variables, (o, a),
                               {"advantages": w}, aux_loss=aux)
        return out.grads, out.aux_grads

    if compiled == "dynamic":
        f = tf.function(f, input_signature=[tf.TensorSpec([None, 12, 12, 2], tf.uint8),
                                            tf.TensorSpec([None], act.dtype),
                                            tf.TensorSpec([None])])
    grads, aux_grads = f(obs, act, adv)
    with tf.GradientTape() as tape:
        want_aux = aux(None, with_entropy(obs, act)[1])
    assert_all_close(aux_grads, tape.gradient(want_aux, p.variables), atol=1e-7)
    rows = jacobian_reference(p.log_prob, p.variables, obs, act)
    assert_all_close(grads, reference_update(ch, p.variables, rows, {"advantages": adv}),
                     atol=1e-6)


def _token_policy():
    return KerasPolicy([keras.layers.Embedding(6, 4), keras.layers.Dense(5, activation="tanh"),
                        keras.layers.LayerNormalization(axis=[1, 2]), keras.layers.Flatten()],
                       (5,), kind="ids", vocab=6)


@pytest.mark.parametrize("make", [cnn_policy, lambda: conv1d_policy(CONV1D["causal_dilation2"]),
                                  lambda: conv2d_policy(CONV2D["groups2_stride2"]),
                                  _token_policy], ids=["cnn", "causal", "groups", "tokens"])
def test_recorded_pass_computes_what_the_plain_pass_does(make):
    """The taps change what the tape sees, not the values: log-probs equal bit for bit."""
    p = make()
    obs, act = p.batch(6)
    out, cap = taps.capture(p.log_prob, p.variables, (obs, act), 6)
    assert all(cap.covered)
    np.testing.assert_array_equal(out, p.log_prob(obs, act))


@pytest.mark.parametrize("layer", [keras.layers.Conv1D(6, 3, activation="tanh"),
                                   keras.layers.Dense(5, activation="tanh")],
                         ids=["conv1d", "dense3d"])
def test_unknown_length_after_the_step_axis_is_generic_and_exact(layer):
    """Sequences of unknown length at trace time: no static geometry, so no tap."""
    p = KerasPolicy([layer, keras.layers.GlobalAveragePooling1D()], (9, 4))
    obs, act = p.batch(5)
    covered = []

    @tf.function(input_signature=[tf.TensorSpec([None, None, 4]),
                                  tf.TensorSpec([None], act.dtype)])
    def both(o, a):
        covered[:] = taps.capture(p.log_prob, p.variables, (o, a), tf.shape(o)[0])[1].covered
        return (pgrad.per_step_grads(p.log_prob, p.variables, o, a),
                pgrad.per_step_norms(p.log_prob, p.variables, o, a))

    grads, norms = both(obs, act)
    assert covered == [False, False, True, True]
    want = jacobian_reference(p.log_prob, p.variables, obs, act)
    assert_all_close(grads, want)
    np.testing.assert_allclose(norms, reference_norms(want), rtol=1e-4, atol=1e-6)
