"""What the agent's helpers use of an agent: the :class:`Agent` protocol.

The training loop (:mod:`agents.learning`), its TensorBoard logger, persistence and the acting
opt-in extras each take an agent. They are typed against this protocol rather than against
:class:`agents.base.ActorCriticAgent`, which imports them: so agents/ has no import cycle.
``ActorCriticAgent`` (and every agent built on it) satisfies it; mypy checks that where
``base.py`` hands itself to those helpers.
"""

from __future__ import annotations

from typing import Any, Protocol

from agents.config import ActorCriticConfig
from agents.learn_stats import LearnStats
from agents.schedules import Schedules
from pgrad.rl.collection import rollout
from pgrad.rl.distributions import ActionHead
from pgrad.rl.models.networks import ActorCritic
from pgrad.rl.observations.normalize import ObsNormalizer


class Agent(Protocol):
    """An actor-critic agent as its loop, logger, persistence and opt-in extras see it."""

    name: str  # the registry name ("a2c", "ppo", ...; a class attribute)
    Config: type  # the agent's config dataclass (a class attribute)
    budget: int | None  # env steps of the current learn() (the schedules' horizon)

    @property
    def cfg(self) -> ActorCriticConfig: ...
    @property
    def env_id(self) -> Any: ...  # what the env is built from again (an id, a factory, ...)
    @property
    def env_unbuildable(self) -> str | None: ...  # why the env cannot be built again, if so
    @property
    def seed(self) -> int: ...
    @property
    def net(self) -> ActorCritic: ...
    @property
    def head(self) -> ActionHead: ...
    @property
    def obs_norm(self) -> ObsNormalizer | None: ...
    @property
    def collector(self) -> rollout.Collector: ...
    @property
    def schedules(self) -> Schedules: ...
    @property
    def transform(self) -> Any: ...  # the GradientTransform chain
    @property
    def custom_transform(self) -> bool: ...  # the user's chain, not the config's default
    @property
    def updates_var(self) -> Any: ...  # tf.Variable int64 []
    @property
    def seed_var(self) -> Any: ...  # tf.Variable int64 []
    @property
    def env_steps(self) -> int: ...
    @property
    def learn_stats(self) -> LearnStats: ...

    def step(self) -> dict[str, Any]: ...
    def trackables(self) -> dict[str, Any]: ...
    def export_policy(self, path: str) -> None: ...
    def close(self) -> None: ...
