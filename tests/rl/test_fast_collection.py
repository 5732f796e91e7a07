"""The collector's and numpy mirror's fast paths against plain reference code.

The collector checks observations and rewards for NaN/Inf once per rollout when nothing is
normalised; the error must be the one a check after every step gives. The mirror's forward pass
and Categorical sampler run in place / through ufunc methods; they must give the same bits as
the plain numpy expressions.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import pgrad  # noqa: F401  (first: silences TensorFlow)
from pgrad.rl.acting import policy as policy_lib
from pgrad.rl.acting.policy import NumpyPolicy
from pgrad.rl.collection import rollout
from pgrad.rl.models.networks import ActorCritic


class BadAtEnv(gym.Env):
    """obs = [t, 1]; episodes end (terminate) every 4 steps. At global step ``bad_step`` the
    observation, the reward or the final observation (``where``) is NaN / Inf."""

    def __init__(self, bad_step: int, where: str, value: float = np.nan):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.bad_step, self.where, self.value = bad_step, where, value
        self.t = self.total = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0, 1.0], np.float32), {}

    def step(self, action):
        self.t += 1
        self.total += 1
        obs = np.array([self.t, 1.0], np.float32)
        term = self.t % 4 == 0
        reward = 1.0
        if self.total == self.bad_step:
            if self.where == "reward":
                reward = self.value
            elif self.where == "final":  # the last observation of an episode
                term = True
                obs[0] = self.value
            else:
                obs[0] = self.value
        return obs, reward, term, False, {}


def zero_policy(obs):
    n = obs.shape[0]
    a = np.zeros(n, np.int32)
    return a, a.astype(np.int64), np.zeros(n, np.float32), None


def collector(bad_step: int, where: str, value: float = np.nan) -> rollout.Collector:
    envs = rollout.make_vec_env(lambda: BadAtEnv(bad_step, where, value), 2)
    col = rollout.Collector(envs, "BadAtEnv")
    col.reset(seed=0)
    return col


def error_of(fn) -> str:
    with pytest.raises(rollout.EnvError) as info:
        fn()
    return str(info.value)


@pytest.mark.parametrize("where", ["obs", "reward", "final"])
@pytest.mark.parametrize("bad_step", [1, 3, 4, 6])
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_rollout_check_raises_what_a_per_step_check_raises(where, bad_step, value):
    """Same message (what, env step, env steps before) as checking after every step; a NaN in
    the last step of a rollout is found too (bad_step 6 of a 6-step rollout)."""
    n = 6
    ref = collector(bad_step, where, value)
    fast = collector(bad_step, where, value)

    def per_step():
        for _ in range(n):
            ref._step(zero_policy, check=True)

    want = error_of(per_step)
    assert "non-finite " + ("reward" if where == "reward" else "observation") in want
    assert error_of(lambda: fast.collect(zero_policy, n)) == want
    ref.close()
    fast.close()


def test_rollout_without_nonfinite_values_passes_and_counts():
    col = collector(bad_step=10**9, where="obs")
    traj, episodes = col.collect(zero_policy, 9)
    assert traj.observations.shape == (9, 2, 2) and col.env_steps == 18
    assert len(episodes) == 4  # two envs, episodes of 4 steps
    col.close()


def test_env_error_after_a_nan_names_the_nan_first():
    """An env that fails on the step after returning a NaN: the error is the NaN (what a check
    per step reports), not the later failure."""

    class FailsAfterNan(BadAtEnv):
        def step(self, action):
            if self.total == self.bad_step:
                raise RuntimeError("physics exploded")
            return super().step(action)

    envs = rollout.make_vec_env(lambda: FailsAfterNan(3, "obs"), 2)
    col = rollout.Collector(envs, "FailsAfterNan")
    col.reset(seed=0)
    msg = error_of(lambda: col.collect(zero_policy, 8))
    assert "non-finite observation at env step 6 (after 4 env steps)" in msg, msg
    col.close()


def test_normalised_collection_still_checks_every_step():
    """With an observation normaliser the statistics must never see a NaN: the step raises."""
    from pgrad.rl.observations.normalize import ObsNormalizer

    envs = rollout.make_vec_env(lambda: BadAtEnv(2, "obs"), 2)
    norm = ObsNormalizer(2)
    col = rollout.Collector(envs, "BadAtEnv", obs_norm=norm)
    col.reset(seed=0)
    msg = error_of(lambda: col.collect(zero_policy, 6))
    assert "non-finite observation at env step 4" in msg
    assert np.isfinite(norm.rms.mean).all() and np.isfinite(norm.rms.var).all()
    col.close()


# -- the numpy mirror ----------------------------------------------------------------------------


def reference_categorical(logits, u):
    """The plain inverse-CDF sampler (method calls, no ufunc shortcuts)."""
    z = logits - logits.max(1, keepdims=True)
    e = np.exp(z, dtype=np.float64)
    cdf = np.cumsum(e, 1)
    total = cdf[:, -1]
    a = np.minimum((u[:, None] * total[:, None] > cdf).sum(1), logits.shape[1] - 1)
    return a.astype(np.int32), z[np.arange(logits.shape[0]), a] - np.log(total)


@pytest.mark.parametrize("k", [1, 2, 3, 7])
@pytest.mark.parametrize("n", [1, 8, 65])
def test_categorical_sampler_equals_reference_bit_for_bit(k, n):
    rng = np.random.default_rng(k * 100 + n)
    for _ in range(50):
        logits = (rng.normal(size=(n, k)) * 4).astype(np.float32)
        if k > 2:  # MultiDiscrete pads ragged sizes with -inf logits
            logits[:, -1] = -np.inf
        u = rng.random(n)
        a, lp = policy_lib._categorical(logits, u)
        ra, rlp = reference_categorical(logits, u)
        assert a.dtype == ra.dtype and lp.dtype == rlp.dtype
        np.testing.assert_array_equal(a, ra)
        np.testing.assert_array_equal(lp, rlp)
    u_edge = np.array([0.0, np.nextafter(1.0, 0.0)])  # the CDF's ends
    logits = np.zeros((2, k), np.float32)
    np.testing.assert_array_equal(policy_lib._categorical(logits, u_edge)[0],
                                  reference_categorical(logits, u_edge)[0])


@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("shared", [False, True])
def test_mirror_forward_equals_plain_numpy_bit_for_bit(activation, shared):
    head = pgrad.make_head(gym.spaces.Discrete(3))
    net = ActorCritic(5, head, (16, 8), activation, shared=shared, seed=1)
    mirror = NumpyPolicy(net)
    obs = np.random.default_rng(0).normal(size=(9, 5)).astype(np.float32)
    before = obs.copy()
    params, value = mirror.forward(obs, with_value=True)
    np.testing.assert_array_equal(obs, before)  # the input is not written to

    def plain(model, x):
        for layer in model.layers:
            x = x @ layer.kernel.numpy() + layer.bias.numpy()
            if layer.activation.__name__ == "tanh":
                x = np.tanh(x)
            elif layer.activation.__name__ == "relu":
                x = np.maximum(x, 0.0)
        return x

    feat = plain(net.trunk, obs) if net.trunk is not None else obs
    np.testing.assert_array_equal(params, plain(net.actor, feat))
    np.testing.assert_array_equal(value, plain(net.critic, feat)[:, 0])


# -- the running normaliser statistics -----------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 17), (8, 4), (16,), (1,)])
def test_running_statistics_equal_numpy_mean_var_bit_for_bit(shape):
    from pgrad.rl.observations import normalize

    rng = np.random.default_rng(0)
    for _ in range(100):
        x = (rng.normal(size=shape) * rng.uniform(0.1, 100.0)).astype(np.float64)
        mean, var = normalize.batch_moments(x)
        want_mean, want_var = x.mean(axis=0), x.var(axis=0)
        assert np.shape(mean) == np.shape(want_mean) and np.shape(var) == np.shape(want_var)
        np.testing.assert_array_equal(mean, want_mean)
        np.testing.assert_array_equal(var, want_var)
    x = np.array([-12.0, -3.0, np.nan, 0.5, 11.0, -0.0])
    np.testing.assert_array_equal(normalize._clip(x, 10.0), np.clip(x, -10.0, 10.0))


def test_normalised_observations_reused_across_steps_equal_normalising_each_time():
    """The collector normalises a step's observations once for both uses; a collector that
    normalises every time (the plain way) records the same arrays, episode ends included."""
    from pgrad.rl.observations.normalize import ObsNormalizer, RewardNormalizer

    def make(plain: bool):
        envs = rollout.make_vec_env(lambda: BadAtEnv(10**9, "obs"), 3)
        col = rollout.Collector(envs, "BadAtEnv", ObsNormalizer(2), RewardNormalizer(3, 0.9))
        if plain:
            col._norm = lambda flat: col.obs_norm(flat)
        col.reset(seed=0)
        return col

    fast, plain = make(False), make(True)
    for _ in range(3):  # several rollouts: the statistics change between and within them
        a, b = fast.collect(zero_policy, 7)[0], plain.collect(zero_policy, 7)[0]
        for x, y in zip(a, b):
            if x is not None:
                np.testing.assert_array_equal(x, y)
    assert a.terminated.sum() > 0
    fast.close()
    plain.close()
