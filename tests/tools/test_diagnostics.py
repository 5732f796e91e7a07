"""Gradient diagnostics on hand-made per-step gradients with known SNR and cosines."""

import math

import numpy as np
import pytest
import tensorflow as tf
from policies import jacobian_reference

import pgrad
from pgrad.tools.diagnostics import diagnostics_from_stats, norm_diagnostics, per_step_diagnostics

# g_t = (2, 0) + e_t with e = (+-1, 0), (0, +-1): mean (2, 0), sum_t ||e_t||^2 = 4,
# tr(Sigma) = 4 / 3, SNR = ||mean||^2 / (tr(Sigma) / T) = 4 / (1/3) = 12.
ROWS = np.array([[3.0, 0.0], [1.0, 0.0], [2.0, 1.0], [2.0, -1.0]])
S5 = math.sqrt(5.0)
KNOWN = {
    "grad_snr": 12.0,
    "mean_cosine": (1.0 + 1.0 + 2 / S5 + 2 / S5) / 4,  # cos((3,0),(2,0)) = 1, cos((2,1),(2,0))
    "mean_grad_norm": 2.0,
    "step_norm_min": 1.0,
    "step_norm_median": S5,  # sorted norms [1, sqrt5, sqrt5, 3]
    "step_norm_p90": S5 + 0.7 * (3.0 - S5),  # position 0.9 * 3 = 2.7
    "step_norm_max": 3.0,
    "clip_fraction": 0.75,  # max_norm 2: 3, sqrt5, sqrt5 are above
}


def as_two_variables(rows):
    """Splits [T, 2] rows into a [T, 1, 1] and a [T, 1] 'variable' to exercise flattening."""
    rows = tf.constant(rows, tf.float32)
    return [tf.reshape(rows[:, :1], [-1, 1, 1]), rows[:, 1:]]


def check(got, want):
    assert set(want) <= set(got)
    for key, value in want.items():
        np.testing.assert_allclose(float(got[key]), value, rtol=1e-5, err_msg=key)


def test_known_snr_cosine_quantiles_from_full_gradients():
    check(per_step_diagnostics(as_two_variables(ROWS), max_norm=2.0), KNOWN)


def test_known_values_from_norms_and_dots():
    mean = ROWS.mean(0)
    got = diagnostics_from_stats(np.linalg.norm(ROWS, axis=1), ROWS @ mean, mean @ mean, 2.0)
    check(got, KNOWN)


def test_norms_only_variant_gives_quantiles_and_clip_fraction():
    got = norm_diagnostics(tf.constant(np.linalg.norm(ROWS, axis=1)), max_norm=2.0)
    assert set(got) == {"step_norm_min", "step_norm_median", "step_norm_p90", "step_norm_max",
                        "clip_fraction"}
    check(got, {k: v for k, v in KNOWN.items() if k in got})
    assert "clip_fraction" not in norm_diagnostics(tf.ones([3]))


def test_weights_scale_the_terms():
    # w = (1, 1, 2, -1) turns the rows into (3,0), (1,0), (4,2), (-2,1).
    w = np.array([1.0, 1.0, 2.0, -1.0])
    terms = ROWS * w[:, None]
    mean = terms.mean(0)
    cosines = terms @ mean / (np.linalg.norm(terms, axis=1) * np.linalg.norm(mean))
    spread = ((terms - mean) ** 2).sum()
    want = {
        "grad_snr": mean @ mean / (spread / 3 / 4),
        "mean_cosine": cosines.mean(),
        "step_norm_max": math.sqrt(20.0),
    }
    check(per_step_diagnostics(as_two_variables(ROWS), weights=tf.constant(w)), want)


def test_identical_steps_have_cosine_one_and_infinite_snr():
    got = per_step_diagnostics([tf.constant(np.tile([[1.0, -2.0]], (5, 1)))])
    assert float(got["mean_cosine"]) == pytest.approx(1.0)
    assert math.isinf(float(got["grad_snr"]))


def test_zero_mean_steps_have_snr_zero_and_cosine_zero():
    got = per_step_diagnostics([tf.constant([[1.0, 2.0], [-1.0, -2.0]])])
    assert float(got["grad_snr"]) == 0.0
    assert float(got["mean_cosine"]) == 0.0


def test_snr_matches_a_monte_carlo_definition():
    """Large T: grad_snr ~ ||mu||^2 / (tr(C) / T) for rows drawn from N(mu, C)."""
    rng = np.random.default_rng(0)
    mu, sd, t = np.array([0.3, -0.1, 0.2]), np.array([1.0, 2.0, 0.5]), 4000
    rows = mu + sd * rng.normal(size=(t, 3))
    got = float(per_step_diagnostics([tf.constant(rows)])["grad_snr"])
    want = (mu @ mu) / ((sd**2).sum() / t)
    assert got == pytest.approx(want, rel=0.1)


@pytest.mark.parametrize("weighted", [False, True])
def test_cheap_policy_path_equals_materialised(policy, weighted):
    obs, act = policy.batch(13)
    w = tf.constant(np.random.default_rng(2).normal(size=13), tf.float32) if weighted else None
    rows = jacobian_reference(policy.log_prob, policy.variables, obs, act)
    want = per_step_diagnostics(rows, weights=w, max_norm=1.0)
    got = pgrad.policy_diagnostics(policy.log_prob, policy.variables, (obs, act), w,
                                   max_norm=1.0, chunk_size=5)
    assert set(got) == set(want)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=2e-4, atol=1e-6, err_msg=key)


def test_cheap_policy_path_inside_tf_function(categorical):
    obs, act = categorical.batch(11)
    w = tf.constant(np.linspace(-1.0, 2.0, 11), tf.float32)

    @tf.function(input_signature=[tf.TensorSpec([None, 4]), tf.TensorSpec([None], tf.int32),
                                  tf.TensorSpec([None])])
    def diag(o, a, weights):
        return pgrad.policy_diagnostics(categorical.log_prob, categorical.variables, (o, a),
                                        weights, chunk_size=4)

    got = diag(obs, act, w)
    want = per_step_diagnostics(
        jacobian_reference(categorical.log_prob, categorical.variables, obs, act), weights=w)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=2e-4, atol=1e-6, err_msg=key)


def test_reuses_norms_the_engine_already_computed(categorical):
    obs, act = categorical.batch(9)
    norms = pgrad.per_step_norms(categorical.log_prob, categorical.variables, obs, act)
    a = pgrad.policy_diagnostics(categorical.log_prob, categorical.variables, (obs, act),
                                 norms=norms)
    b = pgrad.policy_diagnostics(categorical.log_prob, categorical.variables, (obs, act))
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-6, err_msg=key)
