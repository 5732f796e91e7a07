"""apply_updates: one negation, any Keras optimizer, non-finite updates change nothing."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import pgrad


def setup(opt):
    v = [keras.Variable(np.array([1.0, 2.0], np.float32)), keras.Variable(np.float32(3.0))]
    return v, opt


def test_sgd_ascends_the_given_gradient():
    v, opt = setup(keras.optimizers.SGD(0.5))
    pgrad.apply_updates(opt, [tf.constant([1.0, -2.0]), tf.constant(4.0)], v)
    np.testing.assert_allclose(v[0].numpy(), [1.5, 1.0])
    assert float(v[1].numpy()) == pytest.approx(5.0)


@pytest.mark.parametrize("make", [lambda: keras.optimizers.Adam(0.1),
                                  lambda: keras.optimizers.RMSprop(0.1),
                                  lambda: keras.optimizers.SGD(0.1, clipnorm=0.01)])
def test_matches_keras_on_the_negated_gradient(make):
    grads = [tf.constant([0.3, -0.7]), tf.constant(2.0)]
    v1, o1 = setup(make())
    v2, o2 = setup(make())
    for _ in range(3):
        pgrad.apply_updates(o1, grads, v1)
        o2.apply([-g for g in grads], v2)
    for a, b in zip(v1, v2):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)


@pytest.mark.parametrize("graph", [False, True])
def test_nonfinite_update_is_skipped_entirely(graph):
    v, opt = setup(keras.optimizers.Adam(0.1))
    good = [tf.constant([1.0, 1.0]), tf.constant(1.0)]
    bad = [tf.constant([np.nan, 1.0]), tf.constant(np.inf)]
    fn = lambda g: pgrad.apply_updates(opt, g, v, skip_nonfinite=True)
    if graph:
        fn = tf.function(fn)
    assert bool(fn(good))
    snapshot = [x.numpy().copy() for x in v + list(opt.variables)]
    assert not bool(fn(bad))
    for before, after in zip(snapshot, v + list(opt.variables)):
        np.testing.assert_array_equal(before, after.numpy())
    assert bool(fn(good)) and int(opt.iterations.numpy()) == 2


@pytest.mark.parametrize("compiled", [False, True])
def test_all_finite_checks_every_element_of_every_gradient(compiled):
    """Against a plain numpy check: same-dtype gradients (checked together), mixed dtypes,
    one bad element anywhere, huge finite values whose norm overflows, and no gradients."""
    def check(grads):
        fn = tf.function(pgrad.all_finite) if compiled else pgrad.all_finite
        return bool(fn(grads))

    rng = np.random.default_rng(0)
    base = [rng.normal(size=s).astype(np.float32) for s in [(3, 4), (4,), (2, 2, 2), ()]]
    assert check([tf.constant(g) for g in base])
    for i, bad in [(0, np.nan), (1, np.inf), (2, -np.inf), (3, np.nan)]:
        grads = [g.copy() for g in base]
        grads[i].flat[-1] = bad
        expected = all(np.isfinite(g).all() for g in grads)
        assert check([tf.constant(g) for g in grads]) is expected is False
    huge = [tf.fill([4], 3e38), tf.fill([2], 3e38)]  # finite, but the global norm is inf
    assert check(huge) and not np.isfinite(float(tf.linalg.global_norm(huge)))
    mixed = [tf.constant([1.0, np.nan], tf.float64), tf.constant([1.0], tf.float32)]
    assert not check(mixed) and check([mixed[1], tf.constant([2.0], tf.float64)])
    assert pgrad.all_finite([]).numpy()
