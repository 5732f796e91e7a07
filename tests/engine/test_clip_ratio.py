"""PPO's clip_ratio: on every engine path, the tape gradient of the clipped surrogate."""

import numpy as np
import pytest
import tensorflow as tf
from policies import assert_all_close

import pgrad
from pgrad import chain

EPS = 0.2


def behaviour_and_advantages(policy, obs, act, seed=3):
    """Behaviour log-probs a little off the current ones (so some ratios leave [1-eps, 1+eps]),
    and advantages of both signs: ``([T], [T])``."""
    rng = np.random.default_rng(seed)
    t = int(obs.shape[0])
    current = policy.log_prob(obs, act).numpy()
    behaviour = (current + rng.normal(0.0, 0.3, size=t)).astype(np.float32)
    return behaviour, rng.normal(size=t).astype(np.float32)


def clipped_surrogate_gradient(policy, obs, act, behaviour, adv, eps):
    """The reference: grad of mean_t min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t)."""
    with tf.GradientTape() as tape:
        ratio = tf.exp(policy.log_prob(obs, act) - behaviour)
        surrogate = tf.reduce_mean(tf.minimum(
            ratio * adv, tf.clip_by_value(ratio, 1.0 - eps, 1.0 + eps) * adv))
    return tape.gradient(surrogate, policy.variables), ratio.numpy()


@pytest.mark.parametrize("path", ["fused", "full", "auto"])
@pytest.mark.parametrize("in_graph", [False, True])
def test_clip_ratio_equals_the_clipped_surrogate_gradient(policy, path, in_graph):
    obs, act = policy.batch(24)
    behaviour, adv = behaviour_and_advantages(policy, obs, act)
    want, ratio = clipped_surrogate_gradient(policy, obs, act, behaviour, adv, EPS)
    clipped = np.abs(ratio - 1.0) > EPS
    assert 0 < clipped.sum() < len(ratio)  # the batch exercises both branches

    t = chain(pgrad.clip_ratio(EPS), pgrad.mean_steps())
    assert pgrad.plan(t) == "fused"

    def run(o, a, b, d):
        ctx = {"advantages": d, "behaviour_log_probs": b}
        return pgrad.policy_gradients(t, t.init(policy.variables), policy.log_prob,
                                      policy.variables, (o, a), ctx, path=path)

    fn = tf.function(run) if in_graph else run
    got, state, metrics = fn(obs, act, tf.constant(behaviour), tf.constant(adv))
    assert_all_close(got, want, atol=2e-6)
    assert float(metrics["path_fused"]) == (0.0 if path == "full" else 1.0)
    ratio_state = state[0]  # a chain's state: its leaves' states in order
    assert float(ratio_state.clip_fraction) == pytest.approx(clipped.mean())
    kl = np.mean(ratio - 1.0 - np.log(ratio))
    assert float(ratio_state.approx_kl) == pytest.approx(kl, rel=1e-4)
    assert float(metrics["clip_ratio/approx_kl"]) == pytest.approx(kl, rel=1e-4)


def test_clip_range_from_the_context_is_a_schedule(categorical):
    """clip_ratio("clip_range") reads epsilon from the context: equal to the constant form."""
    obs, act = categorical.batch(16)
    behaviour, adv = behaviour_and_advantages(categorical, obs, act, seed=5)
    for eps in (0.05, 0.3):
        want, _ = clipped_surrogate_gradient(categorical, obs, act, behaviour, adv, eps)
        t = chain(pgrad.clip_ratio("clip_range"), pgrad.mean_steps())
        got, _, _ = pgrad.policy_gradients(
            t, t.init(None), categorical.log_prob, categorical.variables, (obs, act),
            {"advantages": adv, "behaviour_log_probs": behaviour,
             "clip_range": tf.constant(eps)})
        assert_all_close(got, want, atol=2e-6)


def test_ratio_one_is_the_advantage_weighted_gradient(gaussian):
    """On the behaviour policy itself (first epoch), r = 1: clip_ratio == weight_by(advantages)."""
    obs, act = gaussian.batch(12)
    _, adv = behaviour_and_advantages(gaussian, obs, act)
    behaviour = gaussian.log_prob(obs, act)
    ctx = {"advantages": adv, "behaviour_log_probs": behaviour}
    ppo = chain(pgrad.clip_ratio(EPS), pgrad.mean_steps())
    a2c = chain(pgrad.weight_by("advantages"), pgrad.mean_steps())
    got, state, _ = pgrad.policy_gradients(ppo, ppo.init(None), gaussian.log_prob,
                                           gaussian.variables, (obs, act), ctx)
    want, _, _ = pgrad.policy_gradients(a2c, a2c.init(None), gaussian.log_prob,
                                        gaussian.variables, (obs, act), ctx)
    assert_all_close(got, want, atol=1e-6)
    assert float(state[0].clip_fraction) == 0.0
    assert float(state[0].approx_kl) == pytest.approx(0.0, abs=1e-6)


def test_clip_ratio_refuses_a_non_positive_epsilon():
    with pytest.raises(ValueError, match="clip_ratio: epsilon must be > 0"):
        pgrad.clip_ratio(0.0)
