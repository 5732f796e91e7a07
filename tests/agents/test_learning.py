"""The agents learn: A2C solves CartPole (slow), continuous control and REINFORCE improve."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import agents
import pgrad  # noqa: F401


def train(agent, max_steps: int, target: float | None = None) -> list[float]:
    """Trains until ``max_steps`` env steps or a last-20 mean >= target; returns episode returns."""
    returns: list[float] = []
    while agent.env_steps < max_steps:
        returns += [r for _, r, _ in agent.step()["episodes"]]
        if target is not None and len(returns) >= 20 and np.mean(returns[-20:]) >= target:
            break
    return returns


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a2c_solves_cartpole():
    agent = agents.A2C(agents.A2C.Config(), env_id="CartPole-v1", seed=0)
    returns = train(agent, 150_000, target=475.0)
    assert np.mean(returns[-20:]) >= 475.0, (agent.env_steps, np.mean(returns[-20:]))
    agent.close()


class TrackEnv(gym.Env):
    """Continuous toy task: observe x ~ U(-1, 1), act a in [-2, 2], reward -(a - x)^2; 5 steps."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
        self.action_space = gym.spaces.Box(-2, 2, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.x = 0, self.np_random.uniform(-1, 1, (1,)).astype(np.float32)
        return self.x, {}

    def step(self, action):
        reward = -float(np.square(np.asarray(action) - self.x).sum())
        self.t += 1
        self.x = self.np_random.uniform(-1, 1, (1,)).astype(np.float32)
        return self.x, reward, self.t >= 5, False, {}


def evaluate(agent, seeds=range(10)) -> float:
    env = TrackEnv()
    total = 0.0
    for s in seeds:
        obs, _ = env.reset(seed=s)
        done = False
        while not done:
            obs, r, done, _, _ = env.step(agent.act(obs[None], deterministic=True)[0])
            total += r
    return total / len(seeds)


@pytest.mark.slow
def test_continuous_actions_learn_on_a_tiny_budget():
    cfg = agents.A2C.Config(num_envs=4, n_steps=5, hidden=(16,), learning_rate=3e-3,
                            optimizer="adam", optimizer_eps=1e-7, log_std_init=-0.5)
    agent = agents.A2C(cfg, env_id=TrackEnv, seed=0)
    before = evaluate(agent)
    train(agent, 6_000)
    after = evaluate(agent)
    agent.close()
    # Untrained: about -5 * E[x^2] = -1.7 per episode; a learned a ~= x scores near 0.
    assert after > 0.3 * before, (before, after)


@pytest.mark.slow
def test_reinforce_learns_a_little():
    agent = agents.Reinforce(agents.Reinforce.Config(batch_steps=1000), env_id="CartPole-v1",
                             seed=0)
    returns = train(agent, 30_000)
    agent.close()
    assert np.mean(returns[-20:]) > 2.5 * np.mean(returns[:20]), (returns[:20], returns[-20:])
