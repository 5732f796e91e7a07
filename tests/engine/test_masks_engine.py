"""Masked log-probabilities through the engine: per-step gradients equal ``tape.jacobian`` on
the fused and full paths, and the gradient of every masked logit is exactly 0."""

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf
from policies import SmallPolicy, assert_all_close, jacobian_reference

import pgrad
from pgrad import chain
from pgrad.rl.acting.policy import sample_numpy

SPACES = {"discrete": gym.spaces.Discrete(6), "multidiscrete": gym.spaces.MultiDiscrete([3, 4])}

CHAINS = {
    "weighted": lambda: chain(pgrad.weight_by("advantages"), pgrad.mean_steps()),
    "clipped": lambda: chain(pgrad.weight_by("advantages"), pgrad.clip_per_step(0.3),
                             pgrad.mean_steps()),
    "user": lambda: chain(pgrad.weight_by("advantages"),
                          pgrad.stateless(lambda grads, **_: [g * g for g in grads], name="sq"),
                          pgrad.mean_steps()),
}


class MaskedPolicy(SmallPolicy):
    """``log_prob(obs, act, mask)``: the head's distribution at masked logits."""

    def log_prob(self, obs, act, mask):
        return self.head.distribution(self.net(obs), mask).log_prob(act)

    def entropy(self, obs, mask):
        return self.head.distribution(self.net(obs), mask).entropy()

    def masked_batch(self, t, seed=1):
        rng = np.random.default_rng(seed)
        obs = rng.normal(size=(t, self.obs_dim)).astype(np.float32)
        sizes = getattr(self.head, "nvec", [self.head.param_size])
        parts = []
        for k in sizes:
            m = rng.random((t, int(k))) < 0.4
            m[np.arange(t), rng.integers(0, int(k), t)] = True
            parts.append(m)
        mask = np.concatenate(parts, 1)
        params = self.net(obs).numpy()
        act, _ = sample_numpy(self.head, params, None, rng, action_mask=mask)
        return tf.constant(obs), tf.constant(act), tf.constant(mask)


@pytest.fixture(params=sorted(SPACES))
def masked(request):
    return MaskedPolicy(SPACES[request.param], hidden=(8,))


def test_masked_per_step_gradients_equal_the_jacobian(masked):
    obs, act, mask = masked.masked_batch(12)
    want = jacobian_reference(masked.log_prob, masked.variables, obs, act, mask)
    for use_taps in (True, False):
        got = pgrad.per_step_grads(masked.log_prob, masked.variables, obs, act, mask,
                                   use_taps=use_taps)
        assert_all_close(got, want, atol=1e-6)
    # the output layer's bias: row t is d log pi_t / d logits_t, exactly 0 where masked
    bias = masked.net.layers[-1].bias
    index = next(i for i, v in enumerate(masked.variables) if v is bias)
    got = pgrad.per_step_grads(masked.log_prob, masked.variables, obs, act, mask)[index]
    assert (want[index].numpy()[~mask.numpy()] == 0.0).all()
    assert (got.numpy()[~mask.numpy()] == 0.0).all()
    assert np.abs(got.numpy()[mask.numpy()]).max() > 0


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_masked_chains_on_every_path_equal_the_reference(masked, name):
    obs, act, mask = masked.masked_batch(10)
    adv = np.random.default_rng(3).normal(size=10).astype(np.float32)
    t = CHAINS[name]()
    jac = jacobian_reference(masked.log_prob, masked.variables, obs, act, mask)
    want, _ = t.update(jac, t.init(masked.variables), advantages=adv)
    paths = ("fused", "full", "auto") if pgrad.plan(t) == "fused" else ("full", "auto")
    for path in paths:
        got, _, info = pgrad.policy_gradients(t, t.init(masked.variables), masked.log_prob,
                                              masked.variables, (obs, act, mask),
                                              {"advantages": adv}, path=path)
        assert_all_close(got, want, atol=2e-6)
        assert float(info["path_fused"]) == (1.0 if path == "fused" or (
            path == "auto" and pgrad.plan(t) == "fused") else 0.0)


def test_masked_entropy_bonus_gradient_equals_the_tape(masked):
    """The agents' aux loss (entropy over the legal actions) from the engine's own pass."""
    obs, act, mask = masked.masked_batch(9)
    adv = np.ones(9, np.float32)

    def fn(o, a, m):
        dist = masked.head.distribution(masked.net(o), m)
        return dist.log_prob(a), {"entropy": dist.entropy()}

    out = pgrad.run_engine(CHAINS["clipped"](), (), fn, masked.variables, (obs, act, mask),
                           {"advantages": adv},
                           aux_loss=lambda lp, ex: -0.01 * tf.reduce_mean(ex["entropy"]))
    with tf.GradientTape() as tape:
        loss = -0.01 * tf.reduce_mean(masked.entropy(obs, mask))
    want = tape.gradient(loss, masked.variables)
    assert_all_close(out.aux_grads, want, atol=1e-7)
    assert np.isfinite(out.extras["entropy"].numpy()).all()
    bias = masked.net.layers[-1].bias
    rows = jacobian_reference(lambda o, m: masked.entropy(o, m), [bias], obs, mask)[0].numpy()
    assert (rows[~mask.numpy()] == 0.0).all()  # entropy: no gradient into a masked logit
