"""MAPPO's value normalisation: the statistics' update rule and the targets against a plain
numpy re-implementation, the normalised value loss's gradient against a hand-derived one, the
agents' wiring (an update's statistics and value loss recomputed from its rollout), and
save/load continuing exactly."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import agents
from agents.update import loss as loss_lib
from agents.update.value_norm import ValueNormTargets
from pgrad.rl.observations.normalize import ValueNormalizer

SPREAD = "mpe2.simple_spread_v3:parallel_env"
TINY = dict(num_envs=2, n_steps=10, epochs=2, num_minibatches=2)


class NumpyValueNorm:
    """MAPPO's ``ValueNorm`` (on-policy ``onpolicy/utils/valuenorm.py``) in plain numpy."""

    def __init__(self, beta=0.99999, eps=1e-5, min_var=1e-2):
        self.beta, self.eps, self.min_var = beta, eps, min_var
        self.m = self.q = self.d = 0.0

    def update(self, x, w=None):
        x = np.asarray(x, np.float64).reshape(-1)
        w = np.ones_like(x) if w is None else np.asarray(w, np.float64).reshape(-1)
        keep = x[w > 0]
        if keep.size == 0:
            return
        b = self.beta
        self.m = b * self.m + (1 - b) * keep.mean()
        self.q = b * self.q + (1 - b) * (keep ** 2).mean()
        self.d = b * self.d + (1 - b)

    def mean_var(self):
        d = max(self.d, self.eps)
        mean = self.m / d
        return mean, max(self.q / d - mean ** 2, self.min_var)

    def normalize(self, x):
        mean, var = self.mean_var()
        return (np.asarray(x, np.float64) - mean) / np.sqrt(var)

    def denormalize(self, y):
        mean, var = self.mean_var()
        return np.asarray(y, np.float64) * np.sqrt(var) + mean


def numpy_gae(r, v, nv, term, trunc, gamma, lam):
    """GAE(lambda) by a plain backward loop over ``[T, B]`` arrays."""
    T, B = r.shape
    adv = np.zeros((T, B))
    for b in range(B):
        nxt = 0.0
        for t in reversed(range(T)):
            delta = r[t, b] + gamma * (1 - term[t, b]) * nv[t, b] - v[t, b]
            nxt = delta + gamma * lam * (1 - term[t, b]) * (1 - trunc[t, b]) * nxt
            adv[t, b] = nxt
    return adv


@pytest.mark.parametrize("beta", [0.99999, 0.9])
def test_update_rule_matches_numpy(beta):
    rng = np.random.default_rng(0)
    tf_norm, ref = ValueNormalizer(beta=beta), NumpyValueNorm(beta=beta)
    probe = rng.normal(size=7) * 30.0
    # Before any update: mean 0, variance at its floor 1e-2 (MAPPO's start).
    np.testing.assert_allclose(tf_norm.normalize(tf.constant(probe)).numpy(), probe / 0.1)
    for k in range(6):
        x = rng.normal(-40.0 + 5 * k, 10.0 + k, size=(5, 4))
        w = (rng.random((5, 4)) > 0.3).astype(np.float32) if k % 2 else None
        tf_norm.update(tf.constant(x, tf.float32), None if w is None else tf.constant(w))
        ref.update(x.astype(np.float32), w)
        mean, var = (t.numpy() for t in tf_norm.mean_var())
        np.testing.assert_allclose([mean, var], ref.mean_var(), rtol=1e-9)
        np.testing.assert_allclose(tf_norm.normalize(tf.constant(probe)).numpy(),
                                   ref.normalize(probe), rtol=1e-9)
        back = tf_norm.denormalize(tf_norm.normalize(tf.constant(probe)))
        np.testing.assert_allclose(back.numpy(), probe, rtol=1e-9)
    assert abs(ref.mean_var()[0] - (-40.0 + 12.5)) < 3.0  # ~ the mean of the batch means
    tf_norm.update(tf.ones([3]), tf.zeros([3]))  # an all-dead batch changes nothing
    np.testing.assert_allclose([t.numpy() for t in tf_norm.mean_var()], ref.mean_var(),
                               rtol=1e-9)


def test_bad_beta_is_one_line():
    with pytest.raises(ValueError, match=r"ValueNormalizer: beta must be in \(0, 1\); got 1.0"):
        ValueNormalizer(beta=1.0)


def test_targets_match_numpy():
    """Denormalised values into GAE, returns into the statistics, normalised returns out."""
    rng = np.random.default_rng(1)
    T, B, gamma, lam = 6, 3, 0.99, 0.95
    r = rng.normal(-1.0, 0.5, (T, B)).astype(np.float32)
    v = rng.normal(size=(T, B)).astype(np.float32)
    nv = rng.normal(size=(T, B)).astype(np.float32)
    term = np.zeros((T, B), np.float32)
    trunc = np.zeros((T, B), np.float32)
    term[2, 0], trunc[4, 1] = 1.0, 1.0
    live = np.ones((T, B), np.float32)
    live[4:, 2] = 0.0
    norm, ref = ValueNormalizer(), NumpyValueNorm()
    warm = rng.normal(-20.0, 4.0, (T, B))  # statistics away from their start
    norm.update(tf.constant(warm))
    ref.update(warm)
    targets = ValueNormTargets(gamma, lam, norm, tf.Variable(live))
    adv, ret, extra = targets(*(tf.constant(x) for x in (r, term, trunc, v, nv)))
    v_raw, nv_raw = ref.denormalize(v), ref.denormalize(nv)
    want_adv = numpy_gae(r, v_raw, nv_raw, term, trunc, gamma, lam)
    ref.update(want_adv + v_raw, live)
    np.testing.assert_allclose(adv.numpy(), want_adv, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(ret.numpy(), ref.normalize(want_adv + v_raw), rtol=1e-5,
                               atol=1e-5)
    assert extra == {} and float(norm.debiasing_term.numpy()) == pytest.approx(ref.d, rel=1e-12)


@pytest.mark.parametrize("clip", [0.0, 0.2])
def test_normalised_value_loss_gradient_matches_hand_derived(clip):
    """``vf_coef * value_loss(v, normalize(R), v_old, clip)`` of a linear critic
    ``v = x w + b``: the tape's gradient against the derivative written out by hand."""
    rng = np.random.default_rng(2)
    N, D, vf_coef = 32, 4, 0.5
    x = rng.normal(size=(N, D))
    w0, b0 = rng.normal(size=D), 0.3
    v_old = x @ w0 + b0 + rng.normal(0.0, 0.3, N)  # the rollout's outputs, near the current
    ref = NumpyValueNorm()
    raw = rng.normal(-30.0, 8.0, N)
    ref.update(raw)
    y = ref.normalize(raw)  # the critic's targets
    norm = ValueNormalizer()
    norm.update(tf.constant(raw))
    w, b = tf.Variable(w0), tf.Variable(b0, dtype=tf.float64)
    with tf.GradientTape() as tape:
        v = tf.linalg.matvec(tf.constant(x), w) + b
        loss = vf_coef * loss_lib.value_loss(v, norm.normalize(tf.constant(raw)),
                                             tf.constant(v_old), clip)
    gw, gb = tape.gradient(loss, [w, b])
    # By hand: d/dv_i of mean(max(u_i, c_i)), u = (y - v)^2, c = (y - v_old - clip(v - v_old))^2
    v_np = x @ w0 + b0
    u = (y - v_np) ** 2
    dv = -2.0 * (y - v_np)
    if clip > 0:
        v_clip = v_old + np.clip(v_np - v_old, -clip, clip)
        c = (y - v_clip) ** 2
        inside = np.abs(v_np - v_old) < clip
        dv = np.where(u >= c, dv, np.where(inside, -2.0 * (y - v_clip), 0.0))
        assert 0 < (u < c).sum() < N  # both branches are exercised
    dv *= vf_coef / N
    np.testing.assert_allclose(gw.numpy(), x.T @ dv, rtol=1e-9)
    np.testing.assert_allclose(gb.numpy(), dv.sum(), rtol=1e-9)


def test_mappo_update_uses_the_normalised_targets():
    """One update of ``mappo`` (1 epoch, 1 minibatch): the statistics and the reported value
    loss equal numpy's, recomputed from the rollout and the critic that collected it."""
    pytest.importorskip("mpe2")
    agent = agents.make("mappo", SPREAD, seed=3, num_envs=2, n_steps=10, epochs=1,
                        num_minibatches=1)
    try:
        assert agent.cfg.value_norm and agent.cfg.clip_range_vf == 0.2
        assert "value_normalizer" in agent.trackables()
        agent.step()  # statistics away from their start
        norm = agent.update_targets.normalizer
        ref = NumpyValueNorm()
        ref.m, ref.q, ref.d = (float(x.numpy()) for x in (
            norm.running_mean, norm.running_mean_sq, norm.debiasing_term))
        traj, _, updates, base, taken, rec = agent._rollout()
        T, B = traj.rewards.shape
        obs = np.asarray(traj.observations, np.float32).reshape(T * B, -1)
        nxt = np.asarray(traj.next_observations, np.float32).reshape(T * B, -1)
        v = agent.net.value(obs).numpy().reshape(T, B)  # normalised outputs
        nv = agent.net.value(nxt).numpy().reshape(T, B)
        v_raw, nv_raw = ref.denormalize(v), ref.denormalize(nv)
        adv = numpy_gae(np.asarray(traj.rewards, np.float64), v_raw, nv_raw,
                        np.asarray(traj.terminated, np.float64),
                        np.asarray(traj.truncated, np.float64), 0.99, 0.95)
        ref.update(adv + v_raw, traj.mask)
        metrics = agent._update_on(traj, updates, base, taken, rec, fixed_shape=False)
        got = [float(x.numpy()) for x in (norm.running_mean, norm.running_mean_sq,
                                          norm.debiasing_term)]
        np.testing.assert_allclose(got, [ref.m, ref.q, ref.d], rtol=1e-5)
        want_loss = np.mean((ref.normalize(adv + v_raw) - v) ** 2)  # no clip at the first step
        np.testing.assert_allclose(metrics["value_loss"], want_loss, rtol=1e-4)
        assert metrics["value_loss"] < 10.0  # normalised units (raw returns are ~ -50)
    finally:
        agent.close()


def test_save_load_restores_the_statistics_and_continues_exactly(tmp_path):
    pytest.importorskip("mpe2")
    agent = agents.make("ippo", SPREAD, seed=1, **TINY, value_norm=True)
    agent.learn(20, progress=False)
    agent.save(tmp_path / "a")
    loaded = agents.load(tmp_path / "a", env_id=SPREAD)
    try:
        stats = lambda a: [float(x.numpy()) for x in a.update_targets.normalizer.variables]  # noqa: E731
        assert stats(loaded) == stats(agent) and stats(agent)[2] > 0
        for a in (agent, loaded):  # the same games from here on
            a.collector.reset(seed=7)
            a.learn(20, progress=False)
        assert stats(loaded) == stats(agent)
        for x, y in zip(agent.net.variables, loaded.net.variables):
            np.testing.assert_array_equal(x.numpy(), y.numpy())
    finally:
        agent.close(), loaded.close()


def test_value_norm_off_and_coma_keep_plain_gae():
    pytest.importorskip("mpe2")
    from agents.update.targets import GAETargets

    for name, hp in (("ippo", {}), ("mappo", {"value_norm": False})):
        agent = agents.make(name, SPREAD, seed=0, **TINY, **hp)
        try:
            assert type(agent.update_targets) is GAETargets
            assert "value_normalizer" not in agent.trackables()
        finally:
            agent.close()
