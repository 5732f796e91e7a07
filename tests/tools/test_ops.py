"""Custom-gradient ops: forward identity, modified backward, in tf.function, Keras, SavedModel."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import pgrad  # (first: quiet TensorFlow)
from pgrad.tools.gradcheck import check_gradients
from pgrad.tools.ops import (
    ClipGradient,
    ReverseGradient,
    ScaleGradient,
    clip_gradient,
    reverse_gradient,
    scale_gradient,
)

X = np.array([[-1.5, 0.3, 2.0], [0.7, -0.2, 1.1]], np.float32)
W = np.array([[3.0, -0.2, 0.6], [-4.0, 1.0, 0.1]], np.float32)  # upstream weights: the dy


def grad_of_weighted(op, x=X, w=W):
    """d/dx sum(w * op(x)): the op's backward applied to dy = w."""
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(w * op(x))
    return tape.gradient(y, x).numpy()


OPS = {
    # name: (op, expected backward of dy)
    "scale": (lambda x: scale_gradient(x, 2.5), lambda dy: 2.5 * dy),
    "scale_zero": (lambda x: scale_gradient(x, 0.0), lambda dy: 0.0 * dy),
    "reverse": (lambda x: reverse_gradient(x), lambda dy: -dy),
    "reverse_half": (lambda x: reverse_gradient(x, 0.5), lambda dy: -0.5 * dy),
    "clip": (lambda x: clip_gradient(x, -1.0, 0.5), lambda dy: np.clip(dy, -1.0, 0.5)),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_forward_is_identity_and_backward_as_specified(name):
    op, backward = OPS[name]
    np.testing.assert_array_equal(op(tf.constant(X)).numpy(), X)
    np.testing.assert_allclose(grad_of_weighted(op), backward(W), rtol=1e-6)


@pytest.mark.parametrize("name", sorted(OPS))
def test_same_in_tf_function(name):
    op, backward = OPS[name]
    np.testing.assert_allclose(grad_of_weighted(tf.function(op)), backward(W), rtol=1e-6)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(W * op(x))
        return tape.gradient(y, x)

    np.testing.assert_allclose(step(tf.constant(X)).numpy(), backward(W), rtol=1e-6)


def test_gradcheck_on_every_op():
    x = np.array([0.3, -1.2, 2.0])
    w = np.array([3.0, -0.2, 0.6])  # 3.0 is clipped to 1, -0.2 is not
    cases = [
        (lambda x: w * scale_gradient(x, 2.5), lambda x: 2.5 * w * x),
        (lambda x: w * reverse_gradient(x, 0.7), lambda x: -0.7 * w * x),
        (lambda x: w * clip_gradient(x, -1.0, 1.0), lambda x: np.clip(w, -1, 1) * x),
        # Inside a smooth function the chain rule runs through the modified gradient:
        # d/dx sin(x^2) with the inner gradient tripled is the derivative of 3 sin(x^2).
        (lambda x: tf.sin(scale_gradient(x * x, 3.0)), lambda x: 3.0 * tf.sin(x * x)),
    ]
    for fn, ref in cases:
        # Without a reference the check reports exactly the intended modification...
        assert not check_gradients(fn, x).ok()
        # ...with one, the op's gradient is the derivative of the reference function.
        result = check_gradients(fn, x, reference=ref)
        assert result.ok(), result
    # Factor 1 / wide clip bounds: the plain derivative.
    assert check_gradients(lambda x: scale_gradient(x, 1.0) ** 3, x).ok()
    assert check_gradients(lambda x: clip_gradient(x, -9.0, 9.0) ** 2, x).ok()


def test_gradient_wrt_factor_variable_is_zero_and_factor_read_at_call_time():
    factor = tf.Variable(2.0)
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(scale_gradient(x, factor))
    gx, gf = tape.gradient(y, [x, factor])
    np.testing.assert_allclose(gx.numpy(), [2.0, 2.0])
    assert float(gf) == 0.0  # the forward value does not depend on the factor
    factor.assign(-3.0)
    np.testing.assert_allclose(grad_of_weighted(lambda v: scale_gradient(v, factor)), -3.0 * W)


def test_float64_and_errors():
    x = tf.constant([1.0, 2.0], tf.float64)
    assert scale_gradient(x, 2.0).dtype == tf.float64
    with pytest.raises(TypeError, match="floating"):
        scale_gradient(tf.constant([1, 2]), 2.0)
    with pytest.raises(ValueError, match="greater"):
        clip_gradient(x, 1.0, -1.0)
    with pytest.raises(ValueError, match="greater"):
        ClipGradient(1.0, -1.0)


LAYERS = {
    "scale": (lambda: ScaleGradient(2.5, name="g"), lambda dy: 2.5 * dy),
    "reverse": (lambda: ReverseGradient(0.5, name="g"), lambda dy: -0.5 * dy),
    "clip": (lambda: ClipGradient(-1.0, 0.5, name="g"), lambda dy: np.clip(dy, -1.0, 0.5)),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_keras_layer_grad_and_keras_save_load(name, tmp_path):
    make, backward = LAYERS[name]
    inp = keras.Input((3,))
    model = keras.Model(inp, make()(inp))
    np.testing.assert_allclose(grad_of_weighted(model), backward(W), rtol=1e-6)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded.get_layer("g")) is type(model.get_layer("g"))
    np.testing.assert_allclose(grad_of_weighted(loaded), backward(W), rtol=1e-6)
    assert loaded.get_layer("g").get_config() == model.get_layer("g").get_config()


def test_layer_factor_can_be_annealed_and_is_saved(tmp_path):
    layer = ReverseGradient(1.0, name="g")
    inp = keras.Input((3,))
    model = keras.Model(inp, layer(inp))
    layer.factor.assign(0.25)
    np.testing.assert_allclose(grad_of_weighted(model), -0.25 * W, rtol=1e-6)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(grad_of_weighted(loaded), -0.25 * W, rtol=1e-6)


class _Trunk(tf.Module):
    def __init__(self):
        self.w = tf.Variable([[1.0, -2.0, 0.5]])

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def scaled(self, x):
        return scale_gradient(x * self.w, 0.5)

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def reversed(self, x):
        return reverse_gradient(x * self.w, 2.0)

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def clipped(self, x):
        return clip_gradient(x * self.w, -1.0, 0.5)


def test_savedmodel_round_trip_keeps_modified_gradients(tmp_path):
    module = _Trunk()
    path = str(tmp_path / "trunk")
    tf.saved_model.save(module, path)
    loaded = tf.saved_model.load(path)
    w = np.array([[1.0, -2.0, 0.5]], np.float32)
    expected = {
        "scaled": 0.5 * W * w,
        "reversed": -2.0 * W * w,
        "clipped": np.clip(W, -1.0, 0.5) * w,
    }
    for name, want in expected.items():
        np.testing.assert_allclose(grad_of_weighted(getattr(loaded, name)), want, rtol=1e-6)
        # And the gradient reaching the loaded variable is modified too.
        x = tf.constant(X)
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(W * getattr(loaded, name)(x))
        gw = tape.gradient(y, loaded.w).numpy()
        np.testing.assert_allclose(gw, np.sum(want / w * X, axis=0, keepdims=True), rtol=1e-5)


def test_keras_model_with_layers_exported_as_savedmodel(tmp_path):
    inp = keras.Input((3,))
    out = ClipGradient(-1.0, 0.5)(ReverseGradient(0.5)(inp))
    model = keras.Model(inp, out)
    path = str(tmp_path / "exported")
    model.export(path, verbose=False)
    loaded = tf.saved_model.load(path)
    # Backward: reverse (x -0.5) after the clip, which acts first on the way back.
    want = -0.5 * np.clip(W, -1.0, 0.5)
    np.testing.assert_allclose(grad_of_weighted(loaded.serve), want, rtol=1e-6)


@pytest.mark.parametrize("use_taps", [False, True])
def test_ops_inside_per_step_gradients_match_a_loop(use_taps):
    """The ops vectorise (tf.vectorized_map) without the slow fallback, eager and traced."""
    import warnings

    dense = keras.layers.Dense(2, activation="tanh")
    x = tf.constant(np.random.default_rng(0).normal(size=(6, 3)), tf.float32)
    dense.build((None, 3))

    def fn(x):
        h = reverse_gradient(scale_gradient(dense(x), 0.5), 0.3)
        return tf.reduce_sum(clip_gradient(h, -0.1, 0.1) ** 2, axis=1)  # [T]

    variables = dense.trainable_variables
    rows = []  # reference: a plain Python loop of one-row gradients
    for t in range(x.shape[0]):
        with tf.GradientTape() as tape:
            y = fn(x[t : t + 1])
        rows.append(tape.gradient(y, variables))
    want = [tf.stack(r) for r in zip(*rows)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no sequential fallback
        eager = pgrad.per_step_grads(fn, variables, x, use_taps=use_taps)
        traced = tf.function(lambda x: pgrad.per_step_grads(fn, variables, x,
                                                            use_taps=use_taps))(x)
    for got in (eager, traced):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-7)
