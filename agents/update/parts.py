"""What the compiled update is handed: its parts, never the agent.

:class:`UpdateParts` holds everything :class:`agents.update.compiled.CompiledUpdate`,
:class:`agents.update.inputs.UpdateInputs` and :class:`agents.update.minibatch.MinibatchStep`
read -- the networks, the optimizers, the chain and its state, the counters, the normalisers, the
schedules and the config -- and the one part in which algorithms differ before the policy step:
the **targets** (:mod:`agents.update.targets`: GAE(lambda) for the on-policy agents, V-trace for
IMPALA/APPO). The agent builds its parts once (:meth:`agents.base.ActorCriticAgent.update_parts`);
an algorithm that needs another rule passes another part, so the update knows no algorithm by
name (as Acme's learner is given its networks, optimizer and loss, and optax's update its
transforms).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import tensorflow as tf


@dataclass(frozen=True)
class Counters:
    """The variables an update advances or carries (checkpointed with the agent).

    Attributes:
      env_steps: int64 env steps trained on.
      updates: int64 updates made.
      seed: int64 the run's seed (shuffles are a function of seed and update count).
      rollout_state: ``[B, Sa]`` a recurrent actor's state after the last rollout.
      critic_state: ``[B, Sc]`` a recurrent critic's state after the last rollout.
    """

    env_steps: tf.Variable
    updates: tf.Variable
    seed: tf.Variable
    rollout_state: tf.Variable
    critic_state: tf.Variable


@dataclass(frozen=True)
class UpdateParts:
    """The parts of one agent's update.

    Attributes:
      cfg: the agent's config (the update reads its hyperparameters, never writes them).
      net: the actor-critic networks (:class:`pgrad.rl.models.networks.ActorCritic`).
      mirror: the acting copy whose new weights each update returns (``update_output``).
      layout: the observation layout (how rollouts are packed).
      optimizer: the Keras optimizer of the policy (and of a critic that shares it).
      critic_optimizer: the critic's own optimizer (NPG/TRPO), or None.
      transform: the policy-gradient chain; transform_state: its state variables.
      counters: :class:`Counters`.
      normalizers: the observation and reward normalisers in use (their statistics ride in).
      schedules: :class:`agents.schedules.Schedules` (the names each call receives).
      budget: ``() -> int | None``, the env-step count the current run trains to (the
        schedules' horizon; read when an update's inputs are built without values).
      targets: ``targets(rewards, terminated, truncated, values, next_values,
        behaviour_log_probs, learner_log_probs) -> (advantages, returns, extra)``
        (:mod:`agents.update.targets`).
      values_from_acting: the rollouts carry ``V(o_t)`` from the acting call and the update uses
        them instead of its own value pass.
      policy_step: a part called after each applied policy step, or None (TRPO's line search:
        :class:`agents.update.line_search.BacktrackingLineSearch`).
    """

    cfg: Any
    net: Any
    mirror: Any
    layout: Any
    optimizer: Any
    critic_optimizer: Any
    transform: Any
    transform_state: Any
    counters: Counters
    normalizers: Sequence[Any]
    schedules: Any
    budget: Callable[[], int | None]
    targets: Any
    values_from_acting: bool
    policy_step: Any = None
