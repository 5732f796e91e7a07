"""Agents: registry, configs, action spaces, custom and stateful chains, checkpoints, export."""

from __future__ import annotations

import dataclasses
import json

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

import agents
import pgrad
from pgrad.rl.observations import spaces


class ToyEnv(gym.Env):
    """Random 3-d observations, any action space, reward = -|first action component|, 8 steps."""

    def __init__(self, action_space: gym.Space, obs_space: gym.Space | None = None):
        self.action_space = action_space
        self.observation_space = obs_space or gym.spaces.Box(-1, 1, (3,), np.float32)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        assert self.action_space.contains(np.asarray(action, self.action_space.dtype)), action
        self.t += 1
        reward = -float(np.abs(np.asarray(action, np.float64).reshape(-1)[0]))
        return self.observation_space.sample(), reward, self.t >= 8, False, {}


ACTION_SPACES = {
    "discrete": gym.spaces.Discrete(3, start=1),
    "box": gym.spaces.Box(-2.0, 2.0, (2,), np.float32),
    "multidiscrete": gym.spaces.MultiDiscrete([2, 3]),
    "multibinary": gym.spaces.MultiBinary(3),
}


def factory(action_space, obs_space=None):
    return lambda: ToyEnv(action_space, obs_space)


def small(cls, **kw):
    base = {"num_envs": 2, "hidden": (8,)}
    if cls is agents.Reinforce:
        base["batch_steps"] = 16
    else:
        base["n_steps"] = 4
    if cls is agents.PPO:
        base.update(minibatch_size=4, epochs=2)
    return cls.Config(**{**base, **kw})


AGENTS = [agents.A2C, agents.Reinforce, agents.PPO, agents.NPG]


def test_registry():
    assert agents.names() == ["a2c", "appo", "grpo", "impala", "ippo", "mappo", "npg", "ppo",
                             "reinforce", "rloo", "trpo"]
    assert agents.get("A2C") is agents.A2C and agents.get("reinforce") is agents.Reinforce
    with pytest.raises(ValueError, match="unknown agent 'sac'; known agents: a2c, appo, grpo, "
                                         "impala, ippo, mappo, npg, ppo, reinforce"):
        agents.get("sac")


@pytest.mark.parametrize("cls", AGENTS)
def test_config_documented_and_validated(cls):
    for f in dataclasses.fields(cls.Config):
        assert f.metadata.get("help"), f"{cls.__name__}.Config.{f.name} has no help"
    cls.Config().validate()
    with pytest.raises(ValueError, match=r"gamma must be in \[0, 1\]; got 1.5"):
        cls.Config(gamma=1.5).validate()
    with pytest.raises(ValueError, match="optimizer must be one of"):
        cls(cls.Config(optimizer="lbfgs"), env_id=factory(ACTION_SPACES["discrete"]))


@pytest.mark.parametrize("cls", AGENTS)
@pytest.mark.parametrize("space", sorted(ACTION_SPACES))
def test_every_action_space(cls, space):
    action_space = ACTION_SPACES[space]
    agent = cls(small(cls), env_id=factory(action_space), seed=0)
    for _ in range(2):
        info = agent.step()
    m = info["metrics"]
    assert all(np.isfinite(v) for v in m.values()), m
    assert m["nonfinite_skipped"] == 0.0
    assert info["env_steps"] == agent.env_steps > 0
    obs = np.stack([agent.observation_space.sample() for _ in range(5)])
    for det in (False, True):
        acts = agent.act(obs, deterministic=det)
        assert len(acts) == 5 and all(action_space.contains(a) for a in acts)
    agent.close()


@pytest.mark.parametrize("obs_space", [
    gym.spaces.Discrete(4),
    gym.spaces.Dict({"a": gym.spaces.Box(-1, 1, (2,), np.float32),
                     "b": gym.spaces.MultiBinary(2)}),
    gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(-1, 1, (1,), np.float32))),
], ids=["discrete", "dict", "tuple"])
def test_observation_spaces(obs_space):
    agent = agents.A2C(small(agents.A2C), env_id=factory(ACTION_SPACES["discrete"], obs_space))
    info = agent.step()
    assert agent.env_steps == 8 and np.isfinite(list(info["metrics"].values())).all()
    # The policy sees the flattened observation and acts on one raw observation or a batch.
    one = obs_space.sample()
    assert agent.predict(one)[0] in ACTION_SPACES["discrete"]
    batch = agent.predict(spaces.batch_of_one(one))[0]
    assert batch.shape == (1,) and batch[0] in ACTION_SPACES["discrete"]
    agent.close()


def test_unsupported_observation_space_is_a_clear_error():
    with pytest.raises(ValueError, match="observation space Text.*not supported"):
        agents.A2C(small(agents.A2C),
                   env_id=factory(ACTION_SPACES["discrete"], gym.spaces.Text(4)))


def user_clip(grads, **context):
    """A user's per-step function: the engine must materialise per-step gradients for it."""
    return [g * 0.5 for g in grads]


@pytest.mark.parametrize("cls", AGENTS)
def test_custom_and_stateful_chains(cls):
    env = factory(ACTION_SPACES["discrete"])
    custom = pgrad.chain(pgrad.weight_by("advantages"), pgrad.stateless(user_clip),
                         pgrad.clip_per_step(0.01), pgrad.mean_steps())
    agent = cls(small(cls), env_id=env, seed=0, transform=custom)
    m = agent.step()["metrics"]
    assert m["path_fused"] == 0.0 and 0.0 <= m["clip_fraction"] <= 1.0
    agent.close()
    stateful = pgrad.chain(pgrad.weight_by_running("returns"), pgrad.mean_steps())
    agent = cls(small(cls), env_id=env, seed=0, transform=stateful)
    counts = []
    for _ in range(3):
        agent.step()
        counts.append(float(agent.transform_state.read()[0].count))
    assert counts[0] > 0 and counts[0] < counts[1] < counts[2]  # state carried across updates
    agent.close()


def test_custom_chain_changes_the_update():
    """The chain really drives the policy update: scale(0) leaves the actor untouched."""
    env = factory(ACTION_SPACES["discrete"])
    frozen = pgrad.chain(pgrad.weight_by("advantages"), pgrad.mean_steps(), pgrad.scale(0.0))
    agent = agents.A2C(small(agents.A2C), env_id=env, seed=0, transform=frozen)
    before = [v.numpy() for v in agent.net.actor.trainable_variables]
    critic_before = [v.numpy() for v in agent.net.critic.trainable_variables]
    agent.step()
    for b, v in zip(before, agent.net.actor.trainable_variables):
        np.testing.assert_array_equal(b, v.numpy())
    assert any(not np.array_equal(b, v.numpy())
               for b, v in zip(critic_before, agent.net.critic.trainable_variables))
    agent.close()


def test_update_matches_hand_written_a2c_loss():
    """Default chain + value term == gradient of SB3's A2C loss, applied by plain SGD."""
    env = factory(ACTION_SPACES["discrete"])
    cfg = small(agents.A2C, optimizer="sgd", learning_rate=0.1, max_grad_norm=0.0, vf_coef=0.5,
                ent_coef=0.01)
    agent = agents.A2C(cfg, env_id=env, seed=0)
    # Re-collect with the agent's own rng so we know the batch the update will see.
    rng = np.random.default_rng([agent.seed, 0])  # what step() uses for update 0
    traj, _ = agent.collector.collect(agent.acting_fn(rng), 4)
    agent.collector.reset(seed=0)  # same episodes again for step()
    net, head = agent.net, agent.head
    flat = lambda x: tf.reshape(tf.constant(x), [8, *x.shape[2:]])  # noqa: E731
    obs, nxt = flat(traj.observations), flat(traj.next_observations)
    with tf.GradientTape() as tape:
        values = tf.reshape(net.value(obs), [4, 2])
        adv = pgrad.gae(traj.rewards, tf.stop_gradient(values),
                        tf.reshape(net.value(nxt), [4, 2]), traj.terminated, traj.truncated,
                        cfg.gamma, cfg.gae_lambda)
        ret = adv + tf.stop_gradient(values)
        adv, ret = tf.stop_gradient(tf.reshape(adv, [-1])), tf.stop_gradient(tf.reshape(ret, [-1]))
        dist = head.distribution(net.params(obs))
        loss = (-tf.reduce_mean(adv * dist.log_prob(flat(traj.actions)))
                + 0.5 * tf.reduce_mean(tf.square(ret - tf.reshape(values, [-1])))
                - 0.01 * tf.reduce_mean(dist.entropy()))
    grads = tape.gradient(loss, net.variables)
    expected = [v.numpy() - 0.1 * g.numpy() for v, g in zip(net.variables, grads)]
    agent.step()
    for e, v in zip(expected, net.variables):
        np.testing.assert_allclose(v.numpy(), e, atol=1e-5)
    agent.close()


def test_nonfinite_gradient_is_skipped():
    env = factory(ACTION_SPACES["discrete"])
    poison = pgrad.chain(pgrad.weight_by("advantages"), pgrad.mean_steps(),
                         pgrad.stateless(lambda g, **c: [x * np.nan for x in g], name="nan"))
    agent = agents.A2C(small(agents.A2C), env_id=env, seed=0, transform=poison)
    before = [v.numpy() for v in agent.net.variables]
    m = agent.step()["metrics"]
    assert m["nonfinite_skipped"] == 1.0
    for b, v in zip(before, agent.net.variables):
        np.testing.assert_array_equal(b, v.numpy())
    agent.close()


def test_shared_trunk_scales_critic_gradient():
    env = factory(ACTION_SPACES["discrete"])
    grads = {}
    for scale in (1.0, 0.25):
        agent = agents.A2C(small(agents.A2C, shared_trunk=True, trunk_grad_scale=scale),
                           env_id=env, seed=0)
        obs = tf.random.stateless_normal([5, 3], seed=[1, 2])
        with tf.GradientTape() as tape:
            v = tf.reduce_sum(agent.net.value(obs))
        grads[scale] = tape.gradient(v, agent.net.trunk.trainable_variables)
        agent.step()  # and it trains
        agent.close()
    for a, b in zip(grads[1.0], grads[0.25]):
        np.testing.assert_allclose(0.25 * a.numpy(), b.numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("cls", AGENTS)
def test_same_seed_same_episodes(cls):
    def run(seed, steps=4):
        agent = cls(small(cls, num_envs=3), env_id="CartPole-v1", seed=seed)
        eps, metrics = [], []
        for _ in range(steps):
            info = agent.step()
            eps += info["episodes"]
            metrics.append(info["metrics"]["policy_loss"])
        agent.close()
        return eps, metrics

    def first_rollout(seed):  # what another seed changes, without tracing an update
        agent = cls(small(cls, num_envs=3), env_id="CartPole-v1", seed=seed)
        traj, _ = agent.collector.collect(agent.acting_fn(np.random.default_rng(seed)), 8)
        agent.close()
        return traj

    a, b = run(3), run(3)
    assert a == b and len(a[0]) > 0
    same, other = first_rollout(3), first_rollout(4)
    np.testing.assert_array_equal(same.observations, first_rollout(3).observations)
    assert not np.array_equal(same.observations, other.observations)
    assert not np.array_equal(same.log_probs, other.log_probs)


@pytest.mark.parametrize("cls", AGENTS)
def test_checkpoint_round_trip(cls, tmp_path):
    cfg = small(cls, normalize_obs=True, normalize_reward=True, num_envs=2)
    stateful = pgrad.chain(pgrad.weight_by_running("returns"), pgrad.mean_steps())
    src = cls(cfg, env_id="CartPole-v1", seed=0, transform=stateful)
    for _ in range(4):
        src.step()
    # Changing normaliser statistics and batch lengths must not retrace the update.
    assert src.updater.tracing_count() <= (1 if cls is agents.A2C else 2)
    path = tf.train.Checkpoint(**src.trackables()).write(str(tmp_path / "ckpt"))
    dst = cls(cfg, env_id="CartPole-v1", seed=9, transform=stateful)
    tf.train.Checkpoint(**dst.trackables()).read(path).assert_consumed()
    assert dst.env_steps == src.env_steps
    assert int(dst.updates_var.numpy()) == 4 and dst.seed == 9  # seed re-read on next use
    for a, b in zip(src.net.variables, dst.net.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(src.optimizer.variables, dst.optimizer.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(src.transform_state.values, dst.transform_state.values):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    obs = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    np.testing.assert_array_equal(src.act(obs, deterministic=True),
                                  dst.act(obs, deterministic=True))  # restore synced the mirror
    assert dst.seed == 0
    np.testing.assert_allclose(dst.obs_norm.rms.mean, src.obs_norm.rms.mean)
    src.close()
    dst.close()


def test_restore_through_a_checkpoint_made_before_training_is_noticed(tmp_path):
    """A user's Checkpoint over ``trackables()``, restored after some steps: the next step sees
    the new update counter and re-reads the weights (the mirror is not stale)."""
    cfg = small(agents.A2C)
    src = agents.A2C(cfg, env_id="CartPole-v1", seed=0)
    for _ in range(3):
        src.step()
    path = tf.train.Checkpoint(**src.trackables()).write(str(tmp_path / "ckpt"))
    dst = agents.A2C(cfg, env_id="CartPole-v1", seed=0)
    ckpt = tf.train.Checkpoint(**dst.trackables())
    dst.step()  # the mirror now holds dst's own weights after one update
    ckpt.read(path).assert_consumed()
    obs = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)
    np.testing.assert_array_equal(dst.act(obs, deterministic=True),
                                  src.act(obs, deterministic=True))
    np.testing.assert_array_equal(dst.mirror.flat_numpy(), src.mirror.flat_numpy())
    src.close()
    dst.close()

GAUSSIAN = {"box-state-std": {"state_dependent_std": True}, "box-squash": {"squash": True},
            "box-state-std-squash": {"state_dependent_std": True, "squash": True},
            "box-sde": {"use_sde": True, "sde_sample_freq": 4},
            "box-sde-squash": {"use_sde": True, "squash": True}}


def assert_export_acts_as_agent(agent, path, action_space):
    """The SavedModel export, loaded with plain TensorFlow, gives the agent's greedy actions."""
    agent.export_policy(str(path))
    loaded = tf.saved_model.load(str(path))
    obs = np.stack([agent.observation_space.sample() for _ in range(7)])
    out = loaded.action(tf.constant(obs)).numpy()
    assert all(action_space.contains(a) for a in out)
    np.testing.assert_allclose(out, agent.act(obs, deterministic=True), atol=1e-5)
    sig = loaded.signatures["action"](observation=tf.constant(obs))
    np.testing.assert_allclose(next(iter(sig.values())).numpy(), out)


@pytest.mark.parametrize("space", sorted(ACTION_SPACES))  # Gaussian options: the test below
def test_export_policy_loads_with_plain_tensorflow(space, tmp_path):
    action_space = ACTION_SPACES[space]
    agent = agents.A2C(small(agents.A2C, normalize_obs=True), env_id=factory(action_space))
    agent.step()
    assert_export_acts_as_agent(agent, tmp_path / "policy", action_space)
    agent.close()


@pytest.mark.subprocess
def test_export_loads_without_pgrad(tmp_path):
    """A fresh interpreter with only TensorFlow loads and runs the exported policy."""
    import subprocess
    import sys

    agent = agents.A2C(small(agents.A2C, normalize_obs=True), env_id="CartPole-v1")
    agent.step()
    agent.export_policy(str(tmp_path / "p"))
    obs = np.random.default_rng(0).normal(size=(4, 4)).astype(np.float32)
    expected = agent.act(obs, deterministic=True).tolist()
    agent.close()
    code = (
        "import sys, json, numpy as np, tensorflow as tf\n"
        f"m = tf.saved_model.load({str(tmp_path / 'p')!r})\n"
        f"obs = np.array({obs.tolist()!r}, np.float32)\n"
        "print(json.dumps(m.action(obs).numpy().tolist()))\n"
        "assert 'pgrad' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == expected


def test_export_discrete_observations(tmp_path):
    agent = agents.A2C(small(agents.A2C),
                       env_id=factory(ACTION_SPACES["discrete"], gym.spaces.Discrete(5)))
    agent.step()
    agent.export_policy(str(tmp_path / "p"))
    obs = np.array([0, 3, 4], np.int64)
    loaded = tf.saved_model.load(str(tmp_path / "p"))
    out = loaded.action(tf.constant(obs)).numpy()
    np.testing.assert_array_equal(out, agent.act(obs, deterministic=True))
    agent.close()


def test_linear_learning_rate_decay():
    cfg = small(agents.A2C, lr_decay_steps=80, learning_rate=1e-3)  # 8 steps/update: 10 updates
    agent = agents.A2C(cfg, env_id=factory(ACTION_SPACES["discrete"]))
    rates = [agent.step()["metrics"]["learning_rate"] for _ in range(3)]
    np.testing.assert_allclose(rates, [9e-4, 8e-4, 7e-4], rtol=1e-5)
    agent.close()


@pytest.mark.parametrize("options", list(GAUSSIAN.values()), ids=list(GAUSSIAN))
def test_gaussian_options_train_save_load_and_evaluate(options, tmp_path):
    """Continuous-control options through the whole path: update, save, load, export (plain
    TensorFlow gives the agent's greedy actions), and pgrad.evaluate of the saved agent."""
    env = "Pendulum-v1"
    agent = agents.make("ppo", env, seed=0, num_envs=2, n_steps=16, minibatch_size=16, epochs=2,
                        normalize_obs=True, **options)
    agent.step()
    assert_export_acts_as_agent(agent, tmp_path / "policy", agent.action_space)
    agent.save(tmp_path / "saved")
    loaded = agents.load(tmp_path / "saved")
    obs = np.random.default_rng(0).uniform(-1, 1, size=(5, 3)).astype(np.float32)
    np.testing.assert_array_equal(agent.predict(obs)[0], loaded.predict(obs)[0])
    assert np.all(np.abs(agent.predict(obs)[0]) <= 2.0)
    a = pgrad.evaluate(agent, episodes=1, seed=3)
    b = pgrad.evaluate(tmp_path / "saved", episodes=1, seed=3)
    np.testing.assert_allclose(a["returns"], b["returns"], rtol=1e-4)
    sampled = pgrad.evaluate(loaded, episodes=1, seed=3, deterministic=False)
    assert np.isfinite(sampled["return_mean"])
    agent.close()
    loaded.close()


def test_separate_critic_updates_train_only_the_critic_with_its_optimizer():
    env = factory(ACTION_SPACES["discrete"])
    cfg = small(agents.A2C, critic_updates=3, critic_minibatch_size=4, optimizer="sgd",
                learning_rate=1e-9)
    agent = agents.A2C(cfg, env_id=env, seed=0)
    critic = [v.numpy() for v in agent.net.value_only_variables]
    actor = [v.numpy() for v in agent.net.policy_variables]
    agent.step()
    # 3 passes x 2 minibatches of 4 steps: 6 critic optimizer steps; the policy barely moves.
    assert int(agent.critic_optimizer.iterations.numpy()) == 6
    assert all(not np.array_equal(b, v.numpy())
               for b, v in zip(critic, agent.net.value_only_variables))
    for b, v in zip(actor, agent.net.policy_variables):
        np.testing.assert_allclose(b, v.numpy(), atol=1e-6)
    with pytest.raises(ValueError, match="critic_updates needs a separate critic"):
        small(agents.A2C, critic_updates=2, shared_trunk=True).validate()
    agent.close()
