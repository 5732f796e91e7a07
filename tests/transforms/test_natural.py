"""natural_gradient / trust_region against dense numpy linear algebra."""

import numpy as np
import pytest
import tensorflow as tf
from policies import SPACES, SmallPolicy, jacobian_reference

import pgrad
from pgrad.transforms.natural import damped_fisher_solve


def dense_natural(rows, v, damping):
    """Reference: the P x P solve in float64 numpy."""
    rows = np.asarray(rows, np.float64)
    t, p = rows.shape
    fisher = rows.T @ rows / t
    return np.linalg.solve(fisher + damping * np.eye(p), rows.T @ np.asarray(v, np.float64))


def dense_kl(rows, x, damping=0.0):
    """``0.5 x^T (F + damping I) x``: the Fisher estimate, or with ``damping`` TRPO's measure."""
    rows = np.asarray(rows, np.float64)
    return 0.5 * x @ (rows.T @ rows / rows.shape[0]) @ x + 0.5 * damping * x @ x


def flat(grads):
    t = grads[0].shape[0]
    return np.concatenate([np.reshape(np.asarray(g), (t, -1)) for g in grads], axis=1)


def random_grads(t, seed=0, shapes=((3, 2), (4,))):
    rng = np.random.default_rng(seed)
    return [tf.constant(rng.normal(size=(t, *s)), tf.float32) for s in shapes]


@pytest.mark.parametrize("t,p", [(5, 12), (12, 12), (30, 7)])  # T < P, T == P, T > P
@pytest.mark.parametrize("damping", [1e-3, 0.5])
def test_solve_matches_dense(t, p, damping):
    rng = np.random.default_rng(t * p)
    rows = rng.normal(size=(t, p))
    v = rng.normal(size=t)
    x, g_x, residual = damped_fisher_solve(tf.constant(rows), tf.constant(v), damping)
    want = dense_natural(rows, v, damping)
    # float64 throughout; condition numbers up to 5e3 here (damping 1e-3).
    np.testing.assert_allclose(x, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g_x, rows @ want, rtol=1e-10, atol=1e-12)
    assert float(residual) < 1e-13


@pytest.mark.parametrize("t", [4, 40])
def test_solve_with_unknown_shapes_in_tf_function(t):
    rng = np.random.default_rng(3)
    rows, v = rng.normal(size=(t, 9)), rng.normal(size=t)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float64),
                                  tf.TensorSpec([None], tf.float64)])
    def solve(r, w):
        return damped_fisher_solve(r, w, 1e-2)[0]

    np.testing.assert_allclose(solve(rows, v), dense_natural(rows, v, 1e-2), rtol=1e-7)


@pytest.mark.parametrize("t", [3, 40])  # P = 10: both the T x T and the P x P route
@pytest.mark.parametrize("weighted", [False, True])
def test_natural_gradient_transform_matches_dense(t, weighted):
    grads = random_grads(t)
    w = np.random.default_rng(7).normal(size=t).astype(np.float32)
    transform = pgrad.natural_gradient(1e-2, weights_key="adv" if weighted else None)
    out, state = transform.update(grads, transform.init(None), adv=tf.constant(w))
    rows = flat(grads)
    want = dense_natural(rows, (w if weighted else np.ones(t)) / t, 1e-2)
    assert [o.shape for o in out] == [(3, 2), (4,)]
    assert all(o.dtype == tf.float32 for o in out)
    np.testing.assert_allclose(flat([o[None] for o in out])[0], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state.kl, dense_kl(rows, want), rtol=1e-5)
    assert float(state.scale) == 1.0


@pytest.mark.parametrize("ddof", [1, 0])  # sample std (SB3, the default), population std
def test_standardized_weights(ddof):
    grads = random_grads(9)
    w = np.random.default_rng(1).normal(3.0, 2.0, size=9)
    transform = pgrad.natural_gradient(0.1, weights_key="adv", standardize=True, ddof=ddof)
    out, _ = transform.update(grads, transform.init(None), adv=tf.constant(w, tf.float32))
    z = (w - w.mean()) / (w.std(ddof=ddof) + 1e-8)
    want = dense_natural(flat(grads), z / 9, 0.1)
    np.testing.assert_allclose(flat([o[None] for o in out])[0], want, rtol=1e-5, atol=1e-6)


def test_large_damping_tends_to_the_scaled_mean_gradient():
    grads = random_grads(6)
    out, _ = pgrad.natural_gradient(1e6).update(grads, None)
    mean = flat(grads).mean(axis=0)
    np.testing.assert_allclose(flat([o[None] for o in out])[0] * 1e6, mean, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("damping,damped_kl", [(None, True), (1e-2, True), (1e-2, False)])
@pytest.mark.parametrize("max_kl", [1e-4, 1e6])  # binding, not binding
def test_trust_region_matches_dense(damping, damped_kl, max_kl):
    t = 8
    grads = random_grads(t, seed=5)
    w = np.random.default_rng(2).normal(size=t).astype(np.float32)
    transform = pgrad.trust_region(max_kl, weights_key="adv", damping=damping,
                                   damped_kl=damped_kl)
    out, state = transform.update(grads, transform.init(None), adv=tf.constant(w))
    rows = flat(grads)
    direction = rows.T @ (w / t) if damping is None else dense_natural(rows, w / t, damping)
    measure = (damping or 0.0) if damped_kl else 0.0  # TRPO's measure: the damped matrix
    kl0 = dense_kl(rows, direction, measure)
    want_scale = min(1.0, np.sqrt(max_kl / kl0))
    got = flat([o[None] for o in out])[0]
    np.testing.assert_allclose(state.scale, want_scale, rtol=1e-5)
    np.testing.assert_allclose(got, want_scale * direction, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(state.kl, dense_kl(rows, got), rtol=1e-4)  # always undamped
    assert dense_kl(rows, got, measure) <= max_kl * (1 + 1e-5)
    if max_kl < kl0:  # binding: the measured KL sits exactly on the bound
        np.testing.assert_allclose(dense_kl(rows, got, measure), max_kl, rtol=1e-4)


def test_natural_gradient_max_kl_equals_trust_region_with_damping():
    grads = random_grads(5, seed=9)
    a, sa = pgrad.natural_gradient(1e-2, max_kl=1e-3).update(grads, None)
    b, sb = pgrad.trust_region(1e-3, damping=1e-2).update(grads, None)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=1e-6)
    assert float(sa.scale) < 1.0 and np.isclose(float(sa.scale), float(sb.scale))


def reference_npg(policy, obs, act, adv, damping):
    rows = flat(jacobian_reference(policy.log_prob, policy.variables, obs, act))
    return rows, dense_natural(rows, np.asarray(adv, np.float64) / rows.shape[0], damping)


@pytest.mark.parametrize("kind", ["categorical", "gaussian"])
def test_through_the_engine_fisher_from_unweighted_log_prob_grads(kind):
    policy = SmallPolicy(SPACES[kind])
    obs, act = policy.batch(16)
    adv = tf.constant(np.random.default_rng(4).normal(size=16), tf.float32)
    chain = pgrad.chain(pgrad.natural_gradient(1e-3, weights_key="advantages"))
    grads, state, info = pgrad.policy_gradients(
        chain, chain.init(policy.variables), policy.log_prob, policy.variables, (obs, act),
        {"advantages": adv},
    )
    rows, want = reference_npg(policy, obs, act, adv, 1e-3)
    assert rows.shape[0] < rows.shape[1]  # the T x T route
    np.testing.assert_allclose(flat([g[None] for g in grads])[0], want, rtol=2e-3, atol=2e-4)
    assert float(info["path_fused"]) == 0.0
    name = "natural_gradient(0.001)"
    np.testing.assert_allclose(info[f"{name}/kl"], dense_kl(rows, want), rtol=2e-3)


def test_after_weight_by_uses_the_weighted_rows(categorical):
    """The documented alternative: F and g both from the weighted rows w_t G_t."""
    obs, act = categorical.batch(12)
    adv = np.random.default_rng(6).normal(size=12)
    chain = pgrad.chain(pgrad.weight_by("advantages"), pgrad.natural_gradient(1e-3))
    grads, _, _ = pgrad.policy_gradients(
        chain, chain.init(categorical.variables), categorical.log_prob, categorical.variables,
        (obs, act), {"advantages": tf.constant(adv, tf.float32)},
    )
    rows = flat(jacobian_reference(categorical.log_prob, categorical.variables, obs, act))
    weighted = rows * adv[:, None]
    want = dense_natural(weighted, np.ones(12) / 12, 1e-3)
    got = flat([g[None] for g in grads])[0]
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-4)
    _, npg = reference_npg(categorical, obs, act, adv, 1e-3)
    assert not np.allclose(got, npg, rtol=1e-2)  # genuinely a different update


def test_engine_in_tf_function_with_unknown_t(categorical):
    obs, act = categorical.batch(20)
    adv = tf.constant(np.random.default_rng(8).normal(size=20), tf.float32)
    chain = pgrad.trust_region(1e-3, weights_key="advantages", damping=1e-2)
    state0 = chain.init(categorical.variables)

    @tf.function(input_signature=[tf.TensorSpec([None, 4]), tf.TensorSpec([None], tf.int32),
                                  tf.TensorSpec([None])])
    def step(o, a, w):
        grads, state, info = pgrad.policy_gradients(
            chain, state0, categorical.log_prob, categorical.variables, (o, a), {"advantages": w},
            chunk_size=7,
        )
        return grads, state

    grads, state = step(obs, act, adv)
    rows, direction = reference_npg(categorical, obs, act, adv, 1e-2)
    scale = min(1.0, np.sqrt(1e-3 / dense_kl(rows, direction, 1e-2)))
    np.testing.assert_allclose(state.scale, scale, rtol=2e-3)
    np.testing.assert_allclose(flat([g[None] for g in grads])[0], scale * direction,
                               rtol=2e-3, atol=2e-4)


def test_metrics_surface_through_state_metrics():
    chain = pgrad.chain(pgrad.clip_per_step(1.0), pgrad.trust_region(1e-3))
    grads = random_grads(4)
    _, state = chain.update(grads, chain.init(None))
    metrics = pgrad.state_metrics(chain, state)
    assert set(metrics) == {"clip_per_step(1.0)/clip_fraction", "trust_region(0.001)/kl",
                            "trust_region(0.001)/scale", "trust_region(0.001)/cg_iterations",
                            "trust_region(0.001)/cg_residual"}


def test_errors_are_clear():
    with pytest.raises(ValueError, match="damping must be > 0"):
        pgrad.natural_gradient(0.0)
    with pytest.raises(ValueError, match="max_kl must be > 0"):
        pgrad.trust_region(-1.0)
    with pytest.raises(ValueError, match="already removed the step axis"):
        pgrad.chain(pgrad.mean_steps(), pgrad.natural_gradient(1e-3))
    with pytest.raises(pgrad.TransformError, match="no 'advantages'"):
        pgrad.natural_gradient(1e-3, weights_key="advantages").update(random_grads(3), None)


def test_natural_policy_gradient_sgd_step_respects_the_kl_bound(categorical):
    """After SGD(lr), the parameter change d has 0.5 d^T (F + damping I) d == max_kl (bound
    binding here)."""
    import keras

    obs, act = categorical.batch(24)
    adv = tf.constant(np.random.default_rng(3).normal(size=24), tf.float32)
    chain = pgrad.transforms.natural.natural_policy_gradient(damping=0.1, max_kl=1e-4,
                                                             learning_rate=0.05)
    rows = flat(jacobian_reference(categorical.log_prob, categorical.variables, obs, act))
    before = [v.numpy().copy() for v in categorical.variables]
    grads, state, _ = pgrad.policy_gradients(
        chain, chain.init(categorical.variables), categorical.log_prob, categorical.variables,
        (obs, act), {"advantages": adv})
    pgrad.apply_updates(keras.optimizers.SGD(learning_rate=0.05), grads, categorical.variables)
    step = flat([(v.numpy() - b)[None] for v, b in zip(categorical.variables, before)])[0]
    assert float(state[0].scale) < 1.0
    np.testing.assert_allclose(dense_kl(rows, step, 0.1), 1e-4, rtol=1e-3)
    _, want = reference_npg(categorical, obs, act, adv, 0.1)
    cosine = lambda a, b: a @ b / (np.linalg.norm(a) * np.linalg.norm(b))  # noqa: E731
    # Along the natural gradient (float32 weight differences limit the match), which is a
    # genuinely different direction from the plain policy gradient.
    assert cosine(step, want) > 0.998
    assert cosine(step, rows.T @ np.asarray(adv)) < 0.95


def test_composes_with_per_step_clipping(categorical):
    """chain(clip_per_step, natural_gradient): F and g from the clipped rows."""
    obs, act = categorical.batch(10)
    adv = np.random.default_rng(5).normal(size=10)
    chain = pgrad.chain(pgrad.clip_per_step(0.5),
                        pgrad.natural_gradient(1e-2, weights_key="advantages"))
    grads, state, info = pgrad.policy_gradients(
        chain, chain.init(categorical.variables), categorical.log_prob, categorical.variables,
        (obs, act), {"advantages": tf.constant(adv, tf.float32)})
    rows = flat(jacobian_reference(categorical.log_prob, categorical.variables, obs, act))
    norms = np.linalg.norm(rows, axis=1)
    clipped = rows * (0.5 / np.maximum(norms, 0.5))[:, None]
    want = dense_natural(clipped, adv / 10, 1e-2)
    np.testing.assert_allclose(flat([g[None] for g in grads])[0], want, rtol=2e-3, atol=2e-4)
    assert float(info["clip_per_step(0.5)/clip_fraction"]) == np.mean(norms > 0.5)


def test_conjugate_gradient_matches_the_dense_damped_solve():
    """CG with Fisher-vector products from the rows equals the dense P x P solve."""
    from pgrad.transforms.natural import fisher_cg_solve

    rng = np.random.default_rng(3)
    t, p, damping = 40, 25, 0.1
    rows = rng.normal(size=(t, p))
    w = rng.normal(size=t)
    v = w / t
    dense = np.linalg.solve(rows.T @ rows / t + damping * np.eye(p), rows.T @ v)
    x, g_x, its, residual = fisher_cg_solve(tf.constant(rows, tf.float32), tf.constant(v), damping,
                                            iterations=100, tol=1e-20)
    np.testing.assert_allclose(x.numpy(), dense, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(g_x.numpy(), rows @ dense, rtol=1e-4, atol=1e-6)
    assert 0 < int(its) <= 100 and float(residual) < 1e-5


def test_natural_gradient_cg_and_cholesky_agree_and_report():
    rng = np.random.default_rng(4)
    grads = [tf.constant(rng.normal(size=(30, 4, 3)), tf.float32),
             tf.constant(rng.normal(size=(30, 5)), tf.float32)]
    adv = tf.constant(rng.normal(size=30), tf.float32)
    outs = {}
    for solver in ("cholesky", "cg"):
        t = pgrad.natural_gradient(0.05, weights_key="advantages", solver=solver, cg_iters=200)
        outs[solver] = t.update(grads, t.init(None), advantages=adv)
    for a, b in zip(outs["cholesky"][0], outs["cg"][0]):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-3, atol=1e-5)
    state = outs["cg"][1]
    assert float(state.cg_iterations) > 0 and float(state.cg_residual) < 1e-4
    assert float(outs["cholesky"][1].cg_iterations) == 0
    with pytest.raises(ValueError, match="solver must be one of"):
        pgrad.natural_gradient(0.1, solver="lu")


def test_natural_policy_gradient_takes_the_learning_rate_from_the_context(categorical):
    """By default the 1/lr factor is the optimizer's learning rate of this update, which the
    agents put into the context: the same step as the number, and one clear error without it."""
    obs, act = categorical.batch(24)
    adv = tf.constant(np.random.default_rng(3).normal(size=24), tf.float32)
    fixed = pgrad.transforms.natural.natural_policy_gradient(damping=0.1, max_kl=1e-4,
                                                             learning_rate=0.05)
    own = pgrad.transforms.natural.natural_policy_gradient(damping=0.1, max_kl=1e-4)
    outs = []
    for chain, context in ((fixed, {}), (own, {"learning_rate": tf.constant(0.05)})):
        grads, _, _ = pgrad.policy_gradients(
            chain, chain.init(categorical.variables), categorical.log_prob, categorical.variables,
            (obs, act), {"advantages": adv, **context})
        outs.append(flat([g.numpy()[None] for g in grads])[0])
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-6)
    with pytest.raises(pgrad.TransformError, match="learning_rate"):
        pgrad.policy_gradients(own, own.init(categorical.variables), categorical.log_prob,
                               categorical.variables, (obs, act), {"advantages": adv})


def test_an_agent_s_optimizer_learning_rate_reaches_natural_policy_gradient():
    """An A2C agent with SGD and natural_policy_gradient() (no learning rate repeated): each
    update's policy step is the KL-bounded one whatever the scheduled learning rate, so the
    weights move the same amount at learning rates that differ by 10x."""
    import agents

    def policy_step(lr):
        agent = agents.make("a2c", "CartPole-v1", seed=0, num_envs=2, n_steps=16, hidden=[8],
                            optimizer="sgd", learning_rate=lr, max_grad_norm=0.0,
                            baseline=False, transform=pgrad.transforms.natural
                            .natural_policy_gradient(damping=0.1, max_kl=1e-3))
        before = [v.numpy().copy() for v in agent.net.policy_variables]
        agent.step()
        after = [v.numpy() for v in agent.net.policy_variables]
        agent.close()
        return np.concatenate([(a - b).ravel() for a, b in zip(after, before)])

    small, large = policy_step(0.01), policy_step(0.1)
    np.testing.assert_allclose(small, large, rtol=2e-3, atol=1e-7)
