"""Normalisers with IMPALA's asynchronous actors, without Ray: two :class:`TrajectoryActor` s in
this process answer requests made with stale broadcasts, and the learner's statistics are those
of every observation (discounted return) of every trajectory it learned from, once each."""

from __future__ import annotations

from collections import deque

import gymnasium as gym
import numpy as np

import agents
from agents.learners.actor_learner import IMPALA, Batch
from pgrad.rl.observations.normalize import _RunningMeanStd
from pgrad_app.distributed.async_learner import TrajectoryActor, merge_statistics

L = 5  # episode length of the counting env
GAMMA = 0.9


class Counting(gym.Env):
    """Observation ``[t, t^2 / 10]`` at time ``t`` of a ``L``-step episode, reward ``t``,
    whatever the actions: what the actors count is known without running them."""

    observation_space = gym.spaces.Box(-100.0, 100.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def _obs(self):
        return np.array([self.t, self.t * self.t / 10], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), float(self.t), self.t == L, False, {}


class LocalSource:
    """:class:`AsyncSource`'s protocol over in-process actors: each actor has one request
    ahead, made with the weights and statistics broadcast when it was made (stale by one or
    more updates when it is answered); answered in order, round robin."""

    def __init__(self, learner, actors):
        self.learner, self.actors, self.queue = learner, actors, deque()

    def reset(self, version, state):
        self.broadcast(version, state)
        self.queue.extend((k, state, version) for k in range(len(self.actors)))

    def broadcast(self, version, state):
        self.state, self.version = state, version

    def next(self, updates):
        k, state, version = self.queue.popleft()
        r = self.actors[k].collect(state, version)
        self.queue.append((k, self.state, self.version))
        merge_statistics(self.learner, r["stats"])
        return Batch(r["traj"], r["episodes"], r["steps"], r["version"], k)

    def close(self):
        for actor in self.actors:
            actor.close()


def counted(vector_steps: int, num_envs: int) -> tuple[np.ndarray, np.ndarray]:
    """What one actor's collector counts in its first ``vector_steps`` steps: the observations
    the vector env returns (a finished episode's reset observation in place of its last one)
    ``[S * B, 2]`` (float32, as the env gives them) and the discounted returns ``[S * B]``
    (reset after an episode's end)."""
    obs, returns, g = [], [], 0.0
    for s in range(1, vector_steps + 1):
        t = s % L
        obs += [[t, t * t / 10]] * num_envs
        g = GAMMA * g + (s - 1) % L + 1
        returns += [g] * num_envs
        if s % L == 0:
            g = 0.0
    return np.array(obs, np.float32).astype(np.float64), np.array(returns, np.float64)


def test_learner_statistics_are_every_learned_trajectory_once():
    cfg = dict(num_envs=2, n_steps=3, gamma=GAMMA, normalize_obs=True, normalize_reward=True,
               clip_obs=1e6, clip_reward=1e6)
    learner = agents.make("impala", Counting, seed=0, **cfg)
    actors = [TrajectoryActor(IMPALA, learner.cfg, Counting, 0, k) for k in range(2)]
    learner.use_source(LocalSource(learner, actors))
    seen = []
    for _ in range(7):  # actor 0 answers 4 requests, actor 1 answers 3
        info = learner.step()
        seen.append(info["metrics"]["policy_lag"])
    assert seen[2:] == [2.0] * 5  # requests answered two updates after they were made
    obs_ref, ret_ref = _RunningMeanStd((2,)), _RunningMeanStd(())
    for vector_steps in (4 * 3, 3 * 3):
        obs, returns = counted(vector_steps, 2)
        obs_ref.update(obs)
        ret_ref.update(returns)
    for norm, ref in ((learner.obs_norm, obs_ref), (learner.reward_norm, ret_ref)):
        assert norm.rms.count == ref.count == 1e-4 + 7 * 3 * 2
        np.testing.assert_allclose(norm.rms.mean, ref.mean, rtol=1e-12)
        np.testing.assert_allclose(norm.rms.var, ref.var, rtol=1e-12)
        # the update stored them: what a checkpoint and the exported policy hold
        np.testing.assert_allclose(norm.mean.numpy(), ref.mean, rtol=1e-12)
        np.testing.assert_allclose(norm.var.numpy(), ref.var, rtol=1e-12)
    # An actor normalises with the statistics broadcast with its request: actor 0's 4th
    # trajectory was asked for after update 5, its first observation is t = 10 % 5 = 0.
    state = learner.acting_state()
    mean, var, _ = state["obs_norm"]
    out = actors[0].collect(state, 7)
    first = out["traj"].observations[0, 0]
    np.testing.assert_allclose(first, (np.array([2, 0.4]) - mean) / np.sqrt(var + 1e-8),
                               rtol=1e-5)  # t = 12 % 5 = 2 after 12 steps
    learner.close()
