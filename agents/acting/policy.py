"""Acting: the agent's policy as the rollout, ``predict`` and rollout workers use it.

Plain functions over what acting needs -- the acting copy of the network (the numpy mirror or
the compiled actor, :func:`pgrad.rl.acting.policy.make_actor`), its action head, the observation
layout -- rather than over the agent. The agent's public methods (``acting_fn``, ``act``,
``predict``: :class:`agents.acting.methods.ActingMethods`) are thin calls that hand over its
*current* pieces: IMPALA swaps ``agent.mirror`` for one ``acting_fn`` call and Ray replaces
``agent.collector``, so an object holding its own references to them could act with stale ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from pgrad.rl.collection import masks, rollout
from pgrad.rl.distributions import ActionHead
from pgrad.rl.observations import spaces
from pgrad.rl.observations.normalize import ObsNormalizer, RewardNormalizer
from pgrad.rl.observations.spaces import ObsLayout


class StateCarrier(Protocol):
    """What holds a recurrent policy's state between env steps and rollouts (the agent)."""

    rollout_state: np.ndarray  # [B, S] the actor's state before the next observation

    @property
    def collector(self) -> rollout.Collector: ...  # its episode_start [B]: rows to reset


def rollout_policy(mirror: Any, head: ActionHead, layout: ObsLayout, rng: np.random.Generator,
                   sde_sample_freq: int, carrier: StateCarrier | None = None,
                   values: bool = False) -> rollout.PolicyFn:
    """The rollout's ``policy_fn`` (see :class:`pgrad.rl.collection.rollout.Collector`): samples
    from ``mirror`` with ``rng``; returns stored actions, env actions, log-probs and, with
    ``values``, ``V(o_t)`` ``[B]`` from the same call (else None).

    Args:
      mirror: the acting copy of the network (``forward``, ``sample``; recurrent: ``step``).
      head: its action head (``to_env``; ``uses_latent`` with gSDE).
      layout: the observation layout (rows of a batch).
      rng: the sampling generator.
      sde_sample_freq: gSDE draws new exploration matrices every this many steps (0: once).
      carrier: for a recurrent policy, what holds its state (the agent): each step reads and
        replaces ``carrier.rollout_state`` ``[B, S]``, resetting the rows where the collector's
        ``episode_start`` says an episode starts; None for a feed-forward policy.
      values: return the critic's ``V(o_t)`` from the acting call, for a mirror whose
        ``fused_values`` says one call gives both (:class:`pgrad.rl.acting.compiled_actor.
        CompiledActor` with a shared encoder); a ValueError otherwise.
    """
    if values and (carrier is not None or not getattr(mirror, "fused_values", False)):
        raise ValueError("values from the acting call need a feed-forward policy whose critic "
                         "shares the actor's encoder (CompiledActor.fused_values)")
    sde: dict[str, Any] = {"noise": None, "steps": 0}
    freq = int(sde_sample_freq)

    def sde_noise(obs) -> np.ndarray | None:
        """gSDE: ``[B, latent, A]`` exploration matrices held per env, drawn at the
        rollout's start and every ``sde_sample_freq`` steps (as SB3); None without gSDE."""
        if head.uses_latent:
            if sde["noise"] is None or (freq > 0 and sde["steps"] % freq == 0):
                sde["noise"] = mirror.sde_noise(len(layout.split(obs)[0]), rng)
            sde["steps"] += 1
        return sde["noise"]

    if carrier is not None:  # the state carried across steps and rollouts, reset at starts
        collector = carrier.collector

        def policy_fn(obs, action_mask=None):
            params, carrier.rollout_state = mirror.step(obs, carrier.rollout_state,
                                                        collector.episode_start)
            actions, log_probs = mirror.sample(params, rng, sde_noise(obs), action_mask)
            return actions, head.to_env(actions), log_probs, None

        return policy_fn

    # The numpy mirror (and a critic with its own encoder) returns no values: the update
    # computes V on the same weights, where storing it would add a critic pass per env step.
    # A shared encoder gives V(o_t) in the acting call itself (values=True).
    def policy_fn(obs, action_mask=None):  # type: ignore[no-redef]  # [B, n] legal actions
        params, value = mirror.forward(obs, with_value=values)
        actions, log_probs = mirror.sample(params, rng, sde_noise(obs), action_mask)
        return actions, head.to_env(actions), log_probs, value

    return policy_fn


def act(mirror: Any, head: ActionHead, layout: ObsLayout, action_space: gym.Space,
        obs_norm: ObsNormalizer | None, rng: np.random.Generator, obs_batch: Any,
        deterministic: bool, action_masks: Any = None, state: Any = None,
        episode_start: Any = None, recurrent: bool = False
        ) -> tuple[np.ndarray, np.ndarray | None]:
    """``(actions [N, ...], next state [N, S] or None)`` for a batch of raw observations.

    ``mirror``, ``head``, ``layout``: as :func:`rollout_policy`; ``obs_norm``: the observation
    normaliser (applied, not updated) or None; ``rng``: samples when not ``deterministic``.
    ``action_masks`` ``[N, n]`` (default: the observations' ``action_mask`` key, if any);
    ``state`` ``[N, S]`` (None: zeros) and ``episode_start`` ``[N]`` for a ``recurrent`` policy.
    """
    obs = layout.preprocess(obs_batch)
    where = "predict/act(action_masks=...)"
    if action_masks is None:  # the observation's own mask, checked as a passed one
        action_masks, where = layout.action_mask(obs_batch), "the observation's 'action_mask'"
    rows = len(layout.split(obs)[0])
    legal = masks.given_mask(action_masks, action_space, rows, where)
    if obs_norm is not None:
        obs = layout.with_vector(obs, obs_norm(layout.vector(obs)))
    if recurrent:
        size = mirror.state_size
        state = (np.zeros((rows, size), np.float32) if state is None
                 else np.asarray(state, np.float32).reshape(rows, size))
        start = (None if episode_start is None
                 else np.asarray(episode_start, bool).reshape(rows))
        params, state = mirror.step(obs, state, start)
    else:
        params, _ = mirror.forward(obs)
        state = None
    actions = (mirror.mode(params, legal) if deterministic
               else mirror.sample(params, rng, action_mask=legal)[0])
    return head.to_env(actions), state


def predict(act_batch: Callable[..., tuple[np.ndarray, np.ndarray | None]],
            observation_space: gym.Space, obs: Any, state: Any = None,
            episode_start: Any = None, deterministic: bool = True, action_masks: Any = None
            ) -> tuple[np.ndarray, np.ndarray | None]:
    """``(action, state)`` for one raw observation or a batch, in Stable-Baselines3's shape
    (the arguments as ``ActorCriticAgent.predict``), through ``act_batch(obs_batch,
    deterministic, action_masks, state, episode_start)`` (:func:`act` on the agent's pieces).

    Bad input -- an observation not in ``observation_space``, NaN/Inf, a discrete value outside
    the space, masks of the wrong shape -- is a one-line ValueError starting ``predict:``.
    """
    try:  # one line naming what is wrong, before any of it is acted on
        single = not spaces.is_batch(obs, observation_space)
        spaces.check_finite(obs, "predict: the observation")
    except (ValueError, TypeError, KeyError, IndexError) as err:
        text = str(err)
        raise ValueError(text if text.startswith("predict:") else f"predict: {text}") from None
    if single and action_masks is not None:
        action_masks = np.asarray(action_masks)[None]
    try:
        actions, state = act_batch(spaces.batch_of_one(obs) if single else obs,
                                   deterministic, action_masks, state, episode_start)
    except ValueError as err:  # e.g. a discrete value outside the space
        text = str(err)
        raise ValueError(text if text.startswith("predict") else f"predict: {text}") from None
    if single:
        return actions[0], None if state is None else state[0]
    return actions, state


def acting_state(mirror: Any, obs_norm: ObsNormalizer | None,
                 reward_norm: RewardNormalizer | None, sampler_key: list[int],
                 rollout_state: np.ndarray | None = None) -> dict[str, Any]:
    """What a copy of the policy elsewhere needs to act as ``mirror`` does, in numpy (the
    fields as ``ActorCriticAgent.acting_state``): ``weights`` ``[P]``, ``sampler_key``, the
    normalisers' ``(mean, var, count)`` or None, and a recurrent policy's ``rollout_state``
    ``[B, S]`` (left out when None: a feed-forward policy)."""
    stats = {}
    for key, norm in (("obs_norm", obs_norm), ("reward_norm", reward_norm)):
        stats[key] = None if norm is None else (norm.rms.mean, norm.rms.var, norm.rms.count)
    # a recurrent policy's state [B, S] before the next observation (each worker its rows)
    carried = {"rollout_state": rollout_state} if rollout_state is not None else {}
    return {"weights": mirror.flat_numpy(), "sampler_key": sampler_key, **stats, **carried}
