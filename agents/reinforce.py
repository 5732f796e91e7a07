"""REINFORCE: Monte-Carlo policy gradient over whole episodes, optional learned baseline.

A preset of the actor-critic agent: whole-episode rollouts (at least ``batch_steps`` steps,
see :meth:`pgrad.rl.rollout.Collector.collect_episodes`), reward-to-go returns (GAE with
``lambda = 1``; a time-limit truncation bootstraps from the baseline's value of the final
observation when there is a baseline, else counts as the end), and the chain
``chain(weight_by(key, standardize=standardize), mean_steps())`` with ``key = "advantages"``
(``G_t - V(o_t)``) when ``baseline`` is on and ``"returns"`` otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pgrad
from agents.base import ActorCriticAgent
from agents.config import ActorCriticConfig, help_text


@dataclass
class ReinforceConfig(ActorCriticConfig):
    """REINFORCE hyperparameters (every field of the actor-critic agent; REINFORCE's defaults)."""

    rollout: str = field(default="episodes", metadata=help_text(
        "'steps' (n_steps per env per update) or 'episodes' (whole episodes, >= batch_steps)"))
    standardize: bool = field(default=True, metadata=help_text(
        "standardise the weights (returns or advantages) over each batch in the default chain"))
    optimizer: str = field(default="adam", metadata=help_text("'rmsprop', 'adam' or 'sgd'"))
    learning_rate: float = field(default=3e-3, metadata=help_text("optimizer learning rate"))
    optimizer_eps: float = field(default=1e-7, metadata=help_text("epsilon of RMSprop/Adam"))
    max_grad_norm: float = field(default=1.0, metadata=help_text(
        "clip the combined (policy + value + entropy) gradient to this global norm; 0 = off"))


class Reinforce(ActorCriticAgent):
    """REINFORCE with optional baseline. See ``agents/__init__.py`` for the interface."""

    Config = ReinforceConfig
    name = "reinforce"

    def default_transform(self) -> pgrad.GradientTransform:
        key = "advantages" if self.cfg.baseline else "returns"
        return pgrad.chain(pgrad.weight_by(key, standardize=self.cfg.standardize),
                           pgrad.mean_steps(), name=self.name)
