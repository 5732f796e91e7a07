"""Acting: the agent's policy as the rollout, ``predict`` and rollout workers use it.

Plain functions over what acting needs -- the acting copy of the network (the numpy mirror or
the compiled actor, :func:`pgrad.rl.policy.make_actor`), its action head, the observation layout
-- rather than over the agent. :class:`agents.base.ActorCriticAgent` keeps the public methods
(``acting_fn``, ``act``, ``predict``) as thin calls that hand over its *current* pieces: IMPALA
swaps ``agent.mirror`` for one ``acting_fn`` call and Ray replaces ``agent.collector``, so an
object holding its own references to them could act with stale ones.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from pgrad.rl import rollout
from pgrad.rl.distributions import ActionHead
from pgrad.rl.spaces import ObsLayout


class StateCarrier(Protocol):
    """What holds a recurrent policy's state between env steps and rollouts (the agent)."""

    rollout_state: np.ndarray  # [B, S] the actor's state before the next observation

    @property
    def collector(self) -> rollout.Collector: ...  # its episode_start [B]: rows to reset


def rollout_policy(mirror: Any, head: ActionHead, layout: ObsLayout, rng: np.random.Generator,
                   sde_sample_freq: int, carrier: StateCarrier | None = None
                   ) -> rollout.PolicyFn:
    """The rollout's ``policy_fn`` (see :class:`pgrad.rl.rollout.Collector`): samples from
    ``mirror`` with ``rng``; returns stored actions, env actions, log-probs.

    Args:
      mirror: the acting copy of the network (``forward``, ``sample``; recurrent: ``step``).
      head: its action head (``to_env``; ``uses_latent`` with gSDE).
      layout: the observation layout (rows of a batch).
      rng: the sampling generator.
      sde_sample_freq: gSDE draws new exploration matrices every this many steps (0: once).
      carrier: for a recurrent policy, what holds its state (the agent): each step reads and
        replaces ``carrier.rollout_state`` ``[B, S]``, resetting the rows where the collector's
        ``episode_start`` says an episode starts; None for a feed-forward policy.
    """
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

    # No critic here: the update computes V on the same weights, so storing it would only
    # add a forward pass per env step.
    def policy_fn(obs, action_mask=None):  # type: ignore[no-redef]  # [B, n] legal actions
        params, _ = mirror.forward(obs)
        actions, log_probs = mirror.sample(params, rng, sde_noise(obs), action_mask)
        return actions, head.to_env(actions), log_probs, None

    return policy_fn
