"""Rollouts, observation spaces, normalisers and the numpy policy mirror."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

import agents
import pgrad  # noqa: F401  (first: silences TensorFlow)
from pgrad.rl.acting.policy import ActorCritic, NumpyPolicy
from pgrad.rl.collection import rollout
from pgrad.rl.observations import spaces
from pgrad.rl.observations.normalize import ObsNormalizer, RewardNormalizer


class CounterEnv(gym.Env):
    """obs = [steps so far in the episode, env tag]; reward 1 per step.

    Terminates after ``terminate_at`` steps if given; a TimeLimit truncates at ``limit``.
    """

    def __init__(self, terminate_at: int | None = None, tag: float = 0.0):
        self.observation_space = gym.spaces.Box(-100, 100, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.terminate_at, self.tag, self.t = terminate_at, tag, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0, self.tag], np.float32), {}

    def step(self, action):
        self.t += 1
        term = self.terminate_at is not None and self.t >= self.terminate_at
        return np.array([self.t, self.tag], np.float32), 1.0, term, False, {}


def counter(limit: int, terminate_at: int | None = None):
    def make():
        return gym.wrappers.TimeLimit(CounterEnv(terminate_at), max_episode_steps=limit)

    return make


def zero_policy(obs):
    n = obs.shape[0]
    a = np.zeros(n, np.int32)
    return a, a.astype(np.int64), np.zeros(n, np.float32), None


def make_collector(factory, num_envs=2):
    envs = rollout.make_vec_env(factory, num_envs)
    col = rollout.Collector(envs, "counter")
    col.reset(seed=0)
    return col


def test_truncation_keeps_final_observation_and_flags():
    col = make_collector(counter(limit=3), num_envs=2)
    traj, episodes = col.collect(zero_policy, 7)
    obs, nxt = traj.observations[:, 0, 0], traj.next_observations[:, 0, 0]
    np.testing.assert_array_equal(obs, [0, 1, 2, 0, 1, 2, 0])
    # At the truncation the next observation is the final one (3), not the reset one (0).
    np.testing.assert_array_equal(nxt, [1, 2, 3, 1, 2, 3, 1])
    np.testing.assert_array_equal(traj.truncated[:, 0], [0, 0, 1, 0, 0, 1, 0])
    np.testing.assert_array_equal(traj.terminated[:, 0], np.zeros(7))
    assert traj.observations.shape == (7, 2, 2) and traj.rewards.shape == (7, 2)
    assert [(s, r, n) for s, r, n in episodes] == [(6, 3.0, 3), (6, 3.0, 3), (12, 3.0, 3),
                                                   (12, 3.0, 3)]
    assert not traj.observations.flags.writeable  # immutable
    col.close()


def test_termination_vs_truncation_flags():
    col = make_collector(counter(limit=10, terminate_at=2), num_envs=1)
    traj, _ = col.collect(zero_policy, 4)
    np.testing.assert_array_equal(traj.terminated[:, 0], [0, 1, 0, 1])
    np.testing.assert_array_equal(traj.truncated[:, 0], [0, 0, 0, 0])
    np.testing.assert_array_equal(traj.next_observations[:, 0, 0], [1, 2, 1, 2])
    col.close()


@pytest.mark.parametrize("terminate", [False, True])
def test_a2c_targets_bootstrap_truncation_not_termination(terminate):
    """Agent targets vs a plain loop: V(final obs) at truncations, 0 at terminations."""
    factory = counter(limit=3, terminate_at=2 if terminate else None)
    cfg = agents.A2C.Config(num_envs=2, n_steps=7, gamma=0.9, gae_lambda=1.0)
    agent = agents.A2C(cfg, env_id=factory, seed=0)
    traj, _ = agent.collector.collect(zero_policy, 7)
    value = lambda o: agent.net.value(tf.constant(o.reshape(-1, 2))).numpy().reshape(7, 2)  # noqa: E731
    v, nv = value(traj.observations), value(traj.next_observations)
    adv, ret = agent.targets(traj.rewards, traj.terminated, traj.truncated, v, nv)
    expected = np.zeros((7, 2))
    for b in range(2):
        g = nv[-1, b]  # bootstrap after the rollout
        for t in reversed(range(7)):
            if traj.terminated[t, b]:
                g = traj.rewards[t, b]
            elif traj.truncated[t, b]:
                g = traj.rewards[t, b] + 0.9 * nv[t, b]
            else:
                g = traj.rewards[t, b] + 0.9 * g
            expected[t, b] = g
    np.testing.assert_allclose(ret.numpy(), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(adv.numpy(), expected - v, rtol=1e-5, atol=1e-5)
    assert (traj.truncated.sum() > 0) != terminate and (traj.terminated.sum() > 0) == terminate
    agent.close()


def test_whole_episode_collection_masks_after_last_episode():
    col = make_collector(counter(limit=5, terminate_at=None), num_envs=3)
    traj, episodes = col.collect_episodes(zero_policy, min_steps=7)
    mask = traj.mask
    done = np.maximum(traj.terminated, traj.truncated)
    assert mask.sum() >= 7
    for b in range(3):
        n = int(mask[:, b].sum())
        assert mask[:n, b].all() and not mask[n:, b].any()  # a prefix ...
        assert done[n - 1, b] == 1  # ... ending at an episode end
    assert len(episodes) >= 3
    col.close()


def test_nan_env_raises_naming_env_and_step():
    class NanEnv(CounterEnv):
        def step(self, action):
            obs, r, term, trunc, info = super().step(action)
            return obs, (np.nan if self.t == 3 else r), term, trunc, info

    def make():
        return NanEnv()

    make.__name__ = "NanEnv"
    cfg = agents.A2C.Config(num_envs=2, n_steps=5)
    agent = agents.A2C(cfg, env_id=make, seed=0)
    with pytest.raises(ValueError, match=r"'NanEnv'.*non-finite reward.*env step 6"):
        agent.step()
    agent.close()


# -- observation spaces --------------------------------------------------------------------------


def test_spaces_flatten_and_one_hot():
    box = gym.spaces.Box(-1, 1, (2, 3), np.float32)
    disc = gym.spaces.Discrete(4, start=1)
    md = gym.spaces.MultiDiscrete([2, 3])
    mb = gym.spaces.MultiBinary(3)
    assert [spaces.flat_dim(s) for s in (box, disc, md, mb)] == [6, 4, 5, 3]
    np.testing.assert_array_equal(spaces.make_preprocessor(disc)(np.array([1, 4])),
                                  [[1, 0, 0, 0], [0, 0, 0, 1]])
    np.testing.assert_array_equal(spaces.make_preprocessor(md)(np.array([[1, 2]])),
                                  [[0, 1, 0, 0, 1]])
    x = np.arange(12, dtype=np.float32).reshape(2, 2, 3)
    np.testing.assert_array_equal(spaces.make_preprocessor(box)(x), x.reshape(2, 6))
    d = gym.spaces.Dict({"b": disc, "a": box})  # Gymnasium sorts keys: a, b
    out = spaces.make_preprocessor(d)({"a": x, "b": np.array([2, 3])})
    assert out.shape == (2, 10) and spaces.flat_dim(d) == 10
    np.testing.assert_array_equal(out[:, 6:], [[0, 1, 0, 0], [0, 0, 1, 0]])
    tup = gym.spaces.Tuple((mb, disc))
    out = spaces.make_preprocessor(tup)((np.array([[1, 0, 1]]), np.array([1])))
    np.testing.assert_array_equal(out, [[1, 0, 1, 1, 0, 0, 0]])


def test_unsupported_space_names_it():
    with pytest.raises(ValueError, match=r"Text.*not supported; supported: Box, Discrete"):
        spaces.flat_dim(gym.spaces.Text(5))
    with pytest.raises(ValueError, match=r"key 'x'"):
        spaces.make_preprocessor(gym.spaces.Dict({"x": gym.spaces.Text(5)}))


# -- normalisers ----------------------------------------------------------------------------------


def test_obs_normalizer_matches_numpy_and_round_trips():
    rng = np.random.default_rng(0)
    data = [rng.normal(3.0, 2.0, (8, 3)) for _ in range(20)]
    norm = ObsNormalizer(3)
    for x in data:
        norm.rms.update(x)
    allx = np.concatenate(data)
    np.testing.assert_allclose(norm.rms.mean, allx.mean(0), rtol=1e-4)
    np.testing.assert_allclose(norm.rms.var, allx.var(0), rtol=1e-3)
    norm.push()
    other = ObsNormalizer(3)
    tf.train.Checkpoint(n=other).read(tf.train.Checkpoint(n=norm).write("/tmp/pgrad_norm_test"))
    other.pull()
    np.testing.assert_allclose(other(allx[:5]), norm(allx[:5]))
    np.testing.assert_allclose(norm.tf_normalize(tf.constant(allx[:5], tf.float32)).numpy(),
                               norm(allx[:5]), atol=1e-5)


def test_reward_normalizer_scales_by_return_std():
    """r_t / std of every discounted return G seen so far (prior: count 1e-4, mean 0, var 1)."""
    norm = RewardNormalizer(num_envs=1, gamma=0.5)
    g, seen, c0 = 0.0, [], 1e-4
    for t in range(6):
        r = 1.0 + t
        out = norm(np.array([r]), np.array([t == 2]))
        g = 0.5 * g + r
        seen.append(g)
        x = np.array(seen)
        mean = x.sum() / (c0 + len(x))
        var = (c0 * 1.0 + c0 * mean**2 + np.sum((x - mean) ** 2)) / (c0 + len(x))
        np.testing.assert_allclose(out[0], min(r / np.sqrt(var + 1e-8), 10.0), rtol=1e-5)
        if t == 2:  # episode end: the return restarts
            g = 0.0


# -- numpy mirror ---------------------------------------------------------------------------


BOX = gym.spaces.Box(-1, 1, (2,), np.float32)


@pytest.mark.parametrize("space, options", [
    (gym.spaces.Discrete(3), {}), (BOX, {}), (BOX, {"state_dependent_std": True}),
    (gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([3.0, 0.5], np.float32)),
     {"squash": True}),
    (BOX, {"state_dependent_std": True, "squash": True}),
    (BOX, {"sde_latent_dim": 8}), (BOX, {"sde_latent_dim": 8, "squash": True}),
    (gym.spaces.MultiDiscrete([2, 4]), {}), (gym.spaces.MultiBinary(3), {})],
    ids=["discrete", "box", "box-state-std", "box-squash", "box-state-std-squash", "box-sde",
         "box-sde-squash",
         "multidiscrete", "multibinary"])
@pytest.mark.parametrize("shared", [False, True])
def test_numpy_mirror_equals_tensorflow(space, options, shared):
    head = pgrad.make_head(space, log_std_init=-0.5, **options)
    net = ActorCritic(5, head, (16, 8), "tanh", shared=shared, seed=3)
    mirror = NumpyPolicy(net)
    obs = np.random.default_rng(0).normal(size=(32, 5)).astype(np.float32)
    params, value = mirror.forward(obs, with_value=True)
    np.testing.assert_allclose(params, net.params(tf.constant(obs)).numpy(), atol=1e-5)
    np.testing.assert_allclose(value, net.value(tf.constant(obs)).numpy(), atol=1e-5)
    noise = mirror.sde_noise(32, np.random.default_rng(2)) if head.uses_latent else None
    actions, log_probs = mirror.sample(params, np.random.default_rng(1), noise)
    tf_logp = head.distribution(tf.constant(params)).log_prob(actions).numpy()
    np.testing.assert_allclose(log_probs, tf_logp, atol=1e-4)
    # flat-weight sync equals variable-by-variable sync
    for v in net.variables:
        v.assign(v + 0.1)
    mirror.load_flat(mirror.flat_weights().numpy())
    np.testing.assert_allclose(mirror.forward(obs)[0], net.params(tf.constant(obs)).numpy(),
                               atol=1e-5)


def test_squashed_gaussian_log_prob_is_the_density_of_the_squashed_action():
    """log_prob(u) = log density of a = c + h tanh(u), checked by the change of variables on a
    fine grid (the density integrates to 1 over the bounds)."""
    space = gym.spaces.Box(np.array([-2.0], np.float32), np.array([1.0], np.float32))
    head = pgrad.make_head(space, log_std_init=0.3, squash=True)
    head.build(None)
    params = tf.constant([[0.7]], tf.float32)
    a = np.linspace(-2 + 1e-4, 1 - 1e-4, 200001)
    u = np.arctanh((a - (-0.5)) / 1.5)
    lp = head.distribution(tf.repeat(params, len(u), 0)).log_prob(u[:, None]).numpy()
    assert np.trapezoid(np.exp(lp), a) == pytest.approx(1.0, abs=2e-3)
    env_a = head.to_env(u[:, None])
    np.testing.assert_allclose(env_a[:, 0], a, atol=1e-4)
    assert env_a.min() >= -2 and env_a.max() <= 1


def test_sde_noise_is_latent_times_the_held_matrix():
    """gSDE: with the exploration matrices held, action - mean = latent @ W, exactly; the
    marginal std the log-probs use is sqrt(latent^2 @ exp(2 log_std) + 1e-6)."""
    space = gym.spaces.Box(-1, 1, (2,), np.float32)
    head = pgrad.make_head(space, log_std_init=-1.0, sde_latent_dim=8)
    net = ActorCritic(5, head, (16, 8), "tanh", seed=3)
    mirror = NumpyPolicy(net)
    obs = np.random.default_rng(0).normal(size=(4, 5)).astype(np.float32)
    params, _ = mirror.forward(obs)
    assert params.shape == (4, 2 + 8)
    w = mirror.sde_noise(4, np.random.default_rng(5))
    assert w.shape == (4, 8, 2)
    actions, _ = mirror.sample(params, np.random.default_rng(1), w)
    latent = params[:, 2:]
    np.testing.assert_allclose(actions - params[:, :2], np.einsum("nl,nla->na", latent, w),
                               atol=1e-5)
    _, log_std = head.mean_and_log_std(tf.constant(params))
    want = 0.5 * np.log(np.square(latent) @ np.exp(-2.0 * np.ones((8, 2))) + 1e-6)
    np.testing.assert_allclose(log_std.numpy(), want, rtol=1e-5)


def test_numpy_categorical_sampling_frequencies():
    head = pgrad.make_head(gym.spaces.Discrete(3))
    mirror = NumpyPolicy(ActorCritic(1, head, (4,), seed=0))
    logits = np.tile(np.log([[0.2, 0.5, 0.3]]), (20000, 1))
    a, _ = mirror.sample(logits, np.random.default_rng(0))
    np.testing.assert_allclose(np.bincount(a, minlength=3) / 20000, [0.2, 0.5, 0.3], atol=0.015)


@pytest.mark.subprocess  # one process per env
def test_async_vector_env_gives_the_same_trajectory():
    sync, asyn = (rollout.Collector(rollout.make_vec_env(counter(limit=3), 2, mode), "counter")
                  for mode in ("sync", "async"))
    for col in (sync, asyn):
        col.reset(seed=0)
    a, b = sync.collect(zero_policy, 5)[0], asyn.collect(zero_policy, 5)[0]
    for x, y in zip(a, b):
        if x is not None:
            np.testing.assert_array_equal(x, y)
    sync.close()
    asyn.close()


def fails_in_children_but_the_first(flag):
    """A factory of CounterEnv whose constructor raises in every subprocess except the first to
    claim ``flag`` (in this process it builds: make_vec_env's checks build one here)."""
    import os

    parent = os.getpid()

    def make():
        if os.getpid() != parent:
            try:
                os.close(os.open(flag, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                raise RuntimeError("license server unreachable") from None
        return CounterEnv()

    return make


@pytest.mark.subprocess  # one process per env
def test_an_async_envs_constructor_failing_in_its_subprocess_is_one_env_error(tmp_path, capfd):
    import warnings

    factory = fails_in_children_but_the_first(str(tmp_path / "flag"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(rollout.EnvError) as err:
            rollout.make_vec_env(factory, 3, "async")
    assert str(err.value) == ("env 'make' could not be created: RuntimeError: license server "
                              "unreachable")
    assert not caught, [str(w.message) for w in caught]  # gymnasium's worker log: silenced
    import gc

    gc.collect()  # the half-built vector env ends its workers (the healthy one by SIGTERM)
    out, stderr = capfd.readouterr()
    assert "Traceback" not in stderr + out and "license" not in stderr + out, stderr
