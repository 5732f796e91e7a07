"""The natural-gradient step against the reference algorithms' formula, in dense float64.

TRPO (Schulman's modular_rl, OpenAI baselines, sb3-contrib, Spinning Up, Tianshou) and mjrl's NPG
solve ``(F + damping I) x = g`` and take ``sqrt(2 max_kl / x^T (F + damping I) x) x``, the
damping inside the quadratic form; ``damped_kl=False`` keeps pgrad's earlier ``x^T F x``. Both
routes of the direct solve (``T < P`` and ``T >= P``) and conjugate gradient are checked on a
policy's float32 log-prob gradients at damping 1e-3, where the float32 Gram product alone is
visibly off.
"""

import functools

import numpy as np
import pytest
import tensorflow as tf
from policies import SPACES, SmallPolicy, jacobian_reference

import pgrad
from pgrad.transforms.natural import damped_fisher_solve, fisher_cg_solve


def flat(grads):
    t = grads[0].shape[0]
    return np.concatenate([np.reshape(np.asarray(g), (t, -1)) for g in grads], axis=1)


@functools.cache  # tensors are immutable; tape.jacobian is the slow part of these tests
def policy_grads(kind, t, seed=1):
    """Per-step log-prob gradients of a small policy (``P`` = 132 Gaussian, 139 categorical)."""
    policy = SmallPolicy(SPACES[kind])
    obs, act = policy.batch(t, seed=seed)
    return jacobian_reference(policy.log_prob, policy.variables, obs, act)  # float32


def dense_solve(rows, v, damping):
    """The ``P x P`` damped system ``(G^T G / T + damping I) x = G^T v`` in float64 numpy."""
    rows = np.asarray(rows, np.float64)
    t, p = rows.shape
    return np.linalg.solve(rows.T @ rows / t + damping * np.eye(p), rows.T @ v)


def reference_step(rows, v, damping, max_kl, damped_kl, exact):
    """The normalised (``exact``) or bounded step, in float64."""
    rows = np.asarray(rows, np.float64)
    x = dense_solve(rows, v, damping)
    g = rows.T @ v
    # g^T x = x^T (F + damping I) x for the exact solve; x^T F x = ||G x||^2 / T.
    quad = g @ x if damped_kl else np.sum((rows @ x) ** 2) / rows.shape[0]
    factor = np.sqrt(2.0 * max_kl / quad)
    return (factor if exact else min(1.0, factor)) * x


def rel_err(a, b):
    return np.linalg.norm(np.asarray(a) - b) / np.linalg.norm(b)


def weights(t, seed=0):
    w = np.random.default_rng(seed).normal(size=t)
    return (w - w.mean()) / w.std(ddof=1)


ROUTES = [("gaussian", 64), ("gaussian", 200), ("categorical", 64)]  # T < P, T >= P, T < P


@pytest.mark.parametrize("kind,t", ROUTES)
def test_direct_solve_of_float32_gradients_has_float64_accuracy(kind, t):
    """Damping 1e-3: the float32 Gram alone is off by > 1e-7; two float64 refinement steps
    bring both routes to the dense float64 solve (the docs state 1e-12 on 64-64 MLPs)."""
    rows = flat(policy_grads(kind, t))
    v = weights(t) / t
    want = dense_solve(rows, v, 1e-3)
    x, g_x, residual = damped_fisher_solve(tf.constant(rows), tf.constant(v), 1e-3)
    assert rel_err(x, want) < 1e-10
    np.testing.assert_allclose(g_x, rows.astype(np.float64) @ want, rtol=1e-9, atol=1e-12)
    assert float(residual) < 1e-11  # float64's floor here: 1e-16 * cond (3e3)
    unrefined, _, residual0 = damped_fisher_solve(tf.constant(rows), tf.constant(v), 1e-3,
                                                  refine_steps=0)
    assert rel_err(unrefined, want) > 1e-7  # the float32 Gram's error, which refinement removes
    assert float(residual0) > 1e-9  # and the reported residual shows it


@pytest.mark.parametrize("kind,t", ROUTES)
@pytest.mark.parametrize("damped_kl", [True, False])
@pytest.mark.parametrize("damping", [0.1, 1e-3])  # NPG's default; the ill-conditioned case
def test_exact_step_is_the_normalised_step(kind, t, damped_kl, damping):
    grads = policy_grads(kind, t)
    w = weights(t)
    transform = pgrad.natural_gradient(damping, weights_key="adv", max_kl=0.01, exact_kl=True,
                                       damped_kl=damped_kl)
    out, state = transform.update(grads, transform.init(None), adv=tf.constant(w, tf.float32))
    rows = flat(grads).astype(np.float64)
    got = flat([o[None] for o in out])[0]
    want = reference_step(rows, w / t, damping, 0.01, damped_kl, exact=True)
    assert rel_err(got, want) < 1e-6  # the float32 output's rounding
    other = reference_step(rows, w / t, damping, 0.01, not damped_kl, exact=True)
    assert rel_err(other, want) > 1e-3  # the two conventions are told apart at this damping
    x_fisher = 0.5 * np.sum((rows @ got) ** 2) / t
    measured = x_fisher + (0.5 * damping * got @ got if damped_kl else 0.0)
    np.testing.assert_allclose(measured, 0.01, rtol=1e-5)
    np.testing.assert_allclose(float(state.kl), x_fisher, rtol=1e-5)  # the Fisher estimate


@pytest.mark.parametrize("damped_kl", [True, False])
@pytest.mark.parametrize("max_kl", [1e-4, 10.0])  # binding, not binding
def test_bounded_step_scales_down_only(damped_kl, max_kl):
    t = 64
    grads = policy_grads("gaussian", t)
    w = weights(t)
    transform = pgrad.natural_gradient(0.1, weights_key="adv", max_kl=max_kl,
                                       damped_kl=damped_kl)
    out, state = transform.update(grads, transform.init(None), adv=tf.constant(w, tf.float32))
    rows = flat(grads)
    want = reference_step(rows, w / t, 0.1, max_kl, damped_kl, exact=False)
    assert rel_err(flat([o[None] for o in out])[0], want) < 1e-6
    assert (float(state.scale) < 1.0) == (max_kl < 1.0)


def test_npg_step_length_under_the_two_measures():
    """The factor between the conventions is sqrt(x^T (F + d I) x / x^T F x), > 1."""
    t = 64
    grads = policy_grads("categorical", t)
    w = tf.constant(weights(t), tf.float32)
    steps = {}
    for damped in (True, False):
        transform = pgrad.natural_gradient(0.1, weights_key="adv", max_kl=0.01, exact_kl=True,
                                           damped_kl=damped)
        steps[damped] = flat([o[None] for o in transform.update(grads, None, adv=w)[0]])[0]
    rows = flat(grads).astype(np.float64)
    x = dense_solve(rows, weights(t) / t, 0.1)
    fisher = np.sum((rows @ x) ** 2) / t
    ratio = np.linalg.norm(steps[False]) / np.linalg.norm(steps[True])
    np.testing.assert_allclose(ratio, np.sqrt((fisher + 0.1 * x @ x) / fisher), rtol=1e-6)
    assert ratio > 1.01


@pytest.mark.parametrize("t", [64, 200])  # T < P and T >= P: CG works in P-space either way
def test_conjugate_gradient_at_damping_1e3(t):
    """Converged CG (float64 Fisher-vector products) equals the dense float64 solve; truncated
    at the default 10 iterations its error is what its reported residual allows."""
    grads = policy_grads("gaussian", t)
    rows = flat(grads)
    v = weights(t) / t
    want = dense_solve(rows, v, 1e-3)
    x, _, its, residual = fisher_cg_solve(tf.constant(rows), tf.constant(v), 1e-3,
                                          iterations=2000, tol=1e-30)
    assert rel_err(x, want) < 1e-9 and float(residual) < 1e-12
    transform = pgrad.natural_gradient(1e-3, weights_key="adv", solver="cg")  # 10 iterations
    out, state = transform.update(grads, None, adv=tf.constant(weights(t), tf.float32))
    got = flat([o[None] for o in out])[0].astype(np.float64)
    r64 = rows.astype(np.float64)
    b = r64.T @ v
    residual = np.linalg.norm(b - (r64.T @ (r64 @ got) / t + 1e-3 * got)) / np.linalg.norm(b)
    np.testing.assert_allclose(float(state.cg_residual), residual, rtol=1e-3)
    assert float(state.cg_iterations) == 10 and residual > 1e-3  # far from converged
    cond = np.linalg.cond(r64.T @ r64 / t + 1e-3 * np.eye(r64.shape[1]))
    assert rel_err(got, want) <= cond * residual


def test_direct_solve_reports_its_residual():
    t = 64
    grads = policy_grads("gaussian", t)
    transform = pgrad.natural_gradient(1e-3, weights_key="adv")
    _, state = transform.update(grads, None, adv=tf.constant(weights(t), tf.float32))
    assert float(state.cg_iterations) == 0.0 and 0.0 < float(state.cg_residual) < 1e-11


def test_bad_options_are_clear():
    with pytest.raises(ValueError, match="damped_kl must be true or false"):
        pgrad.natural_gradient(0.1, max_kl=0.01, damped_kl="yes")
    with pytest.raises(ValueError, match="ddof must be 0"):
        pgrad.trust_region(0.01, ddof=2)
