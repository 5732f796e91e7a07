"""FGSM / PGD observation attacks: perturbation inside the L-inf ball, and they lower log pi(a*)."""

import numpy as np
import pytest
import tensorflow as tf
from policies import SPACES, SmallPolicy

import pgrad
from pgrad.tools.adversarial import action_log_prob, greedy_actions, make_attack


def policy_fn(policy):
    return lambda o: policy.head(policy.net(o))


def observations(b=64, d=4, seed=3):
    return tf.constant(np.random.default_rng(seed).normal(size=(b, d)), tf.float32)


def assert_in_ball(adv, obs, eps, exact=False):
    delta = np.abs(np.asarray(adv, np.float64) - np.asarray(obs, np.float64))
    slack = 4 * np.finfo(np.float32).eps * (np.abs(np.asarray(obs)) + eps)  # float32 rounding
    assert np.all(delta <= eps + slack)
    if exact:  # every coordinate with a nonzero gradient moves by exactly epsilon
        np.testing.assert_allclose(delta, np.broadcast_to(eps, delta.shape),
                                   atol=float(slack.max()))


@pytest.mark.parametrize("kind", ["categorical", "multidiscrete", "multibinary"])
def test_fgsm_moves_every_coordinate_by_epsilon_and_lowers_log_prob(kind):
    policy = SmallPolicy(SPACES[kind])
    fn, obs = policy_fn(policy), observations()
    a_star = greedy_actions(obs, fn)
    clean = action_log_prob(obs, fn, a_star).numpy()
    for eps in (1e-3, 0.1):
        adv = pgrad.fgsm(obs, fn, eps)
        assert adv.shape == obs.shape
        assert_in_ball(adv, obs, eps, exact=True)
        attacked = action_log_prob(adv, fn, a_star).numpy()
        if eps == 1e-3:  # first order: every row's log-prob drops by about eps * ||grad||_1
            assert np.all(attacked < clean)
        assert attacked.mean() < clean.mean() - 1e-4


def test_logits_callable_equals_distribution_callable(categorical):
    obs = observations()
    a = pgrad.fgsm(obs, policy_fn(categorical), 0.05)
    b = pgrad.fgsm(obs, categorical.net, 0.05)  # raw logits -> Categorical
    np.testing.assert_array_equal(a, b)


def linear_two_action_policy():
    w = tf.constant([[1.0, -0.5], [-2.0, 0.3], [0.1, 0.4]])  # [D=3, A=2]
    return (lambda o: tf.matmul(o, w)), w.numpy()


@pytest.mark.parametrize("attack", ["fgsm", "pgd"])
def test_linear_policy_attack_is_the_optimal_corner(attack):
    """log pi(a*) = -softplus((w_o - w_a*) . s): the best L-inf step is eps * sign(w_o - w_a*)."""
    fn, w = linear_two_action_policy()
    obs = observations(16, 3)
    eps = 0.2
    a_star = np.argmax(obs.numpy() @ w, axis=1)
    direction = w[:, 1 - a_star].T - w[:, a_star].T  # [B, D] w_other - w_chosen
    want = obs.numpy() + eps * np.sign(direction)
    adv = pgrad.fgsm(obs, fn, eps) if attack == "fgsm" else pgrad.pgd(obs, fn, eps, steps=8)
    np.testing.assert_allclose(adv, want, atol=1e-6)


def test_pgd_stays_in_ball_and_beats_fgsm_on_average(categorical):
    fn, obs, eps = policy_fn(categorical), observations(), 0.3
    a_star = greedy_actions(obs, fn)
    adv = pgrad.pgd(obs, fn, eps, steps=20)
    assert_in_ball(adv, obs, eps)
    lp_pgd = action_log_prob(adv, fn, a_star).numpy().mean()
    lp_fgsm = action_log_prob(pgrad.fgsm(obs, fn, eps), fn, a_star).numpy().mean()
    lp_clean = action_log_prob(obs, fn, a_star).numpy().mean()
    assert lp_pgd <= lp_fgsm + 1e-4 < lp_clean


def test_per_feature_epsilon_and_bounds(categorical):
    fn, obs = policy_fn(categorical), observations()
    eps = np.array([0.0, 0.1, 0.2, 0.05], np.float32)
    adv = pgrad.fgsm(obs, fn, eps)
    np.testing.assert_array_equal(adv[:, 0], obs[:, 0])
    assert_in_ball(adv, obs, eps, exact=True)
    clipped = pgrad.pgd(obs, fn, 0.5, steps=3, low=-0.2, high=0.2, random_start=True, seed=(1, 2))
    assert np.all(np.asarray(clipped) >= -0.2) and np.all(np.asarray(clipped) <= 0.2)


def test_pgd_random_start_is_seeded_and_in_ball(categorical):
    fn, obs = policy_fn(categorical), observations()
    a = pgrad.pgd(obs, fn, 0.1, steps=2, random_start=True, seed=(4, 5))
    b = pgrad.pgd(obs, fn, 0.1, steps=2, random_start=True, seed=(4, 5))
    np.testing.assert_array_equal(a, b)
    assert_in_ball(a, obs, 0.1)


def test_gaussian_greedy_gradient_is_zero_and_random_start_pgd_still_attacks(gaussian):
    """The documented caveat: at the mean, d log N(mean; mu(s), sigma) / d mu = 0."""
    fn, obs = policy_fn(gaussian), observations()
    np.testing.assert_array_equal(pgrad.fgsm(obs, fn, 0.1), obs)
    a_star = greedy_actions(obs, fn)
    adv = pgrad.pgd(obs, fn, 0.1, steps=10, random_start=True, seed=(0, 1))
    assert_in_ball(adv, obs, 0.1)
    lp = action_log_prob(adv, fn, a_star).numpy()
    assert lp.mean() < action_log_prob(obs, fn, a_star).numpy().mean() - 1e-4


def test_inside_tf_function(categorical):
    fn, obs = policy_fn(categorical), observations()

    @tf.function(input_signature=[tf.TensorSpec([None, 4])])
    def attack(o):
        return pgrad.fgsm(o, fn, 0.05), pgrad.pgd(o, fn, 0.05, steps=3)

    f, p = attack(obs)
    np.testing.assert_allclose(f, pgrad.fgsm(obs, fn, 0.05), atol=1e-6)
    np.testing.assert_allclose(p, pgrad.pgd(obs, fn, 0.05, steps=3), atol=1e-6)


def test_make_attack(categorical):
    fn, obs = policy_fn(categorical), observations()
    np.testing.assert_array_equal(make_attack("fgsm", 0.0)(obs, fn), obs)
    np.testing.assert_array_equal(make_attack("fgsm", 0.1)(obs, fn), pgrad.fgsm(obs, fn, 0.1))
    np.testing.assert_array_equal(make_attack("pgd", 0.1, steps=2)(obs, fn),
                                  pgrad.pgd(obs, fn, 0.1, steps=2))
    with pytest.raises(ValueError, match="unknown attack"):
        make_attack("cw", 0.1)
    with pytest.raises(ValueError, match="steps must be >= 1"):
        pgrad.pgd(obs, fn, 0.1, steps=0)
