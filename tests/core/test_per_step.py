"""per_step_grads: equals tape.jacobian, any T and chunking, eager and in tf.function."""

import numpy as np
import pytest
import tensorflow as tf
from policies import assert_all_close, jacobian_reference

import pgrad


@pytest.mark.parametrize("t", [1, 7, 33])
def test_equals_jacobian_every_head(policy, t):
    obs, act = policy.batch(t)
    got = pgrad.per_step_grads(policy.log_prob, policy.variables, obs, act)
    want = jacobian_reference(policy.log_prob, policy.variables, obs, act)
    for g, v in zip(got, policy.variables):
        assert g.shape == (t, *v.shape)
    assert_all_close(got, want)


@pytest.mark.parametrize("chunk", [1, 5, 16, 1000])
def test_chunking_does_not_change_the_result(categorical, chunk):
    obs, act = categorical.batch(23)
    want = jacobian_reference(categorical.log_prob, categorical.variables, obs, act)
    got = pgrad.per_step_grads(categorical.log_prob, categorical.variables, obs, act,
                               chunk_size=chunk)
    assert_all_close(got, want)


def test_byte_budget_chunks_and_stays_exact(gaussian):
    obs, act = gaussian.batch(19)
    want = jacobian_reference(gaussian.log_prob, gaussian.variables, obs, act)
    got = pgrad.per_step_grads(gaussian.log_prob, gaussian.variables, obs, act, max_bytes=2048)
    assert_all_close(got, want)


@pytest.mark.parametrize("dynamic", [False, True])
def test_inside_tf_function(gaussian, dynamic):
    obs, act = gaussian.batch(21)
    sig = None
    if dynamic:  # unknown T at trace time: the chunk loop must run as a graph loop
        sig = [tf.TensorSpec([None, 4]), tf.TensorSpec([None, 2])]

    @tf.function(input_signature=sig)
    def grads(o, a):
        return pgrad.per_step_grads(gaussian.log_prob, gaussian.variables, o, a, chunk_size=8)

    want = jacobian_reference(gaussian.log_prob, gaussian.variables, obs, act)
    assert_all_close(grads(obs, act), want)


def test_per_step_norms_match_materialised(policy):
    obs, act = policy.batch(17)
    want = jacobian_reference(policy.log_prob, policy.variables, obs, act)
    want_norms = np.sqrt(sum(np.sum(np.reshape(np.square(j), (17, -1)), 1) for j in want))
    got = pgrad.per_step_norms(policy.log_prob, policy.variables, obs, act, chunk_size=4)
    np.testing.assert_allclose(got, want_norms, rtol=1e-4, atol=1e-6)


def test_unconnected_variable_gets_zero_rows(categorical):
    obs, act = categorical.batch(5)
    extra = tf.Variable(tf.ones([3]))
    got = pgrad.per_step_grads(categorical.log_prob, categorical.variables + [extra], obs, act)
    assert got[-1].shape == (5, 3)
    np.testing.assert_array_equal(got[-1], 0.0)


def test_scalar_output_is_a_clear_value_error(categorical):
    obs, act = categorical.batch(6)
    summed = lambda o, a: tf.reduce_sum(categorical.log_prob(o, a))
    with pytest.raises(ValueError, match=r"must return a \[T\] tensor.*shape \[\]"):
        pgrad.per_step_grads(summed, categorical.variables, obs, act)


def test_two_column_output_is_a_clear_value_error(categorical):
    obs, act = categorical.batch(6)
    wide = lambda o, a: tf.stack([categorical.log_prob(o, a)] * 2, axis=1)
    with pytest.raises(ValueError, match=r"must return a \[T\] tensor"):
        pgrad.per_step_grads(wide, categorical.variables, obs, act)


def test_rows_are_independent_gradients_python_loop(categorical):
    """Row t equals the plain gradient of log pi(a_t|s_t) computed alone."""
    obs, act = categorical.batch(4)
    got = pgrad.per_step_grads(categorical.log_prob, categorical.variables, obs, act)
    for t in range(4):
        with tf.GradientTape() as tape:
            lp = categorical.log_prob(obs[t : t + 1], act[t : t + 1])[0]
        row = tape.gradient(lp, categorical.variables)
        assert_all_close([g[t] for g in got], row)


def test_unconnected_keras_variable_norms_and_engine(categorical):
    """A Keras variable the objective never reads: zero rows everywhere, no crash."""
    import keras

    obs, act = categorical.batch(6)
    extra = keras.Variable(np.ones(3, np.float32))
    variables = categorical.variables + [extra]
    norms = pgrad.per_step_norms(categorical.log_prob, variables, obs, act)
    want = pgrad.per_step_norms(categorical.log_prob, categorical.variables, obs, act)
    np.testing.assert_allclose(norms, want, rtol=1e-6)
    t = pgrad.chain(pgrad.weight_by("returns"), pgrad.clip_per_step(0.1), pgrad.mean_steps())
    grads, _, _ = pgrad.policy_gradients(t, t.init(variables), categorical.log_prob, variables,
                                         (obs, act), {"returns": np.ones(6, np.float32)})
    np.testing.assert_array_equal(grads[-1], 0.0)
    diag = pgrad.tools.diagnostics.policy_diagnostics(categorical.log_prob, variables, (obs, act))
    assert np.isfinite(float(diag["grad_snr"]))
