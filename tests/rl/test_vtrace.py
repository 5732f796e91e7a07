"""V-trace against the paper's sum written as a plain Python loop, against GAE on-policy, and
on hand-computed numbers where the truncation of rho and c changes the result."""

import numpy as np
import pytest
import tensorflow as tf

import pgrad

GAMMA = 0.9
INF = float("inf")


def loop_vtrace(r, v, nv, term, trunc, mu, pi, gamma, rho_bar, c_bar, pg_rho_bar, lam):
    """Espeholt et al. (2018), eq. (1), summed term by term per env in float64::

        v_s = V(x_s) + sum_{t=s}^{end} gamma^{t-s} (prod_{i=s}^{t-1} c_i) delta_t

    with the sum ending at the episode's last step (terminated or truncated) or the rollout's,
    and the policy-gradient advantage ``min(pg_rho_bar, rho_s) (r_s + gamma v_{s+1} - V(x_s))``
    (``v_{s+1}`` mixed with ``V(x_{s+1})`` by lambda, as rlax; 0 after a termination, the final
    observation's value after a truncation or at the rollout's end).
    """
    r, v, nv, mu, pi = (np.asarray(x, np.float64) for x in (r, v, nv, mu, pi))
    t_len, b = r.shape
    rho = np.exp(pi - mu)
    vs, q, pg = np.zeros_like(r), np.zeros_like(r), np.zeros_like(r)
    for j in range(b):
        for s in range(t_len):
            total, weight = 0.0, 1.0  # weight = gamma^{t-s} prod_{i=s}^{t-1} c_i
            for t in range(s, t_len):
                next_value = 0.0 if term[t, j] else nv[t, j]
                delta = min(rho_bar, rho[t, j]) * (r[t, j] + gamma * next_value - v[t, j])
                total += weight * delta
                if term[t, j] or trunc[t, j]:
                    break
                weight *= gamma * lam * min(c_bar, rho[t, j])
            vs[s, j] = v[s, j] + total
        for s in range(t_len):
            if term[s, j]:
                nxt = 0.0
            elif trunc[s, j] or s == t_len - 1:
                nxt = nv[s, j]
            else:
                nxt = lam * vs[s + 1, j] + (1.0 - lam) * v[s + 1, j]
            q[s, j] = r[s, j] + gamma * nxt
            pg[s, j] = min(pg_rho_bar, rho[s, j]) * (q[s, j] - v[s, j])
    return vs, pg, q, rho


def rollout(t=7, b=3, seed=0, spread=0.6):
    """Random ``[T, B]`` arrays with episode ends inside: env 0 terminates at t=2, env 1 is
    truncated at t=3, env 2 is both at t=1 (termination wins) and truncated at t=4.
    ``next_values`` is ``values[t + 1]`` inside an episode, as a rollout makes it."""
    rng = np.random.default_rng(seed)
    r = rng.normal(size=(t, b)).astype(np.float32)
    v = rng.normal(size=(t, b)).astype(np.float32)
    nv = np.vstack([v[1:], rng.normal(size=(1, b))]).astype(np.float32)
    term, trunc = np.zeros((t, b), np.float32), np.zeros((t, b), np.float32)
    term[2, 0] = term[1, 2] = trunc[1, 2] = 1
    trunc[3, 1] = trunc[4, 2] = 1
    nv[2, 0] = 99.0  # a terminal next value: must be ignored
    nv[3, 1], nv[4, 2] = 4.0, -2.0  # values of final observations of truncated episodes
    mu = np.log(rng.dirichlet(np.ones(3), size=(t, b))[..., 0]).astype(np.float32)
    pi = (mu + rng.normal(0.0, spread, size=(t, b))).astype(np.float32)
    return r, v, nv, term, trunc, mu, pi


@pytest.mark.parametrize("t", [7, 40])  # unrolled in the graph / tf.scan
@pytest.mark.parametrize("rho_bar,c_bar,pg_rho_bar,lam", [
    (1.0, 1.0, None, 1.0),  # IMPALA
    (INF, INF, None, 1.0),  # untruncated importance sampling
    (1.5, 0.8, 2.0, 1.0),
    (1.0, 1.0, 0.5, 0.7),
])
def test_vtrace_matches_the_papers_sum(t, rho_bar, c_bar, pg_rho_bar, lam):
    r, v, nv, term, trunc, mu, pi = rollout(t)
    got = pgrad.vtrace(r, v, nv, term, trunc, mu, pi, GAMMA, rho_bar=rho_bar, c_bar=c_bar,
                       pg_rho_bar=pg_rho_bar, lambda_=lam)
    pg_bar = rho_bar if pg_rho_bar is None else pg_rho_bar
    vs, pg, q, rho = loop_vtrace(r, v, nv, term, trunc, mu, pi, GAMMA, rho_bar, c_bar, pg_bar, lam)
    assert np.any(rho > 1.5) and np.any(rho < 0.8)  # the truncations are exercised
    np.testing.assert_allclose(got.vs, vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got.pg_advantages, pg, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got.rhos, rho, rtol=1e-5)
    np.testing.assert_allclose(got.q_estimates, q, rtol=1e-5, atol=1e-5)
    assert float(got.vs[2, 0]) == pytest.approx(
        v[2, 0] + min(rho_bar, rho[2, 0]) * (r[2, 0] - v[2, 0]), rel=1e-5)  # 99 ignored


def test_truncation_changes_the_result_by_hand():
    """T = 2, one env, gamma 0.5, rewards 1, values 0, V after the rollout 2, rho = 2 twice.

    rho_bar = c_bar = 1: delta = (1, 2), v_1 = 2, v_0 = 1 + 0.5 * 1 * 2 = 2,
      pg = (1 + 0.5 * v_1, 1 + 0.5 * 2) = (2, 2).
    rho_bar = inf: delta = (2, 4), v_1 = 4, v_0 = 2 + 0.5 * 1 * 4 = 4; pg = 2 * (1 + 2, 1 + 1).
    c_bar = 2: v_0 = 1 + 0.5 * 2 * 2 = 3 (v_1 and pg unchanged: c_1 multiplies nothing).
    """
    args = ([[1.0], [1.0]], [[0.0], [0.0]], [[0.0], [2.0]], [[0.0], [0.0]], [[0.0], [0.0]],
            np.log([[0.25], [0.25]]), np.log([[0.5], [0.5]]))
    base = pgrad.vtrace(*args, 0.5)
    np.testing.assert_allclose(base.vs.numpy().ravel(), [2.0, 2.0], rtol=1e-6)
    np.testing.assert_allclose(base.pg_advantages.numpy().ravel(), [2.0, 2.0], rtol=1e-6)
    np.testing.assert_allclose(base.rhos.numpy().ravel(), [2.0, 2.0], rtol=1e-6)
    no_rho_clip = pgrad.vtrace(*args, 0.5, rho_bar=INF)
    np.testing.assert_allclose(no_rho_clip.vs.numpy().ravel(), [4.0, 4.0], rtol=1e-6)
    np.testing.assert_allclose(no_rho_clip.pg_advantages.numpy().ravel(), [6.0, 4.0], rtol=1e-6)
    wider_c = pgrad.vtrace(*args, 0.5, c_bar=2.0)
    np.testing.assert_allclose(wider_c.vs.numpy().ravel(), [3.0, 2.0], rtol=1e-6)
    np.testing.assert_allclose(wider_c.pg_advantages.numpy().ravel(), [2.0, 2.0], rtol=1e-6)
    pg_only = pgrad.vtrace(*args, 0.5, pg_rho_bar=INF)  # the targets keep rho_bar = 1
    np.testing.assert_allclose(pg_only.vs.numpy().ravel(), [2.0, 2.0], rtol=1e-6)
    np.testing.assert_allclose(pg_only.pg_advantages.numpy().ravel(), [4.0, 4.0], rtol=1e-6)


@pytest.mark.parametrize("lam", [1.0, 0.8, 0.0])
def test_on_policy_vtrace_is_lambda_returns_and_gae(lam):
    """pi = mu: rho = c / lambda = 1, so v_s is the TD(lambda) return and the pg advantage is
    GAE(lambda), terminations and truncations included."""
    r, v, nv, term, trunc, mu, _ = rollout(9, seed=4)
    got = pgrad.vtrace(r, v, nv, term, trunc, mu, mu, GAMMA, lambda_=lam)
    np.testing.assert_array_equal(got.rhos, np.ones_like(r))
    np.testing.assert_allclose(got.vs, pgrad.lambda_returns(r, v, nv, term, trunc, GAMMA, lam),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got.pg_advantages, pgrad.gae(r, v, nv, term, trunc, GAMMA, lam),
                               rtol=1e-5, atol=1e-5)
    if lam == 1.0:
        ret = pgrad.discounted_returns(r, term, trunc, nv, GAMMA)
        np.testing.assert_allclose(got.vs, ret, rtol=1e-5, atol=1e-5)


def test_off_policy_differs_from_gae():
    """The reference above is not trivially GAE: off-policy, the truncated weights move v_s."""
    r, v, nv, term, trunc, mu, pi = rollout(9, seed=4)
    got = pgrad.vtrace(r, v, nv, term, trunc, mu, pi, GAMMA)
    gap = np.abs(got.vs - pgrad.lambda_returns(r, v, nv, term, trunc, GAMMA, 1.0))
    assert gap.max() > 0.1


def test_outputs_carry_no_gradient_and_trace_with_unknown_length():
    r, v, nv, term, trunc, mu, pi = (tf.constant(x) for x in rollout())
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([v, nv, pi])
        out = pgrad.vtrace(r, v, nv, term, trunc, mu, pi, GAMMA)
        total = sum(tf.reduce_sum(x) for x in out)
    assert all(g is None for g in tape.gradient(total, [v, nv, pi]))

    spec = tf.TensorSpec([None, 3], tf.float32)
    traced = tf.function(lambda *a: pgrad.vtrace(*a, GAMMA, rho_bar=1.2, lambda_=0.9),
                         input_signature=[spec] * 7)
    eager = pgrad.vtrace(r, v, nv, term, trunc, mu, pi, GAMMA, rho_bar=1.2, lambda_=0.9)
    for a, b in zip(traced(r, v, nv, term, trunc, mu, pi), eager):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_bad_arguments_are_clear_errors():
    r, v, nv, term, trunc, mu, pi = rollout()
    with pytest.raises(ValueError, match="vtrace: rho_bar must be > 0"):
        pgrad.vtrace(r, v, nv, term, trunc, mu, pi, GAMMA, rho_bar=0.0)
    with pytest.raises(ValueError, match="vtrace: c_bar must be > 0"):
        pgrad.vtrace(r, v, nv, term, trunc, mu, pi, GAMMA, c_bar=-1.0)
    with pytest.raises(ValueError, match=r"vtrace: lambda_ must be in \[0, 1\]"):
        pgrad.vtrace(r, v, nv, term, trunc, mu, pi, GAMMA, lambda_=1.5)
    with pytest.raises(ValueError, match=r"target_log_probs has shape \[7\] but rewards has"):
        pgrad.vtrace(r, v, nv, term, trunc, mu, pi[:, 0], GAMMA)
