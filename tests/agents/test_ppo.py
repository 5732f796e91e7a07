"""PPO is the actor-critic agent with options and a chain: it reduces to A2C, and it learns."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from test_agents import ACTION_SPACES, factory
from test_learning import train

import agents
import pgrad

SHARED = dict(num_envs=2, n_steps=8, hidden=(8,), optimizer="adam", optimizer_eps=1e-7,
              learning_rate=3e-3, gamma=0.97, gae_lambda=0.9, vf_coef=0.5, ent_coef=0.01,
              max_grad_norm=0.5, normalize_advantage=False)


@pytest.mark.parametrize("space", ["discrete", "box"])
def test_one_epoch_one_minibatch_infinite_clip_is_the_a2c_update(space):
    """PPO with 1 epoch over the whole batch and an infinite clip range: ratio 1, never clipped,
    so its update is A2C's to round-off (same seed, same rollouts, same optimizer)."""
    env = factory(ACTION_SPACES[space])
    a2c = agents.make("a2c", env, seed=4, **SHARED)
    ppo = agents.make("ppo", env, seed=4, epochs=1, minibatch_size=0, **SHARED,
                      transform=pgrad.chain(pgrad.clip_ratio(float("inf")), pgrad.mean_steps()))
    for _ in range(3):  # later updates start from the (equal) weights the earlier ones made
        info_a, info_p = a2c.step(), ppo.step()
        # Same episodes; continuous actions carry the weights' round-off into the returns.
        np.testing.assert_allclose(np.array(info_p["episodes"]), np.array(info_a["episodes"]),
                                   rtol=1e-6)
        for va, vp in zip(a2c.net.variables, ppo.net.variables):
            np.testing.assert_allclose(vp.numpy(), va.numpy(), atol=2e-6)
        assert info_p["metrics"]["clip_fraction"] == 0.0
        assert info_p["metrics"]["approx_kl"] == pytest.approx(0.0, abs=1e-6)
    a2c.close()
    ppo.close()


def test_more_epochs_move_the_ratio_and_clip():
    """With several epochs the policy leaves the behaviour policy: some ratios get clipped."""
    env = factory(ACTION_SPACES["discrete"])
    ppo = agents.make("ppo", env, seed=0, epochs=8, minibatch_size=4, clip_range=0.05,
                      **{**SHARED, "learning_rate": 3e-2})
    metrics = ppo.step()["metrics"]
    assert metrics["minibatch_updates"] == 8 * 4
    assert metrics["clip_fraction"] > 0.0 and metrics["approx_kl"] > 0.0
    ppo.close()


@pytest.mark.parametrize("target_kl", [0.0, 0.005])
def test_epochs_in_one_graph_equal_a_python_loop_over_minibatches(target_kl):
    """Every epoch's shuffled minibatch steps run in one compiled ``tf.while_loop``. The same
    update run eagerly with a Python loop instead (the shuffles built here from the documented
    seeds, ``(seed * 7919 + epoch, update)``, one ``_minibatch`` call per minibatch, stopping
    after the step whose KL passes ``1.5 * target_kl``) ends with the same weights, optimizer
    state, counters and metrics."""
    env = factory(ACTION_SPACES["discrete"])
    kw = {**SHARED, "learning_rate": 3e-2, "epochs": 3, "minibatch_size": 4,
          "target_kl": target_kl}
    fast, ref = (agents.make("ppo", env, seed=5, **kw) for _ in range(2))
    fast.step()  # a second update: its seeds and optimizer state differ from the first's
    ref.step()
    traj, _ = fast.collector.collect(fast.acting_fn(np.random.default_rng(0)), 8)
    args = fast.updater.inputs(traj, traj.rewards.size)
    out_fast = fast.updater(args, fixed_shape=True)[0].numpy()

    up = ref.updater
    steps = []

    def python_epochs(data, scalars):
        n, size = int(data["advantages"].shape[0]), 4
        seed, update = int(up.seed_var.numpy()) * 7919, int(up.updates_var.numpy())
        sums, count = {}, 0.0
        for epoch in range(3):
            order = tf.argsort(tf.random.stateless_uniform([n], [seed + epoch, update])).numpy()
            for start in range(0, n - size + 1, size):
                batch = {k: tf.gather(v, order[start:start + size]) for k, v in data.items()}
                metrics, stop = up._minibatch(batch, scalars)
                sums = {k: sums.get(k, 0.0) + v for k, v in metrics.items()}
                count += 1.0
                steps.append(order[start:start + size])
                if bool(stop):  # counted, not applied (as in the graph)
                    return sums, tf.constant(count)
        return sums, tf.constant(count)

    up._epochs = python_epochs
    out_ref = up._update(*args)[0].numpy()  # eager: every op dispatched from Python
    k = len(up.metric_keys)
    got = dict(zip(fast.updater.metric_keys, out_fast[:k]))
    want = dict(zip(up.metric_keys, out_ref[:k]))
    assert set(got) == set(want)
    assert got["minibatch_updates"] == want["minibatch_updates"] == len(steps)
    if target_kl:  # the early stop is exercised, after the first minibatch
        assert 1 < len(steps) < 12, len(steps)
    else:
        assert len(steps) == 12
    for key in got:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6, err_msg=key)
    np.testing.assert_allclose(out_fast[k:], out_ref[k:], rtol=1e-5, atol=1e-6)
    for a, b in zip(fast.net.variables + fast.optimizer.variables,
                    ref.net.variables + ref.optimizer.variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6, err_msg=a.name)
    assert int(fast.updates_var.numpy()) == int(ref.updates_var.numpy()) == 2
    fast.close()
    ref.close()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ppo_solves_cartpole():
    """rl-zoo's tuned PPO CartPole settings: last-20 training mean >= 475 within 100k steps."""
    from pgrad_app.config import tuned as hyperparams

    tuned, _ = hyperparams.tuned("ppo", "CartPole-v1")
    agent = agents.make("ppo", "CartPole-v1", seed=0, **tuned)
    returns = train(agent, 100_000, target=475.0)
    assert np.mean(returns[-20:]) >= 475.0, (agent.env_steps, np.mean(returns[-20:]))
    agent.close()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ppo_pendulum_improves_on_a_small_budget():
    """Continuous control: tuned PPO on Pendulum-v1 for 40k steps beats the untrained policy's
    deterministic return by a wide margin (untrained: about -1200 to -1500)."""
    from pgrad_app.config import tuned as hyperparams

    tuned, _ = hyperparams.tuned("ppo", "Pendulum-v1")
    agent = agents.make("ppo", "Pendulum-v1", seed=0, **tuned)
    before = pgrad.evaluate(agent, episodes=5, seed=100)["return_mean"]
    train(agent, 40_000)
    after = pgrad.evaluate(agent, episodes=5, seed=100)["return_mean"]
    agent.close()
    assert after > before + 300 and after > -900, (before, after)
