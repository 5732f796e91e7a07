"""REINFORCE: Monte-Carlo policy gradient over whole episodes, optional learned baseline.

A preset of the actor-critic agent: whole-episode rollouts (at least ``batch_steps`` steps,
see :meth:`pgrad.rl.rollout.Collector.collect_episodes`), reward-to-go returns (GAE with
``lambda = 1``; a time-limit truncation bootstraps from the baseline's value of the final
observation when there is a baseline, else counts as the end), and the chain
``chain(weight_by(key, standardize=standardize), mean_steps())`` with ``key = "advantages"``
(``G_t - V(o_t)``) when ``baseline`` is on and ``"returns"`` otherwise.
"""

from __future__ import annotations

import pgrad
from agents.base import ActorCriticAgent
from agents.catalog.configs import ReinforceConfig


class Reinforce(ActorCriticAgent):
    """REINFORCE with optional baseline. See ``agents/__init__.py`` for the interface."""

    Config = ReinforceConfig
    cfg: ReinforceConfig
    name = "reinforce"

    def default_transform(self) -> pgrad.GradientTransform:
        key = "advantages" if self.cfg.baseline else "returns"
        return pgrad.chain(pgrad.weight_by(key, standardize=self.cfg.standardize),
                           pgrad.mean_steps(), name=self.name)
