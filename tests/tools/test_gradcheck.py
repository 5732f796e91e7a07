"""check_gradients: passes correct gradients, catches wrong ones, reports per input."""

import numpy as np
import pytest
import tensorflow as tf

import pgrad  # noqa: F401  (quiet TensorFlow first)
from pgrad.tools.gradcheck import GradCheck, check_gradients


@tf.custom_gradient
def seed_relu(x):
    """The custom ReLU from shared/seeds/gradient-modification-in-tensorflow.txt."""
    out = tf.maximum(x, 0)

    def grad(dy):
        return dy * tf.cast(x > 0, dtype=dy.dtype)

    return out, grad


@tf.custom_gradient
def wrong_square(x):
    """x^2 with a deliberately wrong gradient (3x instead of 2x)."""

    def grad(dy):
        return dy * 3.0 * x

    return x * x, grad


@tf.custom_gradient
def wrong_sign_softplus(x):
    """softplus with its gradient's sign flipped -- a plausible bug."""

    def grad(dy):
        return -dy * tf.sigmoid(x)

    return tf.math.softplus(x), grad


def test_seed_relu_passes_away_from_the_kink():
    x = np.array([-2.0, -1.0, -0.3, 0.4, 1.0, 2.0])
    result = check_gradients(seed_relu, x)
    assert result.ok(), result
    assert result.abs_error[0] < 1e-8
    # Full jacobian is diagonal with the step function on it.
    np.testing.assert_array_equal(result.theoretical[0], np.diag((x > 0).astype(float)))


def test_seed_relu_at_the_kink_is_reported():
    # At 0 the central difference is 0.5; the custom gradient says 0. The checker must say so.
    result = check_gradients(seed_relu, np.array([0.0, 1.0]))
    assert not result.ok()
    assert result.abs_error[0] == pytest.approx(0.5)


@pytest.mark.parametrize("bad", [wrong_square, wrong_sign_softplus])
def test_catches_a_wrong_custom_gradient(bad):
    x = np.array([0.5, -1.3, 2.0])
    result = check_gradients(bad, x)
    assert not result.ok(tol=1e-2)
    assert result.rel_error[0] > 0.1


def test_smooth_functions_of_several_inputs_pass_with_small_errors():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(3, 4)), rng.normal(size=(4, 2))

    def fn(a, b):
        return tf.tanh(a @ b), tf.reduce_sum(tf.exp(0.1 * a))  # nest of outputs

    result = check_gradients(fn, a, b)
    assert result.ok(tol=1e-7), result
    assert len(result.abs_error) == 2
    assert result.theoretical[0].shape == (3 * 2 + 1, 12)
    assert result.theoretical[1].shape == (7, 8)
    np.testing.assert_allclose(result.theoretical[0], result.numerical[0], atol=1e-8)


def test_reports_the_wrong_input_only():
    @tf.custom_gradient
    def mul(a, b):
        def grad(dy):
            return dy * b, dy * 2.0 * a  # second is wrong

        return a * b, grad

    result = check_gradients(mul, np.array([1.0, 2.0]), np.array([3.0, -1.0]))
    assert result.rel_error[0] < 1e-9
    assert result.rel_error[1] > 0.4
    assert not result.ok()


def test_unconnected_input_and_float32():
    result = check_gradients(lambda a, b: 2.0 * a, np.array([1.0]), np.array([5.0]))
    assert result.ok()
    assert result.abs_error[1] == 0.0
    scalar = check_gradients(lambda a, b: a * tf.sin(b), 2.0, np.array(0.3))  # 0-d inputs
    assert scalar.ok() and scalar.theoretical[0].shape == (1, 1)
    r32 = check_gradients(lambda x: tf.sin(x) * x, np.array([0.3, 1.0]), dtype=tf.float32)
    assert r32.eps == 1e-3
    assert r32.ok(tol=1e-3) and not r32.ok(tol=1e-12)


def test_repr_and_errors():
    result = check_gradients(tf.sin, np.array([0.1, 0.2]))
    assert isinstance(result, GradCheck)
    text = repr(result)
    assert text.startswith("GradCheck(input 0: max abs") and "eps=1e-06" in text
    with pytest.raises(TypeError, match="floating"):
        check_gradients(tf.identity, np.array([1, 2]))
    with pytest.raises(ValueError, match="outputs"):
        check_gradients(tf.sin, np.array([0.1, 0.2]), reference=lambda x: tf.sin(x)[:1])


def test_keras_layer_weights_via_stateless_call():
    """The documented pattern for a layer: its weights become inputs through stateless_call."""
    import keras

    layer = keras.layers.Dense(3, activation="tanh", dtype="float64")
    layer.build((None, 4))
    kernel, bias = (v.numpy() for v in layer.trainable_variables)
    x = np.random.default_rng(0).normal(size=(5, 4))

    def fn(kernel, bias, x):
        return layer.stateless_call([kernel, bias], [], x)[0]

    result = check_gradients(fn, kernel, bias, x)
    assert result.ok(), result
    assert len(result.rel_error) == 3
