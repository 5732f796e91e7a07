"""The engine: fused and materialised paths agree, and equal hand-written references."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from policies import assert_all_close, jacobian_reference

import pgrad
from pgrad import chain


def context(t, seed=2):
    rng = np.random.default_rng(seed)
    return {"advantages": rng.normal(size=t).astype(np.float32),
            "returns": rng.normal(1.0, 2.0, size=t).astype(np.float32)}


CHAINS = {
    "weighted_sum": lambda: chain(pgrad.weight_by("returns"), pgrad.sum_steps()),
    "standardized_mean": lambda: chain(pgrad.weight_by("advantages", standardize=True),
                                       pgrad.mean_steps()),
    "clipped": lambda: chain(pgrad.weight_by("advantages"), pgrad.clip_per_step(0.5),
                             pgrad.mean_steps(), pgrad.clip_by_global_norm(0.2)),
    "running": lambda: chain(pgrad.weight_by_running("returns"), pgrad.scale(0.5),
                             pgrad.clip_by_global_norm(1.0), pgrad.mean_steps()),
}


def test_weighted_sum_equals_surrogate_gradient(policy):
    """chain(weight_by("returns"), sum_steps()) == grad of sum_t R_t log pi_t."""
    obs, act = policy.batch(13)
    ctx = context(13)
    with tf.GradientTape() as tape:
        surrogate = tf.reduce_sum(ctx["returns"] * policy.log_prob(obs, act))
    want = tape.gradient(surrogate, policy.variables)
    t = CHAINS["weighted_sum"]()
    for path in ("fused", "full"):
        got, _, _ = pgrad.policy_gradients(t, t.init(policy.variables), policy.log_prob,
                                           policy.variables, (obs, act), ctx, path=path)
        assert_all_close(got, want)


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_fused_equals_materialised_jacobian(policy, name):
    obs, act = policy.batch(11)
    ctx = context(11)
    t = CHAINS[name]()
    assert pgrad.plan(t) == "fused"
    jac = jacobian_reference(policy.log_prob, policy.variables, obs, act)
    want, want_state = t.update(jac, t.init(policy.variables), **ctx)
    for path in ("fused", "full", "auto"):
        got, state, info = pgrad.policy_gradients(
            t, t.init(policy.variables), policy.log_prob, policy.variables, (obs, act), ctx,
            path=path)
        assert_all_close(got, want, atol=2e-6)
        tf.nest.map_structure(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5),
                              state, want_state)
        assert float(info["grad_norm"]) == pytest.approx(float(pgrad.global_norm(want)), rel=1e-4)


def test_user_function_forces_materialisation_and_matches_reference(gaussian):
    obs, act = gaussian.batch(9)
    ctx = context(9)
    sign_only = pgrad.stateless(lambda grads, **_: [tf.sign(g) for g in grads], name="sign")
    t = chain(pgrad.weight_by("advantages"), sign_only, pgrad.mean_steps())
    assert pgrad.plan(t) == "full"
    jac = jacobian_reference(gaussian.log_prob, gaussian.variables, obs, act)
    want = [tf.reduce_mean(tf.sign(j * np.reshape(ctx["advantages"], (-1,) + (1,) * (j.ndim - 1))),
                           0) for j in jac]
    got, _, info = pgrad.policy_gradients(t, t.init(None), gaussian.log_prob, gaussian.variables,
                                          (obs, act), ctx)
    assert_all_close(got, want)
    assert float(info["path_fused"]) == 0.0
    with pytest.raises(ValueError, match="cannot run fused"):
        pgrad.policy_gradients(t, t.init(None), gaussian.log_prob, gaussian.variables,
                               (obs, act), ctx, path="fused")


def test_post_aggregation_user_function_stays_fused(categorical):
    obs, act = categorical.batch(8)
    ctx = context(8)
    t = chain(pgrad.weight_by("returns"), pgrad.mean_steps(),
              pgrad.stateless(lambda grads, **_: [2.0 * g for g in grads]))
    assert pgrad.plan(t) == "fused"
    base = chain(pgrad.weight_by("returns"), pgrad.mean_steps())
    got, _, _ = pgrad.policy_gradients(t, t.init(None), categorical.log_prob,
                                       categorical.variables, (obs, act), ctx)
    ref, _, _ = pgrad.policy_gradients(base, base.init(None), categorical.log_prob,
                                       categorical.variables, (obs, act), ctx)
    assert_all_close(got, [2.0 * r for r in ref])


def test_chain_without_aggregation_is_a_clear_error(categorical):
    obs, act = categorical.batch(5)
    t = chain(pgrad.weight_by("returns"))
    with pytest.raises(pgrad.TransformError, match="end it with mean_steps"):
        pgrad.policy_gradients(t, t.init(None), categorical.log_prob, categorical.variables,
                               (obs, act), context(5))


def test_engine_and_optimizer_in_one_tf_function(categorical):
    """A user's stateless transform runs through the engine and a Keras optimizer step."""
    obs, act = categorical.batch(16)
    ctx = context(16)
    double = pgrad.stateless(lambda grads, **_: [2.0 * g for g in grads], name="double")
    t = chain(pgrad.weight_by("advantages"), double, pgrad.mean_steps())
    variables = categorical.variables
    before = [v.numpy().copy() for v in variables]
    opt = keras.optimizers.SGD(0.1)

    @tf.function
    def step(o, a, adv):
        grads, _, info = pgrad.policy_gradients(t, t.init(variables), categorical.log_prob,
                                                variables, (o, a), {"advantages": adv})
        pgrad.apply_updates(opt, grads, variables)
        return grads

    grads = step(obs, act, ctx["advantages"])
    for b, v, g in zip(before, variables, grads):  # ascent: w <- w + lr * g
        np.testing.assert_allclose(v.numpy(), b + 0.1 * g.numpy(), atol=1e-6)
    # grads were computed at `before`; check them against a reference on restored weights
    for v, b in zip(variables, before):
        v.assign(b)
    jac = jacobian_reference(categorical.log_prob, variables, obs, act)
    w = ctx["advantages"]
    want = [np.mean(2 * j * w.reshape((-1,) + (1,) * (j.ndim - 1)), 0) for j in jac]
    assert_all_close(grads, want)
