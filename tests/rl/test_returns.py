"""Returns and GAE against plain Python loops on tiny hand-made arrays."""

import numpy as np
import pytest

import pgrad

GAMMA, LAM = 0.9, 0.8


def loop_returns(r, term, trunc, nv, gamma):
    """Per env, walking back: restart at episode ends, bootstrap at truncation / rollout end."""
    t_len, b = r.shape
    out = np.zeros_like(r)
    for j in range(b):
        g = nv[-1, j]
        for t in reversed(range(t_len)):
            if term[t, j]:
                g = r[t, j]
            elif trunc[t, j]:
                g = r[t, j] + gamma * nv[t, j]
            else:
                g = r[t, j] + gamma * g
            out[t, j] = g
    return out


def loop_gae(r, v, nv, term, trunc, gamma, lam):
    t_len, b = r.shape
    out = np.zeros_like(r)
    for j in range(b):
        a = 0.0
        for t in reversed(range(t_len)):
            delta = r[t, j] + gamma * (0.0 if term[t, j] else nv[t, j]) - v[t, j]
            ends = term[t, j] or trunc[t, j]
            a = delta + (0.0 if ends else gamma * lam * a)
            out[t, j] = a
    return out


def rollout():
    """``[T=6, B=2]``: env 0 terminates at t=2, env 1 is truncated at t=3."""
    r = np.array([[1, 0], [2, 1], [3, 0], [0, 5], [1, 1], [2, 0]], np.float32)
    term = np.zeros((6, 2), np.float32)
    trunc = np.zeros((6, 2), np.float32)
    term[2, 0] = 1
    trunc[3, 1] = 1
    v = np.arange(12, dtype=np.float32).reshape(6, 2) / 10
    nv = np.vstack([v[1:], [[0.7, -0.3]]]).astype(np.float32)  # V(s_{t+1}); last: after rollout
    nv[2, 0] = 99.0  # terminal: must be ignored
    nv[3, 1] = 4.0  # value of the final observation of the truncated episode
    return r, term, trunc, v, nv


def test_discounted_returns_by_hand():
    r = np.array([[1.0], [2.0], [3.0]], np.float32)
    term = np.array([[0], [0], [1]], np.float32)
    got = pgrad.discounted_returns(r, term, np.zeros_like(term), np.zeros_like(r), 0.5)
    np.testing.assert_allclose(got.numpy().ravel(), [1 + 0.5 * (2 + 0.5 * 3), 2 + 1.5, 3])


def test_truncation_bootstraps_termination_does_not():
    r, term, trunc, v, nv = rollout()
    got = pgrad.discounted_returns(r, term, trunc, nv, GAMMA).numpy()
    np.testing.assert_allclose(got, loop_returns(r, term, trunc, nv, GAMMA), rtol=1e-6)
    assert got[2, 0] == pytest.approx(3.0)  # terminal: reward only, 99 ignored
    assert got[3, 1] == pytest.approx(5 + GAMMA * 4.0)  # truncated: bootstrap from final obs
    assert got[5, 0] == pytest.approx(2 + GAMMA * 0.7)  # rollout end: bootstrap


@pytest.mark.parametrize("lam", [0.0, LAM, 1.0])
def test_gae_matches_loop(lam):
    r, term, trunc, v, nv = rollout()
    got = pgrad.gae(r, v, nv, term, trunc, GAMMA, lam).numpy()
    np.testing.assert_allclose(got, loop_gae(r, v, nv, term, trunc, GAMMA, lam), rtol=1e-5,
                               atol=1e-6)


def test_gae_lambda1_is_nstep_return_minus_value_and_lambda0_is_td():
    r, term, trunc, v, nv = rollout()
    adv1 = pgrad.gae(r, v, nv, term, trunc, GAMMA, 1.0).numpy()
    ret = pgrad.discounted_returns(r, term, trunc, nv, GAMMA).numpy()
    np.testing.assert_allclose(adv1, ret - v, rtol=1e-5, atol=1e-6)
    adv0 = pgrad.gae(r, v, nv, term, trunc, GAMMA, 0.0).numpy()
    np.testing.assert_allclose(adv0, r + GAMMA * (1 - term) * nv - v, rtol=1e-6)
    lam_ret = pgrad.lambda_returns(r, v, nv, term, trunc, GAMMA, LAM).numpy()
    np.testing.assert_allclose(lam_ret, pgrad.gae(r, v, nv, term, trunc, GAMMA, LAM) + v)


@pytest.mark.parametrize("steps", [1, 5, 32, 40])
def test_unrolled_recursions_equal_the_scan_bit_for_bit(steps, monkeypatch):
    """Short rollouts of static length are unrolled in the graph; values equal tf.scan's
    exactly (eager and traced; dynamic or long T takes the scan)."""
    import tensorflow as tf

    from pgrad.rl.advantages import returns

    rng = np.random.default_rng(steps)
    r, v, nv = (rng.normal(size=(steps, 3)).astype(np.float32) for _ in range(3))
    term = (rng.random((steps, 3)) < 0.2).astype(np.float32)
    trunc = (rng.random((steps, 3)) < 0.2).astype(np.float32)

    def both():
        return (pgrad.gae(r, v, nv, term, trunc, GAMMA, LAM).numpy(),
                pgrad.discounted_returns(r, term, trunc, nv, GAMMA).numpy())

    traced = tf.function(lambda *a: (pgrad.gae(*a[:5], GAMMA, LAM),
                                     pgrad.discounted_returns(a[0], a[3], a[4], a[2], GAMMA)))
    args = [tf.constant(x) for x in (r, v, nv, term, trunc)]
    got = both(), [x.numpy() for x in traced(*args)]
    dynamic = traced.get_concrete_function(*[tf.TensorSpec([None, 3], tf.float32)] * 5)
    got_dynamic = [x.numpy() for x in dynamic(*args)]
    monkeypatch.setattr(returns, "UNROLL_MAX_STEPS", 0)
    want = both()
    for a, b in zip([*got[0], *got[1], *got_dynamic], [*want, *want, *want]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(want[0], loop_gae(r, v, nv, term, trunc, GAMMA, LAM), rtol=1e-5,
                               atol=1e-5)
