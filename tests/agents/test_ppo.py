"""PPO is the actor-critic agent with options and a chain: it reduces to A2C, and it learns."""

from __future__ import annotations

import numpy as np
import pytest
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


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ppo_solves_cartpole():
    """rl-zoo's tuned PPO CartPole settings: last-20 training mean >= 475 within 100k steps."""
    from pgrad_app import hyperparams

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
    from pgrad_app import hyperparams

    tuned, _ = hyperparams.tuned("ppo", "Pendulum-v1")
    agent = agents.make("ppo", "Pendulum-v1", seed=0, **tuned)
    before = pgrad.evaluate(agent, episodes=5, seed=100)["return_mean"]
    train(agent, 40_000)
    after = pgrad.evaluate(agent, episodes=5, seed=100)["return_mean"]
    agent.close()
    assert after > before + 300 and after > -900, (before, after)
