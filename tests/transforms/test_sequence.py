"""The GRPO family's chains: each term against a numpy loop, the engine's fused path against the
materialised per-step gradients and the tape of the explicit loss, finite differences for the
sequence-level ratio and the KL term, and the clipping properties."""

import numpy as np
import pytest
import tensorflow as tf

import pgrad
from pgrad import engine
from pgrad.rl.advantages.groups import group_advantages, token_context
from pgrad.transforms import (
    LOSS_TYPES,
    TransformError,
    add_terms,
    chain,
    cispo_weight,
    clipped_ratio,
    describe,
    grpo_chain,
    kl_k3,
    mean_over_sequences,
    sequence_loss,
    transform_from_spec,
    weight_by,
)

N, G, L, V, D = 4, 2, 5, 6, 3
LENGTHS = np.array([5, 3, 1, 4])
MASK = (np.arange(L)[None, :] < LENGTHS[:, None]).astype(np.float32)  # [N, L]


class SoftmaxPolicy:
    """log pi(a | x) = log_softmax(x W + b)[a], one row per token."""

    def __init__(self, seed=0):
        rng = np.random.default_rng(seed)
        self.w = tf.Variable(rng.normal(0.0, 1.0, (D, V)).astype(np.float32))
        self.b = tf.Variable(rng.normal(0.0, 0.5, (V,)).astype(np.float32))
        self.variables = [self.w, self.b]
        self.obs = tf.constant(rng.normal(size=(N * L, D)).astype(np.float32))  # [T, D]
        self.ids = tf.constant(rng.integers(0, V, N * L).astype(np.int32))  # [T]

    def log_prob(self, obs, ids):
        return tf.gather(tf.nn.log_softmax(obs @ self.w + self.b), ids, batch_dims=1)


def batch(policy, seed=1, old_scale=0.3, on_policy=False):
    """Rewards, old and reference log-probs around the current ones: a flat context."""
    rng = np.random.default_rng(seed)
    lp = policy.log_prob(policy.obs, policy.ids).numpy().reshape(N, L)
    old = lp if on_policy else lp + rng.normal(0.0, old_scale, (N, L))
    ref = lp + rng.normal(0.0, 0.3, (N, L))
    adv = group_advantages(rng.normal(size=N).astype(np.float32), G)
    ctx = token_context(MASK, adv, behaviour_log_probs=(old * MASK).astype(np.float32),
                        ref_log_probs=(ref * MASK).astype(np.float32))
    ctx["num_items_in_batch"] = tf.constant(2.0 * MASK.sum())
    return ctx


def numpy_loss(lp, ctx, loss_type, eps=0.2, eps_high=None, beta=0.0, level="token",
               delta=None, corrected=True, max_len=8):
    """TRL's loss as a plain loop over completions and tokens (float64)."""
    eps_high = eps if eps_high is None else eps_high
    lp = np.asarray(lp, np.float64).reshape(N, L)
    old = np.asarray(ctx["behaviour_log_probs"], np.float64).reshape(N, L)
    ref = np.asarray(ctx["ref_log_probs"], np.float64).reshape(N, L)
    adv = np.asarray(ctx["advantages"], np.float64).reshape(N, L)
    per_token = np.zeros((N, L))
    for i in range(N):
        n_i = int(LENGTHS[i])
        seq_log_ratio = sum(lp[i, t] - old[i, t] for t in range(n_i))
        if level == "sequence":
            seq_log_ratio /= max(n_i, 1)
        for t in range(n_i):
            rho = np.exp(seq_log_ratio if level != "token" else lp[i, t] - old[i, t])
            a = adv[i, t]
            if loss_type == "cispo":
                loss = -min(rho, eps_high) * a * lp[i, t]
            else:
                unclipped = (rho if delta is None else min(rho, delta)) * a
                loss = -min(unclipped, min(max(rho, 1 - eps), 1 + eps_high) * a)
            if beta:
                d = ref[i, t] - lp[i, t]
                loss += beta * (np.exp(d) - d - 1) * (rho if corrected else 1.0)
            per_token[i, t] = loss
    if loss_type in ("grpo", "gspo", "rloo"):  # rloo: l_t = l_i, so this is mean_i l_i
        return np.mean([per_token[i].sum() / max(LENGTHS[i], 1) for i in range(N)])
    if loss_type == "bnpo":
        return per_token.sum() / MASK.sum()
    if loss_type == "dr_grpo":
        return per_token.sum() / (N * max_len)
    return per_token.sum() / float(ctx["num_items_in_batch"])  # dapo, cispo


def coefficients(transform, ctx, log_probs):
    """The chain's fused per-row coefficient ``c_t w_t m_t`` (its weighted sum of rows)."""
    form = transform.fused_form()
    grads, _ = form.run(lambda coeff: [coeff], None, transform.init(None), num_steps=N * L,
                        **{**ctx, "log_probs": log_probs})
    return grads[0].numpy()


def finite_difference(fn, x, h=1e-6):
    x = np.asarray(x, np.float64)
    out = np.zeros_like(x)
    for t in range(x.size):
        up, down = x.copy(), x.copy()
        up[t] += h
        down[t] -= h
        out[t] = (fn(up) - fn(down)) / (2 * h)
    return out


CASES = [
    dict(loss_type="grpo"),
    dict(loss_type="grpo", eps_high=0.28, beta=0.04),
    dict(loss_type="grpo", beta=0.1, corrected=False, delta=1.2),
    dict(loss_type="bnpo", eps_high=0.28, beta=0.04),
    dict(loss_type="dr_grpo", beta=0.04),
    dict(loss_type="dapo", eps_high=0.28, beta=0.04),
    dict(loss_type="cispo", eps_high=1.1, beta=0.04),
    dict(loss_type="gspo", eps=0.05, eps_high=0.08, beta=0.04),
    dict(loss_type="gspo", eps=0.05, beta=0.04, corrected=False),
    dict(loss_type="bnpo", eps=0.05, beta=0.04, level="sequence"),
    dict(loss_type="rloo", eps_high=0.28),
]


def make_chain(loss_type, eps=0.2, eps_high=None, beta=0.0, level=None, delta=None,
               corrected=True, max_len=8):
    return grpo_chain(loss_type, epsilon=eps, epsilon_high=eps_high, beta=beta,
                      importance_sampling_level=level, delta=delta,
                      use_bias_correction_kl=corrected, max_completion_length=max_len)


def _np_case(case):
    out = dict(case)
    out.setdefault("level", {"gspo": "sequence", "rloo": "sequence_sum"}.get(case["loss_type"],
                                                                              "token"))
    return out


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{v}" for v in c.values()))
def test_loss_and_gradient_against_a_loop_the_tape_and_both_engine_paths(case):
    policy = SoftmaxPolicy()
    ctx = batch(policy)
    transform = make_chain(**case)
    assert engine.plan(transform) == "fused"
    lp = policy.log_prob(policy.obs, policy.ids)
    # The loss: sequence_loss against the loop.
    got = float(sequence_loss(transform, **{**ctx, "log_probs": lp}))
    want = numpy_loss(lp.numpy(), ctx, **_np_case(case))
    assert got == pytest.approx(want, rel=1e-5, abs=1e-7)
    # The gradient: the tape of the explicit loss, and both engine paths.
    with tf.GradientTape() as tape:
        loss = sequence_loss(transform, **{**ctx, "log_probs": policy.log_prob(policy.obs,
                                                                               policy.ids)})
    explicit = tape.gradient(loss, policy.variables)
    for path in ("fused", "full"):
        out = engine.run(transform, transform.init(policy.variables), policy.log_prob,
                         policy.variables, (policy.obs, policy.ids), ctx, path=path)
        for g, e in zip(out.grads, explicit):
            np.testing.assert_allclose(-g.numpy(), e.numpy(), rtol=2e-4, atol=2e-6)
    # The per-token coefficients against finite differences of the loop (not for CISPO, whose
    # weight is detached: the loop differentiates through it).
    if case["loss_type"] != "cispo":
        fd = finite_difference(lambda x: numpy_loss(x, ctx, **_np_case(case)), lp.numpy())
        np.testing.assert_allclose(-coefficients(transform, ctx, lp), fd, rtol=1e-3, atol=1e-6)


def test_the_chains_run_in_a_graph():
    policy = SoftmaxPolicy()
    ctx = batch(policy)
    transform = make_chain("gspo", eps=0.05, beta=0.04)
    eager = engine.run(transform, transform.init(None), policy.log_prob, policy.variables,
                       (policy.obs, policy.ids), ctx).grads

    @tf.function
    def graph(c):
        return engine.run(transform, transform.init(None), policy.log_prob, policy.variables,
                          (policy.obs, policy.ids), c).grads

    for a, b in zip(graph(ctx), eager):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-7)


def test_gspo_gradient_is_the_sequence_ratio_over_length_times_the_sum_of_scores():
    """grad = 1/N sum_i A_i s_i 1[unclipped] / |o_i| sum_t grad log pi_t."""
    policy = SoftmaxPolicy()
    ctx = batch(policy)
    lp = policy.log_prob(policy.obs, policy.ids)
    coeff = coefficients(make_chain("gspo", eps=0.05), ctx, lp).reshape(N, L)
    lr = ((lp.numpy() - ctx["behaviour_log_probs"].numpy()).reshape(N, L) * MASK)
    s = np.exp(lr.sum(1) / LENGTHS)
    adv = ctx["advantages"].numpy().reshape(N, L)[:, 0]
    unclipped = s * adv <= np.clip(s, 0.95, 1.05) * adv
    assert 0 < unclipped.sum() < N  # both branches
    want = (adv * s * unclipped / LENGTHS / N)[:, None] * MASK
    np.testing.assert_allclose(coeff, want, rtol=1e-5, atol=1e-8)


def test_kl_gradient_is_one_minus_the_reference_ratio_and_zero_at_the_reference():
    policy = SoftmaxPolicy()
    ctx = batch(policy)
    lp = policy.log_prob(policy.obs, policy.ids)
    m = ctx["completion_mask"].numpy()
    term = chain(kl_k3(0.5, importance_corrected=False), mean_over_sequences())
    d = ctx["ref_log_probs"].numpy() - lp.numpy()
    w = coefficients(chain(clipped_ratio(), mean_over_sequences()), {**ctx, "advantages":
                     tf.ones_like(lp), "behaviour_log_probs": lp}, lp)  # w_t m_t (rho = 1, A = 1)
    np.testing.assert_allclose(coefficients(term, ctx, lp), -0.5 * (1 - np.exp(d)) * w, rtol=1e-5,
                               atol=1e-8)
    at_ref = {**ctx, "ref_log_probs": lp}
    assert np.abs(coefficients(term, at_ref, lp)).max() == 0.0
    corrected = chain(kl_k3(0.5), mean_over_sequences())  # unbiased reverse KL: rho (log pi_ref/pi)
    rho = np.exp((lp.numpy() - ctx["behaviour_log_probs"].numpy()) * m)
    np.testing.assert_allclose(coefficients(corrected, ctx, lp), 0.5 * rho * d * w, rtol=1e-4,
                               atol=1e-7)


def test_clipping_properties():
    lp = tf.zeros([6])
    old = -np.log([1.3, 1.3, 0.7, 0.7, 1.1, 1.25]).astype(np.float32)  # ratios
    adv = np.array([1.0, -1.0, 1.0, -1.0, 1.0, 1.0], np.float32)
    ctx = {"advantages": adv, "behaviour_log_probs": old, "log_probs": lp}

    def scale(term):
        return term.scale(None, term.init(None), num_steps=6, **ctx)[0].numpy()

    ratio = np.exp(-old)
    got = scale(clipped_ratio(0.2))
    # Clipped where the ratio left the range on the side the advantage pushes: no gradient.
    np.testing.assert_allclose(got, [0.0, -ratio[1], ratio[2], 0.0, ratio[4], 0.0], rtol=1e-6)
    # Clip-higher: 1.25 is inside (1 - 0.2, 1 + 0.28).
    assert scale(clipped_ratio(0.2, 0.28))[5] == pytest.approx(ratio[5])
    # delta caps the ratio of negative-advantage tokens too: 1.3 > delta = 1.2.
    assert scale(clipped_ratio(0.2, delta=1.2))[1] == 0.0
    # CISPO keeps every token's gradient, its weight capped.
    cispo = scale(cispo_weight(1.2))
    np.testing.assert_allclose(cispo, np.minimum(ratio, 1.2) * adv, rtol=1e-6)
    assert np.all(cispo != 0.0)
    # On the behaviour policy (first iteration), every chain is the advantage-weighted mean.
    on = {**ctx, "behaviour_log_probs": lp}
    for term in (clipped_ratio(0.2, 0.28), cispo_weight(5.0)):
        np.testing.assert_allclose(term.scale(None, term.init(None), num_steps=6, **on)[0], adv)
    assert scale(weight_by("advantages")) == pytest.approx(adv)


def test_several_iterations_on_one_batch_follow_the_explicit_loss():
    """Four optimizer steps on one batch (old log-probs fixed): each step is the tape gradient
    of the explicit loss at the current parameters, and the ratios leave 1."""
    policy = SoftmaxPolicy(seed=3)
    ctx = batch(policy, on_policy=True)
    transform = make_chain("dapo", eps_high=0.28, beta=0.04)
    state = transform.init(policy.variables)
    losses = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            loss = sequence_loss(transform, **{**ctx, "log_probs": policy.log_prob(policy.obs,
                                                                                   policy.ids)})
        explicit = tape.gradient(loss, policy.variables)
        out = engine.run(transform, state, policy.log_prob, policy.variables,
                         (policy.obs, policy.ids), ctx)
        state = out.state
        for g, e in zip(out.grads, explicit):
            np.testing.assert_allclose(-g.numpy(), e.numpy(), rtol=2e-4, atol=2e-6)
        for v, g in zip(policy.variables, out.grads):
            v.assign_add(2.0 * g)  # ascent
        losses.append(float(loss))
    assert losses[-1] < losses[0]
    assert float(out.metrics["clipped_ratio(0.2, 0.28)/ratio_mean"]) != pytest.approx(1.0)
    assert "kl_k3(0.04)/kl" in out.metrics


def test_a_spec_builds_the_same_chain():
    policy = SoftmaxPolicy()
    ctx = batch(policy)
    lp = policy.log_prob(policy.obs, policy.ids)
    spec = [["clipped_ratio", {"epsilon": 0.2, "epsilon_high": 0.28}], "mean_over_tokens"]
    np.testing.assert_allclose(coefficients(transform_from_spec(spec), ctx, lp),
                               coefficients(make_chain("bnpo", eps_high=0.28), ctx, lp))
    by_name = transform_from_spec([["grpo_chain", {"loss_type": "gspo", "beta": 0.04}]])
    np.testing.assert_allclose(coefficients(by_name, ctx, lp),
                               coefficients(make_chain("gspo", beta=0.04), ctx, lp))


def test_describe_prints_the_formula():
    text = describe(grpo_chain("dr_grpo", beta=0.04, max_completion_length=256))
    assert text.splitlines() == [
        "grpo_chain('dr_grpo', epsilon=0.2, epsilon_high=0.2, beta=0.04)",
        "  = chain(clipped_ratio(0.2, 0.2) + kl_k3(0.04), sum_over_max_length(256))",
        "  l_t = -min(rho_t A, clip(rho_t, 1 - 0.2, 1 + 0.2) A) "
        "+ 0.04 (pi_ref/pi - log(pi_ref/pi) - 1) rho_t",
        "  L   = sum_i,t l_t / (N * 256)",
    ]
    assert set(LOSS_TYPES) == {"grpo", "bnpo", "dr_grpo", "dapo", "cispo", "gspo", "rloo"}


def test_bad_arguments_get_one_clear_error():
    with pytest.raises(ValueError, match="loss_type must be one of"):
        grpo_chain("ppo")
    with pytest.raises(ValueError, match="max_completion_length"):
        grpo_chain("dr_grpo")
    with pytest.raises(ValueError, match="level must be one of"):
        clipped_ratio(level="completion")
    with pytest.raises(ValueError, match="epsilon and epsilon_high must be > 0"):
        clipped_ratio(0.0)
    with pytest.raises(TypeError, match="add_terms: takes TokenTerms"):
        add_terms(clipped_ratio(), pgrad.mean_steps())
    with pytest.raises(ValueError, match="starts with one TokenTerm"):
        sequence_loss(chain(pgrad.clip_ratio(0.2), pgrad.mean_steps()), log_probs=tf.zeros([2]))
    gspo = make_chain("gspo")
    ctx = {"advantages": tf.ones([3]), "behaviour_log_probs": tf.zeros([3])}
    with pytest.raises(TransformError, match="no 'sequence_ids'"):
        coefficients(gspo, ctx, tf.zeros([3]))
