"""APPO's decoupled clip (``clip_against="learner"``, Hilton et al. 2021): the chain's per-step
gradients against the surrogate written out by hand, the same training as the behaviour clip
on-policy, the lagged update against a plain reference with the weight truncated at
``pg_rho_bar``, the config's error and a save/load round trip."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from policies import assert_all_close, jacobian_reference, reference_update
from test_impala import SMALL, log_probs_under, paper_vtrace, recording, weights

import agents
import pgrad
from agents.update.minibatch import PROXIMAL_KEY

EPS = 0.2


def decoupled_surrogate(log_probs, prox, mu, adv, eps, bar):
    """``[T]`` ``w_t min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t)`` with ``r_t = pi / pi_prox``
    and the constant ``w_t = min(bar, pi_prox / mu)``, written out."""
    w = np.minimum(bar, np.exp(prox - mu)).astype(np.float32)
    ratio = tf.exp(log_probs - prox)
    return w * tf.minimum(ratio * adv, tf.clip_by_value(ratio, 1.0 - eps, 1.0 + eps) * adv)


def stale_batch(policy, t=32, seed=4):
    """Current log-probs, ``pi_prox`` a little off them (so some ``pi / pi_prox`` leave the clip
    range, most do not), ``mu`` far off ``pi_prox`` (a stale behaviour policy: most ``pi / mu``
    outside the clip range), advantages of both signs."""
    obs, act = policy.batch(t)
    rng = np.random.default_rng(seed)
    current = policy.log_prob(obs, act).numpy()
    prox = (current + rng.normal(0.0, 0.1, size=t)).astype(np.float32)
    mu = (prox + rng.choice([-1.0, 1.0], size=t) * rng.uniform(0.4, 1.2, size=t)
          ).astype(np.float32)
    adv = rng.normal(size=t).astype(np.float32)
    return obs, act, current, prox, mu, adv


def rows_norms(rows):
    t = rows[0].shape[0]
    return np.sqrt(sum(np.sum(np.reshape(np.square(np.asarray(r)), (t, -1)), 1) for r in rows))


@pytest.mark.parametrize("bar", [1.0, 1.5])
def test_decoupled_chain_is_the_gradient_of_the_decoupled_surrogate(categorical, bar):
    """Per step: the chain's rows equal ``tape.jacobian`` of the written-out surrogate; summed,
    the agent's own chain on both engine paths equals ``tape.gradient`` of its mean. With a
    stale ``mu`` the behaviour clip zeroes steps that the decoupled clip keeps."""
    policy = categorical
    obs, act, current, prox, mu, adv = stale_batch(policy)
    ctx = {"advantages": adv, "behaviour_log_probs": mu, PROXIMAL_KEY: prox,
           "clip_range": tf.constant(EPS)}
    # What the batch exercises: pi / mu mostly outside the range, pi / pi_prox mostly inside,
    # pi_prox / mu on both sides of the bar.
    behaviour_out = np.abs(np.exp(current - mu) - 1.0) > EPS
    prox_out = np.abs(np.exp(current - prox) - 1.0) > EPS
    assert behaviour_out.mean() > 0.7 and 0 < prox_out.sum() < 0.3 * len(prox)
    raw_w = np.exp(prox - mu)
    assert 0 < np.sum(raw_w > bar) < len(raw_w)

    want_rows = jacobian_reference(
        lambda o, a: decoupled_surrogate(policy.log_prob(o, a), prox, mu, adv, EPS, bar),
        policy.variables, obs, act)
    per_step = pgrad.chain(pgrad.importance_weight(bar, target_key=PROXIMAL_KEY),
                           pgrad.clip_ratio("clip_range", behaviour_key=PROXIMAL_KEY))
    rows = jacobian_reference(policy.log_prob, policy.variables, obs, act)
    got_rows = reference_update(per_step, policy.variables, rows, {**ctx, "log_probs": current})
    assert_all_close(got_rows, want_rows, atol=2e-6)

    behaviour = pgrad.chain(pgrad.clip_ratio("clip_range"))
    behaviour_rows = reference_update(behaviour, policy.variables, rows,
                                      {**ctx, "log_probs": current})
    zeroed = rows_norms(behaviour_rows) == 0.0
    kept = rows_norms(got_rows) > 0.0
    assert np.sum(zeroed & kept) >= 5  # gradient where the behaviour clip gives none

    appo = agents.make("appo", "CartPole-v1", seed=0, clip_against="learner", pg_rho_bar=bar,
                       **SMALL)
    chain = appo.transform
    with tf.GradientTape() as tape:
        surrogate = tf.reduce_mean(decoupled_surrogate(policy.log_prob(obs, act), prox, mu, adv,
                                                       EPS, bar))
    want = tape.gradient(surrogate, policy.variables)
    for path in ("fused", "full"):
        got, state, metrics = pgrad.policy_gradients(chain, chain.init(policy.variables),
                                                     policy.log_prob, policy.variables,
                                                     (obs, act), ctx, path=path)
        assert_all_close(got, want, atol=2e-6)
        assert float(metrics["importance_weight/rho_mean"]) == pytest.approx(raw_w.mean(),
                                                                             rel=1e-5)
        assert float(metrics["importance_weight/truncated_fraction"]) == pytest.approx(
            np.mean(raw_w > bar))
        assert float(metrics["clip_ratio/clip_fraction"]) == pytest.approx(prox_out.mean())
    appo.close()


def test_at_lag_0_the_decoupled_clip_trains_as_the_behaviour_clip():
    """On-policy ``pi_prox = mu`` (to round-off: the actor's numpy mirror against the update's
    graph), so ``w = 1`` and the two ratios are one: the same weights after every update."""
    kw = dict(SMALL, epochs=2, minibatch_size=8, gae_lambda=0.9, normalize_advantage=True,
              optimizer="adam", learning_rate=1e-3, optimizer_eps=1e-5, clip_range=0.2,
              ent_coef=0.01)
    behaviour = agents.make("appo", "CartPole-v1", seed=3, **kw)
    learner = agents.make("appo", "CartPole-v1", seed=3, clip_against="learner", **kw)
    for _ in range(3):
        a, b = behaviour.step(), learner.step()
        assert b["metrics"]["policy_lag"] == 0.0
        assert b["metrics"]["importance_weight/rho_mean"] == pytest.approx(1.0, abs=1e-5)
        assert a["episodes"] == b["episodes"] and a["env_steps"] == b["env_steps"]
        assert b["metrics"]["clip_fraction"] == pytest.approx(a["metrics"]["clip_fraction"])
        for x, y in zip(weights(behaviour), weights(learner)):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    behaviour.close()
    learner.close()


@pytest.mark.parametrize("bar", [1.0, 1.02])
def test_lagged_decoupled_update_is_the_written_out_one(bar):
    """lag 2, two epochs of SGD on the whole trajectory: each is a step on
    ``-mean(w min(r A, clip(r) A)) + vf_coef mean((v_s - V)^2)`` with ``r = pi / pi_prox``,
    ``w = min(pg_rho_bar, pi_prox / mu)`` and V-trace's ``v_s``, ``A = q_s - V`` from ``pi_prox``,
    all fixed at the start of the update (pi_prox: the weights before it)."""
    lr, gamma, vf, clip = 0.05, 0.9, 0.5, 0.01
    appo = agents.make("appo", "CartPole-v1", seed=1, lag=2, optimizer="sgd", learning_rate=lr,
                       max_grad_norm=0.0, gamma=gamma, vf_coef=vf, clip_range=clip, epochs=2,
                       clip_against="learner", pg_rho_bar=bar, **SMALL)
    seen = recording(appo)
    history = [weights(appo)]
    for _ in range(4):
        info = appo.step()
        history.append(weights(appo))
    assert info["metrics"]["policy_lag"] == 2.0
    traj = seen[3].traj
    net, before, after = appo.net, history[3], history[4]
    T, B = traj.rewards.shape
    obs = tf.reshape(traj.observations, [T * B, -1])
    nxt = tf.reshape(traj.next_observations, [T * B, -1])
    for v, w in zip(net.variables, before):
        v.assign(w)
    values = tf.reshape(net.value(obs), [T, B]).numpy()
    next_values = tf.reshape(net.value(nxt), [T, B]).numpy()
    prox = log_probs_under(appo, before, traj)
    vs, q, rho = paper_vtrace(traj.rewards, values, next_values, traj.terminated, traj.truncated,
                              traj.log_probs, prox, gamma)
    assert 0 < np.sum(rho > bar) < rho.size  # the truncation is exercised, not everywhere
    adv = (q - values).reshape(-1).astype(np.float32)
    prox_flat, mu_flat = prox.reshape(-1), traj.log_probs.reshape(-1)
    vs_flat = vs.reshape(-1).astype(np.float32)
    actions = tf.reshape(traj.actions, [T * B])
    outside = []
    for _ in range(2):  # the epochs: pi moves, pi_prox, mu, A and v_s stay
        with tf.GradientTape() as tape:
            logp = appo.head.distribution(net.params(obs)).log_prob(actions)
            pg = tf.reduce_mean(decoupled_surrogate(logp, prox_flat, mu_flat, adv, clip, bar))
            v_loss = tf.reduce_mean(tf.square(vs_flat - tf.reshape(net.value(obs), [-1])))
            loss = -pg + vf * v_loss
        outside.append(np.mean(np.abs(np.exp(logp.numpy() - prox_flat) - 1.0) > clip))
        grads = tape.gradient(loss, net.variables)
        for v, g in zip(net.variables, grads):
            v.assign_sub(lr * g)
    assert outside[0] == 0.0 and outside[1] > 0.0  # the second epoch's clip is exercised
    for got, want in zip(after, weights(appo)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    assert info["metrics"]["importance_weight/truncated_fraction"] == pytest.approx(
        np.mean(rho > bar))
    for v, w in zip(net.variables, after):
        v.assign(w)
    appo.close()


def test_clip_against_must_be_known():
    with pytest.raises(ValueError, match="clip_against must be one of"):
        agents.APPOConfig(clip_against="target").validate()


def test_save_load_keeps_the_decoupled_clip(tmp_path):
    appo = agents.make("appo", "CartPole-v1", seed=0, lag=1, clip_against="learner",
                       pg_rho_bar=1.5, **SMALL)
    for _ in range(3):
        appo.step()
    appo.save(tmp_path / "appo")
    back = agents.load(tmp_path / "appo")
    assert back.cfg.clip_against == "learner" and back.cfg.pg_rho_bar == 1.5
    assert len(back.transform_state.values) == len(appo.transform_state.values)
    for a, b in zip(appo.transform_state.values, back.transform_state.values):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    info = back.step()
    assert "importance_weight/rho_mean" in info["metrics"]
    back.close()
    appo.close()
