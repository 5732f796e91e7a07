"""importance_weight through the engine: on every path, the tape reference of the truncated-IS
policy gradient; composed with weight_by, clip_per_step and natural_gradient; and IMPALA's
gradient from vtrace's advantages."""

import numpy as np
import pytest
import tensorflow as tf
from policies import assert_all_close, jacobian_reference

import pgrad
from pgrad import chain

RHO_BAR = 1.0


def off_policy_batch(policy, t, seed=3):
    """Observations, actions, behaviour log-probs a little off the current ones (so some rho
    exceed rho_bar and some do not), advantages of both signs."""
    obs, act = policy.batch(t)
    rng = np.random.default_rng(seed)
    current = policy.log_prob(obs, act).numpy()
    behaviour = (current + rng.normal(0.0, 0.4, size=t)).astype(np.float32)
    adv = rng.normal(size=t).astype(np.float32)
    rho = np.exp(current - behaviour)
    assert 0 < np.sum(rho > RHO_BAR) < t
    return obs, act, behaviour, adv, rho


def rows_times(jac, w):
    return [j * np.reshape(w, (-1,) + (1,) * (j.ndim - 1)) for j in jac]


@pytest.mark.parametrize("path", ["fused", "full", "auto"])
@pytest.mark.parametrize("in_graph", [False, True])
def test_equals_the_truncated_importance_sampling_gradient(policy, path, in_graph):
    obs, act, behaviour, adv, rho = off_policy_batch(policy, 20)
    weight = np.minimum(rho, RHO_BAR) * adv
    with tf.GradientTape() as tape:  # grad of mean_t stop(min(rho_bar, rho_t)) A_t log pi_t
        surrogate = tf.reduce_mean(weight * policy.log_prob(obs, act))
    want = tape.gradient(surrogate, policy.variables)
    jac = jacobian_reference(policy.log_prob, policy.variables, obs, act)
    assert_all_close([np.mean(r, 0) for r in rows_times(jac, weight)], want, atol=2e-6)

    t = chain(pgrad.importance_weight(RHO_BAR), pgrad.weight_by("advantages"), pgrad.mean_steps())
    assert pgrad.plan(t) == "fused"

    def run(o, a, b, d):
        ctx = {"advantages": d, "behaviour_log_probs": b}
        return pgrad.policy_gradients(t, t.init(policy.variables), policy.log_prob,
                                      policy.variables, (o, a), ctx, path=path)

    fn = tf.function(run) if in_graph else run
    got, state, metrics = fn(obs, act, tf.constant(behaviour), tf.constant(adv))
    assert_all_close(got, want, atol=2e-6)
    assert float(metrics["path_fused"]) == (0.0 if path == "full" else 1.0)
    assert float(state[0].truncated_fraction) == pytest.approx(np.mean(rho > RHO_BAR))
    assert float(metrics["importance_weight/rho_mean"]) == pytest.approx(rho.mean(), rel=1e-4)


def test_composes_with_clip_per_step_on_both_paths(categorical):
    """Clipping reads the norms of the rows as importance_weight and weight_by left them."""
    obs, act, behaviour, adv, rho = off_policy_batch(categorical, 16, seed=5)
    jac = jacobian_reference(categorical.log_prob, categorical.variables, obs, act)
    scaled = rows_times(jac, np.minimum(rho, RHO_BAR) * adv)
    norms = np.sqrt(sum(np.sum(np.reshape(np.square(r), (16, -1)), 1) for r in scaled))
    limit = float(np.median(norms))
    want = [np.mean(r, 0) for r in rows_times(scaled, np.minimum(1.0, limit / norms))]
    t = chain(pgrad.importance_weight(RHO_BAR), pgrad.weight_by("advantages"),
              pgrad.clip_per_step(limit), pgrad.mean_steps())
    ctx = {"advantages": adv, "behaviour_log_probs": behaviour}
    for path in ("fused", "full"):
        got, state, _ = pgrad.policy_gradients(t, t.init(None), categorical.log_prob,
                                               categorical.variables, (obs, act), ctx, path=path)
        assert_all_close(got, want, atol=2e-6)
        assert float(state[2].clip_fraction) == pytest.approx(np.mean(norms > limit))


def test_composes_with_natural_gradient(gaussian):
    """Before natural_gradient, the Fisher is built from the rho-weighted rows (a dense float64
    solve as the reference)."""
    obs, act, behaviour, adv, rho = off_policy_batch(gaussian, 12, seed=7)
    jac = jacobian_reference(gaussian.log_prob, gaussian.variables, obs, act)
    g = np.concatenate([np.reshape(r, (12, -1)) for r in rows_times(jac, np.minimum(rho, 1.0))],
                       axis=1).astype(np.float64)
    damping = 0.1
    fisher = g.T @ g / 12
    want = np.linalg.solve(fisher + damping * np.eye(g.shape[1]), g.T @ (adv / 12.0))
    t = chain(pgrad.importance_weight(RHO_BAR),
              pgrad.natural_gradient(damping, weights_key="advantages"))
    assert pgrad.plan(t) == "full"
    got, _, _ = pgrad.policy_gradients(t, t.init(None), gaussian.log_prob, gaussian.variables,
                                       (obs, act), {"advantages": adv,
                                                    "behaviour_log_probs": behaviour})
    flat = np.concatenate([np.ravel(x) for x in got])
    np.testing.assert_allclose(flat, want, rtol=1e-4, atol=1e-6)


def test_impala_gradient_from_vtrace(categorical):
    """vtrace's pg_advantages weight the steps as importance_weight(pg_rho_bar) times
    q_estimates - values: the two forms give IMPALA's gradient, on both paths."""
    steps, envs = 6, 4
    obs, act, behaviour, _, _ = off_policy_batch(categorical, steps * envs, seed=11)
    rng = np.random.default_rng(0)
    shape = (steps, envs)
    rewards, values = rng.normal(size=shape), rng.normal(size=shape)
    next_values = np.vstack([values[1:], rng.normal(size=(1, envs))])
    terminated, truncated = np.zeros(shape), np.zeros(shape)
    terminated[2, 0] = truncated[3, 1] = 1
    target = categorical.log_prob(obs, act).numpy().reshape(shape)  # [T, B], row-major steps
    out = pgrad.vtrace(rewards, values, next_values, terminated, truncated,
                       behaviour.reshape(shape), target, 0.9, rho_bar=1.0, pg_rho_bar=1.5)
    with tf.GradientTape() as tape:  # IMPALA: grad of mean stop(pg_advantages) log pi
        surrogate = tf.reduce_mean(tf.reshape(out.pg_advantages, [-1])
                                   * categorical.log_prob(obs, act))
    want = tape.gradient(surrogate, categorical.variables)
    t = chain(pgrad.importance_weight(1.5), pgrad.weight_by("advantages"), pgrad.mean_steps())
    ctx = {"advantages": np.ravel(out.q_estimates - values.astype(np.float32)),
           "behaviour_log_probs": behaviour}
    for path in ("fused", "full"):
        got, _, _ = pgrad.policy_gradients(t, t.init(None), categorical.log_prob,
                                           categorical.variables, (obs, act), ctx, path=path)
        assert_all_close(got, want, atol=2e-6)
    assert np.any(out.rhos.numpy() > 1.5)  # the pg truncation is exercised
