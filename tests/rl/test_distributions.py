"""Action heads: log-probs against closed forms, env mapping, unsupported spaces."""

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from pgrad import make_head


def test_categorical_log_prob_and_start_offset():
    head = make_head(gym.spaces.Discrete(3, start=-1))
    logits = tf.constant([[0.0, 1.0, 2.0]])
    lp = head(logits).log_prob(tf.constant([2]))
    np.testing.assert_allclose(lp, [2.0 - np.log(np.exp([0, 1, 2]).sum())], rtol=1e-6)
    assert head.to_env(np.array([0, 2])).tolist() == [-1, 1]


def test_gaussian_log_prob_of_unclipped_sample_and_env_clipping():
    space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    head = make_head(space, log_std_init=np.log(0.5))
    head.build(None)
    mean, a = tf.constant([[0.0, 0.5]]), tf.constant([[2.0, 0.5]])
    lp = head(mean).log_prob(a)
    want = sum(-0.5 * ((x - m) / 0.5) ** 2 - np.log(0.5 * np.sqrt(2 * np.pi))
               for x, m in [(2.0, 0.0), (0.5, 0.5)])
    np.testing.assert_allclose(lp, [want], rtol=1e-5)
    np.testing.assert_array_equal(head.to_env(np.array([[2.0, -3.0]])), [[1.0, -1.0]])
    assert [v.name for v in head.trainable_variables] == ["log_std"]


def test_multidiscrete_ragged_sizes():
    head = make_head(gym.spaces.MultiDiscrete([2, 3]))
    assert head.param_size == 5
    params = tf.constant([[0.0, 1.0, 0.0, 0.0, 3.0]])
    dist = head(params)
    lp = dist.log_prob(tf.constant([[1, 2]]))
    want = (1.0 - np.log(1 + np.e)) + (3.0 - np.log(2 + np.exp(3.0)))
    np.testing.assert_allclose(lp, [want], rtol=1e-6)
    samples = dist.sample(500, seed=0).numpy()
    assert samples[..., 0].max() <= 1 and samples[..., 1].max() <= 2  # padding never sampled
    ent = dist.entropy().numpy()[0]
    p0, p1 = np.array([1, np.e]) / (1 + np.e), np.exp([0, 0, 3.0]) / (2 + np.exp(3.0))
    assert ent == pytest.approx(-(p0 * np.log(p0)).sum() - (p1 * np.log(p1)).sum(), rel=1e-5)


def test_multibinary():
    head = make_head(gym.spaces.MultiBinary(3))
    lp = head(tf.constant([[0.0, 2.0, -1.0]])).log_prob(tf.constant([[1, 1, 0]]))
    sig = lambda x: 1 / (1 + np.exp(-x))
    want = np.log(0.5) + np.log(sig(2.0)) + np.log(1 - sig(-1.0))
    np.testing.assert_allclose(lp, [want], rtol=1e-5)


def test_modes_are_deterministic_actions():
    head = make_head(gym.spaces.Discrete(3))
    assert head(tf.constant([[0.0, 5.0, 1.0]])).mode().numpy().tolist() == [1]


@pytest.mark.parametrize("space", [gym.spaces.Text(5), gym.spaces.Dict({}),
                                   gym.spaces.Box(0, 3, (2,), np.int64)])
def test_unsupported_space_names_it(space):
    with pytest.raises(ValueError, match=r"not supported|integer dtype.*Discrete, Box"):
        make_head(space)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("action_dtype", [tf.int32, tf.int64, tf.float32])
def test_categorical_log_prob_and_entropy_match_the_distribution(masked, action_dtype):
    """The update's log-probs and entropies, computed without tfp.distributions, against
    ``tfd.Categorical`` (what ``distribution()`` returns): values and gradients with respect to the
    logits, under a mask (a masked logit: probability 0, entropy term 0, gradient exactly 0) and
    with extreme logits."""
    rng = np.random.default_rng(3)
    head = make_head(gym.spaces.Discrete(4))
    logits = tf.constant(np.concatenate([rng.normal(0, 3, (30, 4)),
                                         [[80.0, -80.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]]]),
                         tf.float32)  # [32, 4]
    mask = tf.constant(np.r_[rng.random((31, 4)) < 0.7, [[True] * 4]]) if masked else None
    if mask is not None:  # one legal action at least per row; the actions taken are legal
        mask = tf.logical_or(mask, tf.one_hot([0] * 32, 4, on_value=True, off_value=False))
        legal = mask.numpy()
        actions = np.array([rng.choice(np.flatnonzero(row)) for row in legal])
    else:
        actions = rng.integers(0, 4, 32)
    actions = tf.constant(actions, action_dtype)
    weights = tf.constant(rng.normal(size=32), tf.float32)

    def both(fn):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            log_prob, entropy = fn()
            objective = tf.reduce_sum(weights * log_prob) + 0.1 * tf.reduce_sum(entropy)
        return log_prob, entropy, tape.gradient(objective, logits)

    dist = head.distribution
    ours = both(lambda: head.log_prob_and_entropy(logits, actions, mask))
    reference = both(lambda: (dist(logits, mask).log_prob(actions), dist(logits, mask).entropy()))
    for got, want in zip(ours, reference):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
        assert np.isfinite(got.numpy()).all()
    if masked:  # no gradient reaches an illegal action's logit
        assert (ours[2].numpy()[~legal] == 0).all()
