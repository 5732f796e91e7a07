"""The agent's acting methods: ``act``, ``predict``, ``policy``, ``acting_fn``, ``acting_state``.

:class:`ActingMethods` is the acting half of :class:`agents.base.ActorCriticAgent`'s interface;
the agent inherits it (it holds no state of its own and has no ``__init__``: nothing is passed
through it). Its methods are thin calls that hand the functions of :mod:`agents.acting.policy` the
agent's *current* mirror, head and layout, and the numpy copies they read (the mirror's weights,
the normalisers' statistics, the seed, a recurrent policy's state, the env-step counter), which
:meth:`ActingMethods._sync` refreshes from the agent's variables when they changed outside
``step`` (a restore).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import tensorflow as tf

from agents.acting import policy as acting
from agents.config import ActorCriticConfig
from pgrad.rl.acting.policy import NetworkPolicy
from pgrad.rl.collection import masks, rollout
from pgrad.rl.distributions import ActionHead
from pgrad.rl.models.networks import ActorCritic
from pgrad.rl.observations.normalize import ObsNormalizer, RewardNormalizer
from pgrad.rl.observations.spaces import MASK_KEY, ObsLayout


class ActingMethods:
    """How an agent acts: on raw observations (:meth:`act`, :meth:`predict`), as a
    :class:`pgrad.rl.acting.policy.Policy` (:attr:`policy`), in its rollouts (:meth:`acting_fn`) and
    in a copy elsewhere (:meth:`acting_state`). See :mod:`agents.acting.methods`."""

    # What the methods read of the agent (its constructor sets them: agents.base).
    cfg: ActorCriticConfig
    net: ActorCritic
    mirror: Any  # the numpy mirror or the compiled actor (pgrad.rl.acting.policy.make_actor)
    head: ActionHead
    layout: ObsLayout
    observation_space: gym.Space
    action_space: gym.Space
    obs_norm: ObsNormalizer | None
    reward_norm: RewardNormalizer | None
    collector: rollout.Collector
    seed: int
    rollout_state: np.ndarray  # [B, S] a recurrent policy's state before the next observation
    env_steps_var: tf.Variable
    updates_var: tf.Variable
    seed_var: tf.Variable
    state_var: tf.Variable
    _act_rng: np.random.Generator
    _synced_updates: int
    _env_steps: int

    @property
    def env_steps(self) -> int:
        """Total env steps (the checkpointed counter)."""
        if self._synced_updates < 0:  # possibly restored since the last step: read the variable
            return int(self.env_steps_var.numpy())
        return self._env_steps

    @property
    def num_timesteps(self) -> int:
        """Stable-Baselines3's name for :attr:`env_steps` (read-only)."""
        return self.env_steps

    def _sync(self, trust: bool = False) -> int:
        """Refreshes the numpy copies if the variables changed outside ``step`` (a restore).

        Returns the update count. ``step`` keeps the copies current itself (the update returns
        the new weights), so the usual cost is one variable read. With ``trust`` the caller
        knows no update ran since the last one this agent finished (a population, which runs
        them): the count is the one kept here, unless :meth:`trackables` was called since (a
        checkpoint restore may have followed), and nothing is read.
        """
        if trust and self._synced_updates >= 0:
            return self._synced_updates
        # The bare read op: ``Variable.numpy()`` adds a name scope, a tape check and an identity
        # (~20 us against ~6 us here, on every step).
        updates = int(tf.raw_ops.ReadVariableOp(resource=self.updates_var.handle, dtype=tf.int64))
        if updates != self._synced_updates:
            self.mirror.sync()
            for norm in (self.obs_norm, self.reward_norm):
                if norm is not None:
                    norm.pull()
            self.seed = int(self.seed_var.numpy())
            if self.net.recurrent:
                self.rollout_state = self.state_var.numpy()
            self._env_steps = int(self.env_steps_var.numpy())
            self._synced_updates = updates
        return updates

    def act(self, obs_batch: Any, deterministic: bool = False,
            action_masks: Any = None) -> np.ndarray:
        """Env-ready actions ``[N, ...]`` for a batch of raw observations (as vector envs give),
        for a feed-forward policy (a recurrent one acts with its state: :meth:`predict`).

        ``action_masks``: ``[N, n]`` legal actions (sb3-contrib's argument); by default the
        observations' ``action_mask`` key if they have one (:mod:`pgrad.rl.collection.masks`).
        """
        if self.net.recurrent:
            raise ValueError("a recurrent policy acts with its state: use "
                             "agent.predict(obs, state, episode_start) -> (action, state)")
        return self._act(obs_batch, deterministic, action_masks, None, None)[0]

    def _act(self, obs_batch, deterministic, action_masks, state, episode_start):
        """``(actions [N, ...], next state [N, S] or None)`` for a batch of raw observations
        (:func:`agents.acting.policy.act` on the current weights)."""
        if action_masks is None and isinstance(obs_batch, Mapping) and MASK_KEY in obs_batch:
            # the observations' own mask: its values checked as the env's are (never cast)
            _, why = masks.bool_values(obs_batch[MASK_KEY])
            if why:
                raise ValueError(f"predict/act: the observation's action_mask {why}.")
        self._sync()
        return acting.act(self.mirror, self.head, self.layout, self.action_space, self.obs_norm,
                          self._act_rng, obs_batch, deterministic, action_masks, state,
                          episode_start, recurrent=self.net.recurrent)

    def predict(self, obs: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = True, action_masks: Any = None
                ) -> tuple[np.ndarray, np.ndarray | None]:
        """``(action, state)`` for one raw observation or a batch, in Stable-Baselines3's shape.

        Deterministic (the mode) by default, as Stable-Baselines3's ``predict`` for evaluation.
        ``state``: a recurrent policy's state from the previous call (``[S]`` for one
        observation, ``[N, S]`` for a batch; None: zeros, an episode's start); ``episode_start``
        (bool, ``[N]`` for a batch): reset the state first, as at a new episode. The returned
        state goes into the next call; a feed-forward policy returns None and ignores both.
        ``action_masks``: the legal actions, ``[n]`` (or ``[N, n]`` for a batch), as
        sb3-contrib's ``MaskablePPO.predict``; a Dict observation's ``action_mask`` key is used
        without it. Bad input is a one-line ValueError (:func:`agents.acting.policy.predict`).
        """
        check_not_env_output(obs, self.observation_space)
        return acting.predict(self._act, self.observation_space, obs, state, episode_start,
                              deterministic, action_masks)

    @property
    def policy(self) -> NetworkPolicy:
        """The current policy as a :class:`pgrad.rl.acting.policy.Policy` (for
        ``pgrad.evaluate``)."""
        self._sync()
        return NetworkPolicy(self.net, self.mirror, self.obs_norm, self.observation_space,
                             self.action_space)

    def acting_fn(self, rng: np.random.Generator, values: bool = False) -> rollout.PolicyFn:
        """The rollout's ``policy_fn`` (see :class:`pgrad.rl.collection.rollout.Collector`): samples
        from the numpy mirror with ``rng``; returns stored actions, env actions, log-probs
        (:func:`agents.acting.policy.rollout_policy`; a recurrent policy carries ``rollout_state``),
        and with ``values`` (only where :attr:`values_from_acting`) ``V(o_t)`` from the same
        call."""
        return acting.rollout_policy(self.mirror, self.head, self.layout, rng,
                                     self.cfg.sde_sample_freq,
                                     self if self.net.recurrent else None, values)

    def acting_state(self) -> dict[str, Any]:
        """What a copy of this agent elsewhere (a rollout worker) needs to act exactly as the
        next :meth:`step` will, in numpy: ``weights`` ``[P]`` (the mirror's, for
        ``NumpyPolicy.load_flat``), ``sampler_key`` (the seed of that step's sampling
        generator) and ``obs_norm`` / ``reward_norm``: ``(mean, var, count)`` or None; a
        recurrent policy's ``rollout_state`` ``[B, S]`` (the state before the next observation).

        A collector that runs elsewhere replaces ``agent.collector`` (same interface as
        :class:`pgrad.rl.collection.rollout.Collector`, ``episode_start`` included) and reads this
        at each collect; it leaves the merged normaliser statistics in ``obs_norm.rms`` /
        ``reward_norm.rms``, which the update then stores, and a recurrent policy's state after
        the rollout in ``rollout_state``.
        """
        updates = self._sync()
        return acting.acting_state(self.mirror, self.obs_norm, self.reward_norm,
                                   [self.seed, updates],
                                   self.rollout_state if self.net.recurrent else None)


def check_not_env_output(obs: Any, space: gym.Space) -> None:
    """Refuses what ``env.reset()`` / ``env.step()`` return whole (a tuple ending in the info
    dict) given as an observation, in one line. A Tuple space's observation of as many parts is
    left to the space's own checks."""
    if not isinstance(obs, tuple) or len(obs) not in (2, 5) or not isinstance(obs[-1], dict):
        return
    if isinstance(space, gym.spaces.Tuple) and len(space) == len(obs):
        return  # a Tuple observation of that many parts: leave it to the space's checks
    if len(obs) == 2:
        raise ValueError("predict got the (obs, info) pair env.reset() returns; pass the "
                         "observation: obs, info = env.reset(); agent.predict(obs).")
    raise ValueError("predict got the (obs, reward, terminated, truncated, info) env.step() "
                     "returns; pass the observation: obs, *_ = env.step(action).")
