"""``credit="coma"`` for ``ippo``/``mappo``: COMA's critic beside the agent, its Q in the chain.

What :class:`CounterfactualCredit` adds to an agent on rows, once per rollout, before the
compiled update (:meth:`CounterfactualCredit.prepare`):

1. the rollout's GAE(lambda) returns ``R_t`` from the agent's own critic (the targets the
   update's value loss regresses on, computed the same way);
2. the centralised critic's inputs (:func:`pgrad.rl.multiagent.counterfactual.critic_inputs`:
   the row's state and observation -- the copy's joint observation on IPPO's rows --, the
   agent's one-hot and the other agents' actions), and ``epochs`` passes of ``num_minibatches``
   regression steps of ``Q(x_t, u_t)`` on ``R_t``;
3. ``Q(x_t, .)`` ``[T, B, k]``, the acting policy's probabilities ``[T, B, k]`` and the taken
   actions ``[T, B]`` into variables that its targets part (:class:`CounterfactualTargets`)
   hands to the update's batch, so the chain's context carries them per row
   (:mod:`pgrad.transforms.counterfactual` reads them: ``A = Q(s, u) - sum_u' pi(u') Q(s,
   u')``). The baseline uses the policy that acted, fixed over the update's epochs as PPO's
   advantages are.

It needs every agent to act at every step (a parallel game whose agents stay to the episode's
end: the other agents' actions at a step are then in the same rollout row), discrete actions,
and feed-forward policies (the rows' agents already require them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import tensorflow as tf

from agents.update.targets import GAETargets
from pgrad.rl.distributions import mask_logits
from pgrad.rl.multiagent.central import StateRowsVectorEnv
from pgrad.rl.multiagent.counterfactual import (
    CounterfactualCritic,
    critic_input_size,
    critic_inputs,
)
from pgrad.transforms.counterfactual import ACTIONS_KEY, PROBS_KEY, Q_KEY

__all__ = ["CounterfactualCredit", "CounterfactualTargets"]


class CounterfactualTargets:
    """GAE(lambda) targets, and the rollout's ``q_values``, ``action_probs`` and
    ``taken_actions`` (read from variables :class:`CounterfactualCredit` sets before each update)
    added to the update's batch: the chain's context."""

    on_policy = True

    def __init__(self, base: GAETargets, q: tf.Variable, probs: tf.Variable,
                 actions: tf.Variable):
        self.base, self.q, self.probs, self.actions = base, q, probs, actions

    def __call__(self, rewards: tf.Tensor, terminated: tf.Tensor, truncated: tf.Tensor,
                 values: tf.Tensor, next_values: tf.Tensor,
                 behaviour_log_probs: tf.Tensor | None = None,
                 learner_log_probs: Callable[[], tf.Tensor] | None = None
                 ) -> tuple[tf.Tensor, tf.Tensor, dict]:
        advantages, returns, extra = self.base(rewards, terminated, truncated, values,
                                               next_values)
        return advantages, returns, {**extra, Q_KEY: self.q.read_value(),
                                     PROBS_KEY: self.probs.read_value(),
                                     ACTIONS_KEY: self.actions.read_value()}


class CounterfactualCredit:
    """COMA's critic of an ``ippo``/``mappo`` agent (module docstring), built while the agent
    is (its rows, network and schedules exist; its update does not yet).

    The critic has the agent's hidden widths and activation, its learning rate's start value,
    ``max_grad_norm``, ``epochs`` and ``num_minibatches``.

    Raises:
      ValueError: actions that are not ``Discrete``.
    """

    def __init__(self, agent: Any):
        cfg = agent.cfg  # the update's: num_envs counts rows
        rows = agent.collector.envs.unwrapped
        space = rows.single_action_space
        if not isinstance(space, gym.spaces.Discrete):
            raise ValueError(f"{agent.name}: credit='coma' needs Discrete actions (one Q value "
                             f"per action); env {rows.name!r} acts in {space}.")
        self.n_agents, self.n_actions = int(rows.n_agents), int(space.n)
        #: IPPO's rows carry no state: the critic reads the copy's joint observation.
        self.joint = not isinstance(rows, StateRowsVectorEnv)
        row_dim = int(rows.single_observation_space.shape[0])
        self.critic = CounterfactualCritic(
            critic_input_size(row_dim, self.n_agents, self.n_actions, self.joint),
            self.n_actions, tuple(cfg.hidden), cfg.activation,
            float(agent.schedules.start("learning_rate")), float(cfg.max_grad_norm),
            seed=agent.seed + 9000)
        self.epochs, self.minibatches = int(cfg.epochs), int(cfg.num_minibatches)
        T, R, k = int(cfg.n_steps), int(rows.num_envs), self.n_actions
        self.q = tf.Variable(tf.zeros([T, R, k]), trainable=False, name="coma_q_values")
        self.probs = tf.Variable(tf.zeros([T, R, k]), trainable=False, name="coma_probs")
        self.actions = tf.Variable(tf.zeros([T, R], tf.int32), trainable=False,
                                   name="coma_actions")
        self.targets = CounterfactualTargets(GAETargets(cfg.gamma, cfg.gae_lambda), self.q,
                                             self.probs, self.actions)

    def prepare(self, agent: Any, traj: Any, updates: int) -> dict[str, float]:
        """Fits the critic on the rollout ``traj`` ``[T, n B]`` and sets the values its targets
        part hands to update ``updates + 1``. Returns ``{"coma_q_loss": mean squared error}``.

        Raises:
          ValueError: a row that did not act at some step (an agent left early, or waited for
            its turn), naming the step and the row.
        """
        if traj.mask is not None and not np.all(np.asarray(traj.mask) > 0):
            t, r = np.argwhere(np.asarray(traj.mask) <= 0)[0]
            raise ValueError(f"{agent.name}: credit='coma' needs every agent to act at every "
                             f"step; row {r} (agent {r % self.n_agents} of copy "
                             f"{r // self.n_agents}) did not at rollout step {t}.")
        obs = np.asarray(traj.observations, np.float32)  # [T, R, D]
        T, R = obs.shape[:2]
        flat = obs.reshape(T * R, -1)
        values = (np.asarray(traj.values) if traj.values is not None
                  else agent.net.value(flat).numpy().reshape(T, R))
        next_obs = np.asarray(traj.next_observations, np.float32).reshape(T * R, -1)
        next_values = agent.net.value(next_obs).numpy().reshape(T, R)
        _, returns = agent.targets(tf.constant(traj.rewards), tf.constant(traj.terminated),
                                   tf.constant(traj.truncated), tf.constant(values, tf.float32),
                                   tf.constant(next_values))  # [T, R] R^lambda
        actions = np.asarray(traj.actions).astype(np.int32)  # [T, R]
        inputs = critic_inputs(obs, actions, self.n_agents, self.n_actions, self.joint)
        inputs = inputs.reshape(T * R, -1)
        rng = np.random.default_rng([agent.seed, updates, 3])
        loss = self.critic.fit(inputs, actions.reshape(-1), returns.numpy().reshape(-1),
                               self.epochs, self.minibatches, rng)
        mask = None if traj.action_mask is None else tf.constant(
            np.asarray(traj.action_mask).reshape(T * R, -1))
        logits = mask_logits(agent.net.params(flat), mask)  # [T R, k]
        self.q.assign(tf.reshape(self.critic.q_values(inputs), [T, R, self.n_actions]))
        self.probs.assign(tf.reshape(tf.nn.softmax(logits), [T, R, self.n_actions]))
        self.actions.assign(actions)
        return {"coma_q_loss": loss}
