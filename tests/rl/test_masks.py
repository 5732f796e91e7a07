"""Action masks: masked heads and samplers against numpy references, the env conventions, errors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

import pgrad  # noqa: F401  (first: silences TensorFlow)
from pgrad.rl import distributions as dist_lib
from pgrad.rl.acting.policy import _categorical, mode_numpy, sample_numpy
from pgrad.rl.collection import masks, rollout
from pgrad.rl.envs.masked import OffersEnv
from pgrad.rl.observations import spaces


def log_softmax_legal(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """float64 log-probabilities renormalised over the legal actions (-inf elsewhere)."""
    z = np.where(mask, logits.astype(np.float64), -np.inf)
    z = z - z.max(1, keepdims=True)
    return z - np.log(np.exp(z).sum(1, keepdims=True))


def entropy_legal(logits, mask):
    lp = log_softmax_legal(logits, mask)
    p = np.exp(lp)
    return -np.where(mask, p * np.where(mask, lp, 0.0), 0.0).sum(1)


def random_masks(rng, n_rows, sizes):
    """``[N, sum(sizes)]`` bool with at least one legal action per dimension."""
    parts = []
    for k in sizes:
        m = rng.random((n_rows, k)) < 0.4
        m[np.arange(n_rows), rng.integers(0, k, n_rows)] = True
        parts.append(m)
    return np.concatenate(parts, 1)


# -- heads (TensorFlow) --------------------------------------------------------------------------


def test_masked_categorical_log_probs_and_entropy_equal_the_renormalised_reference():
    rng = np.random.default_rng(0)
    logits = rng.normal(0.0, 3.0, (64, 7)).astype(np.float32)
    mask = random_masks(rng, 64, [7])
    head = dist_lib.CategoricalHead(7)
    dist = head.distribution(tf.constant(logits), tf.constant(mask))
    ref = log_softmax_legal(logits, mask)
    actions = np.array([rng.choice(np.flatnonzero(m)) for m in mask], np.int32)
    np.testing.assert_allclose(dist.log_prob(actions).numpy(), ref[np.arange(64), actions],
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dist.entropy().numpy(), entropy_legal(logits, mask),
                               rtol=1e-5, atol=1e-5)
    modes = dist.mode().numpy()
    assert mask[np.arange(64), modes].all()
    np.testing.assert_array_equal(modes, np.where(mask, logits, -np.inf).argmax(1))
    # without the mask the numbers differ (the test can fail)
    plain = head.distribution(tf.constant(logits))
    assert not np.allclose(plain.entropy().numpy(), entropy_legal(logits, mask), atol=1e-3)


def test_a_single_legal_action_has_log_prob_zero_and_entropy_zero():
    head = dist_lib.CategoricalHead(4)
    dist = head.distribution(tf.constant([[5.0, -2.0, 9.0, 0.0]]),
                             tf.constant([[False, True, False, False]]))
    assert float(dist.log_prob([1])[0]) == 0.0
    assert float(dist.entropy()[0]) == 0.0
    assert int(dist.mode()[0]) == 1


def test_gradients_with_respect_to_masked_logits_are_exactly_zero_and_finite():
    rng = np.random.default_rng(1)
    logits = tf.Variable(rng.normal(0.0, 50.0, (16, 6)).astype(np.float32))
    mask = random_masks(rng, 16, [6])
    actions = np.array([rng.choice(np.flatnonzero(m)) for m in mask], np.int32)
    head = dist_lib.CategoricalHead(6)
    with tf.GradientTape(persistent=True) as tape:
        dist = head.distribution(logits, tf.constant(mask))
        lp, ent = tf.reduce_sum(dist.log_prob(actions)), tf.reduce_sum(dist.entropy())
    for out in (lp, ent):
        g = tape.gradient(out, logits).numpy()
        assert np.isfinite(g).all()
        assert (g[~mask] == 0.0).all()  # exactly
        assert np.abs(g[mask]).max() > 0
    # legal logits: the gradient of the renormalised log-softmax, d/dz_j = 1[j=a] - p_j
    p = np.exp(log_softmax_legal(logits.numpy(), mask))
    want = -p
    want[np.arange(16), actions] += 1.0
    np.testing.assert_allclose(tape.gradient(lp, logits).numpy(), want, atol=1e-5)


def test_masked_multidiscrete_head_masks_each_dimension():
    rng = np.random.default_rng(2)
    nvec = [3, 5, 2]
    logits = rng.normal(0.0, 2.0, (32, 10)).astype(np.float32)
    mask = random_masks(rng, 32, nvec)
    head = dist_lib.MultiCategoricalHead(nvec)
    dist = head.distribution(tf.constant(logits), tf.constant(mask))
    splits = np.cumsum(nvec)[:-1]
    lg, mk = np.split(logits, splits, 1), np.split(mask, splits, 1)
    actions = np.stack([[rng.choice(np.flatnonzero(r)) for r in m] for m in mk], 1)
    want = sum(log_softmax_legal(z, m)[np.arange(32), actions[:, d]]
               for d, (z, m) in enumerate(zip(lg, mk)))
    np.testing.assert_allclose(dist.log_prob(actions.astype(np.int32)).numpy(), want,
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dist.entropy().numpy(),
                               sum(entropy_legal(z, m) for z, m in zip(lg, mk)),
                               rtol=1e-5, atol=1e-5)
    modes = dist.mode().numpy()
    for d, m in enumerate(mk):
        assert m[np.arange(32), modes[:, d]].all()


@pytest.mark.parametrize("space", [gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                                   gym.spaces.MultiBinary(3)])
def test_heads_without_discrete_actions_refuse_a_mask(space):
    head = dist_lib.make_head(space)
    head.build(None)
    params = tf.zeros([2, head.param_size])
    with pytest.raises(ValueError, match="no discrete actions to mask"):
        head.distribution(params, tf.ones([2, 2], tf.bool))
    with pytest.raises(ValueError, match="no discrete actions to mask"):
        sample_numpy(head, params.numpy(), np.zeros(2, np.float32), np.random.default_rng(0),
                     action_mask=np.ones((2, 2), bool))


# -- numpy samplers ------------------------------------------------------------------------------


def test_numpy_sampler_never_draws_an_illegal_action_and_matches_the_head():
    rng = np.random.default_rng(3)
    n = 20_000
    # the illegal actions get the largest logits: a sampler that ignored the mask would pick them
    mask = random_masks(rng, n, [8])
    logits = np.where(mask, rng.normal(0.0, 1.0, (n, 8)), 20.0).astype(np.float32)
    head = dist_lib.CategoricalHead(8)
    a, lp = sample_numpy(head, logits, None, np.random.default_rng(4), action_mask=mask)
    assert mask[np.arange(n), a].all()
    want = head.distribution(tf.constant(logits), tf.constant(mask)).log_prob(a).numpy()
    np.testing.assert_allclose(lp, want, rtol=1e-5, atol=1e-5)
    assert (mode_numpy(head, logits, mask) == np.where(mask, logits, -np.inf).argmax(1)).all()


def test_numpy_sampler_frequencies_are_the_renormalised_probabilities():
    logits = np.array([[3.0, 0.0, 1.0, -1.0, 2.0]], np.float32).repeat(40_000, 0)
    mask = np.array([[False, True, True, True, False]]).repeat(40_000, 0)
    a, _ = _categorical(logits, np.random.default_rng(5).random(40_000), np.float32, mask)
    freq = np.bincount(a, minlength=5) / 40_000
    p = np.exp(log_softmax_legal(logits[:1], mask[:1]))[0]
    np.testing.assert_allclose(freq, p, atol=0.01)
    assert freq[0] == 0 and freq[4] == 0


def test_uniforms_at_the_ends_still_draw_legal_actions():
    """u = 0 and u just below 1 with illegal first and last actions: the CDF's flat steps."""
    logits = np.zeros((4, 5), np.float32)
    mask = np.array([[False, True, False, True, False]] * 4)
    u = np.array([0.0, np.nextafter(1.0, 0.0), 0.5, 1e-300])
    a, lp = _categorical(logits, u, np.float64, mask)
    assert mask[np.arange(4), a].all()
    np.testing.assert_allclose(lp, np.log(0.5))


def test_numpy_multidiscrete_sampler_masks_every_dimension():
    rng = np.random.default_rng(6)
    nvec, n = [4, 3], 5000
    mask = random_masks(rng, n, nvec)
    logits = np.where(mask, 0.0, 10.0).astype(np.float32)
    head = dist_lib.MultiCategoricalHead(nvec)
    a, lp = sample_numpy(head, logits, None, rng, action_mask=mask)
    assert mask[np.arange(n), a[:, 0]].all() and mask[np.arange(n), 4 + a[:, 1]].all()
    want = head.distribution(tf.constant(logits), tf.constant(mask)).log_prob(a).numpy()
    np.testing.assert_allclose(lp, want, rtol=1e-5, atol=1e-5)
    modes = mode_numpy(head, logits, mask)
    assert mask[np.arange(n), modes[:, 0]].all() and mask[np.arange(n), 4 + modes[:, 1]].all()


def test_the_sampler_draws_the_same_uniforms_with_or_without_a_mask():
    """An all-legal mask gives the unmasked draws (same generator stream, same actions)."""
    logits = np.random.default_rng(7).normal(size=(500, 6)).astype(np.float32)
    head = dist_lib.CategoricalHead(6)
    a, lp = sample_numpy(head, logits, None, np.random.default_rng(8))
    b, lq = sample_numpy(head, logits, None, np.random.default_rng(8),
                         action_mask=np.ones((500, 6), bool))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(lp, lq, rtol=1e-6)


# -- checks and errors ---------------------------------------------------------------------------


def test_check_names_env_step_and_what_is_wrong():
    good = masks.check([[0, 1, 1]], (3,), 1, "env 'E' at env step 4")
    assert good.dtype == bool and good.tolist() == [[False, True, True]]
    with pytest.raises(rollout.EnvError,
                       match=r"^env 'E' at env step 4 gave an action_mask that forbids every "
                             r"action \(sub-env 1\)"):
        masks.check([[1, 0, 0], [0, 0, 0]], (3,), 2, "env 'E' at env step 4")
    with pytest.raises(rollout.EnvError, match="forbids every action of action dimension 1"):
        masks.check([[1, 0, 0, 0, 0]], (2, 3), 1, "env 'E' at env step 4")
    with pytest.raises(rollout.EnvError, match=r"shape \(1, 4\); the action space needs 3"):
        masks.check([[1, 0, 0, 1]], (3,), 1, "env 'E' at env step 4")
    with pytest.raises(ValueError,
                       match=r"^predict\(action_masks=...\) gave an action_mask that forbids"):
        masks.given_mask([[0, 0, 0]], gym.spaces.Discrete(3), 1, "predict(action_masks=...)")
    with pytest.raises(ValueError, match="need a Discrete or MultiDiscrete"):
        masks.given_mask([[1, 0]], gym.spaces.Box(-1, 1, (2,)), 1, "predict")


def test_dict_observation_mask_key_is_not_what_the_network_sees():
    env = OffersEnv(mask="observation")
    space = env.observation_space
    assert spaces.flat_dim(space) == 11
    layout = spaces.obs_layout(space)
    assert layout.has_mask_key and layout.space == gym.spaces.Dict(
        {"observation": space["observation"]})
    obs, _ = env.reset(seed=0)
    batch = spaces.batch_of_one(obs)
    np.testing.assert_array_equal(layout.preprocess(batch), obs["observation"][None])
    np.testing.assert_array_equal(layout.action_mask(batch), obs["action_mask"][None] > 0)
    assert spaces.obs_layout(OffersEnv(mask="info").observation_space).action_mask(
        np.zeros((1, 11))) is None
    with pytest.raises(ValueError, match="action_mask and nothing else"):
        spaces.obs_layout(gym.spaces.Dict({"action_mask": gym.spaces.MultiBinary(3)}))


# -- the collector's conventions -----------------------------------------------------------------


def collect(factory, steps=12, num_envs=3, seed=0):
    envs = rollout.make_vec_env(factory, num_envs)
    col = rollout.Collector(envs, "offers")
    col.reset(seed=seed)
    seen = []

    def policy_fn(obs, action_mask=None):
        seen.append(action_mask)
        a = np.array([np.flatnonzero(m)[-1] for m in action_mask], np.int32)  # best on offer
        return a, a.astype(np.int64), np.zeros(len(a), np.float32), None

    traj, episodes = col.collect(policy_fn, steps)
    col.close()
    return col, traj, episodes, seen


def legal_of(obs):
    return obs[..., :10] > 0


@pytest.mark.parametrize("convention", ["info", "observation", "method"])
def test_collector_reads_each_convention_and_stores_the_masks(convention):
    if convention == "method":
        def factory():
            return masks.ActionMasker(OffersEnv(mask=None), lambda env: env.legal_actions())
    else:
        def factory():
            return OffersEnv(mask=convention)
    col, traj, episodes, seen = collect(factory, steps=25)
    assert col.masks.source == convention
    assert traj.action_mask.shape == (25, 3, 10) and traj.action_mask.dtype == bool
    assert traj.observations.shape == (25, 3, 11)  # never the mask key
    # the mask of step t is that of o_t (the observation says what is on offer), across resets
    np.testing.assert_array_equal(traj.action_mask, legal_of(traj.observations))
    np.testing.assert_array_equal(np.stack(seen), traj.action_mask)
    assert len(episodes) == 3 and all(r > 0 for _, r, _ in episodes)  # never an illegal pick


def test_observation_key_takes_precedence_over_info():
    class Both(OffersEnv):
        def _info(self):  # an info mask that would forbid the items on offer
            return {"action_mask": 1 - self._legal}

    col, traj, _, _ = collect(lambda: Both(mask="observation"), steps=5)
    assert col.masks.source == "observation"
    np.testing.assert_array_equal(traj.action_mask, legal_of(traj.observations))


def test_an_env_without_masks_has_none():
    envs = rollout.make_vec_env(lambda: OffersEnv(mask=None), 2)
    col = rollout.Collector(envs, "offers")
    col.reset(seed=0)
    assert col.masks.source is None

    def policy_fn(obs):  # called without action_mask
        a = np.zeros(len(obs), np.int32)
        return a, a.astype(np.int64), np.zeros(len(a), np.float32), None

    traj, _ = col.collect(policy_fn, 3)
    assert traj.action_mask is None
    col.close()


class Forbidding(OffersEnv):
    """Offers nothing at the env's ``at``-th step (its mask forbids every action)."""

    at = 3

    def _offer(self):
        super()._offer()
        if self._t == self.at:
            self._legal[:] = 0


def test_a_mask_that_forbids_everything_names_env_and_step():
    envs = rollout.make_vec_env(lambda: Forbidding(mask="info"), 2)
    col = rollout.Collector(envs, "forbidding")
    col.reset(seed=0)

    def policy_fn(obs, action_mask=None):
        a = np.array([np.flatnonzero(m)[0] for m in action_mask], np.int32)
        return a, a.astype(np.int64), np.zeros(len(a), np.float32), None

    with pytest.raises(rollout.EnvError,
                       match=r"^env 'forbidding' at env step 6 gave an action_mask that forbids "
                             r"every action \(sub-env 0\); at least one action must be legal\.$"):
        col.collect(policy_fn, 10)
    col.close()


def test_masks_that_start_after_the_reset_or_stop_are_errors():
    class Late(OffersEnv):
        def _info(self):
            return {"action_mask": self._legal.copy()} if self._t >= 2 else {}

    envs = rollout.make_vec_env(lambda: Late(mask="info"), 2)
    col = rollout.Collector(envs, "late")
    col.reset(seed=0)
    assert col.masks.source is None

    def plain(obs):
        a = np.zeros(len(obs), np.int32)
        return a, a.astype(np.int64), np.zeros(len(a), np.float32), None

    with pytest.raises(rollout.EnvError, match="gave info\\['action_mask'\\] at env step 4 but "
                                               "not at the reset"):
        col.collect(plain, 5)
    col.close()

    class Stops(OffersEnv):
        def _info(self):
            return {"action_mask": self._legal.copy()} if self._t < 2 else {}

    envs = rollout.make_vec_env(lambda: Stops(mask="info"), 2)
    col = rollout.Collector(envs, "stops")
    col.reset(seed=0)

    def legal(obs, action_mask=None):
        a = np.array([np.flatnonzero(m)[0] for m in action_mask], np.int32)
        return a, a.astype(np.int64), np.zeros(len(a), np.float32), None

    with pytest.raises(rollout.EnvError, match=r"gave no info\['action_mask'\] at env step 4"):
        col.collect(legal, 5)
    col.close()


def test_masks_with_a_continuous_action_space_are_an_error_at_construction():
    class BoxOffers(OffersEnv):
        def __init__(self, mask):
            super().__init__(mask=mask)
            self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    for mask in ("info", "observation"):
        envs = rollout.make_vec_env(lambda mask=mask: BoxOffers(mask), 2)
        with pytest.raises(ValueError, match=r"gives action masks .* is not Discrete or "
                                             "MultiDiscrete"):
            rollout.Collector(envs, "box").reset(seed=0)
        envs.close()


def test_a_mask_of_the_wrong_width_is_an_error():
    class Wide(OffersEnv):
        def _info(self):
            return {"action_mask": np.ones(self.n + 1, np.int8)}

    envs = rollout.make_vec_env(lambda: Wide(mask="info"), 2)
    with pytest.raises(rollout.EnvError, match=r"env 'wide' at reset \(env step 0\) gave an "
                                               r"action_mask of shape \(2, 11\)"):
        rollout.Collector(envs, "wide").reset(seed=0)
    envs.close()


def test_multidiscrete_masks_through_the_collector():
    class Pairs(gym.Env):
        """Two dimensions of 3 and 4 choices; one (first) and two (second) legal at each step.
        Reward 1 for a legal pair, -1 otherwise."""

        def __init__(self):
            self.action_space = gym.spaces.MultiDiscrete([3, 4])
            self.observation_space = gym.spaces.Box(0.0, 1.0, (7,), np.float32)

        def _new(self):
            self.legal = np.zeros(7, np.int8)
            self.legal[self.np_random.integers(0, 3)] = 1
            self.legal[3 + self.np_random.choice(4, 2, replace=False)] = 1
            return self.legal.astype(np.float32), {"action_mask": self.legal.copy()}

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return self._new()

        def step(self, action):
            ok = self.legal[action[0]] and self.legal[3 + action[1]]
            obs, info = self._new()
            return obs, 1.0 if ok else -1.0, False, False, info

    envs = rollout.make_vec_env(Pairs, 2)
    col = rollout.Collector(envs, "pairs")
    col.reset(seed=0)
    head = dist_lib.MultiCategoricalHead([3, 4])
    rng = np.random.default_rng(0)

    def policy_fn(obs, action_mask=None):
        logits = np.full((len(obs), 7), 5.0, np.float32) * (1 - obs)  # favour the illegal
        a, lp = sample_numpy(head, logits, None, rng, action_mask=action_mask)
        return a, head.to_env(a), lp, None

    traj, _ = col.collect(policy_fn, 40)
    assert traj.action_mask.shape == (40, 2, 7)
    assert (traj.rewards == 1.0).all()
    col.close()
