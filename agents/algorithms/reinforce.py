"""REINFORCE: Monte-Carlo policy gradient over whole episodes, optional learned baseline.

A preset of the actor-critic agent: whole-episode rollouts (at least ``batch_steps`` steps,
see :meth:`pgrad.rl.collection.rollout.Collector.collect_episodes`), reward-to-go returns (GAE with
``lambda = 1``; a time-limit truncation bootstraps from the baseline's value of the final
observation when there is a baseline, else counts as the end), and the chain
``chain(weight_by(key, standardize=standardize), mean_steps())`` with ``key = "advantages"``
(``G_t - V(o_t)``) when ``baseline`` is on and ``"returns"`` otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.catalog.declare import Algorithm
from agents.config import ActorCriticConfig, doc, preset


@dataclass
class ReinforceConfig(ActorCriticConfig):
    """REINFORCE hyperparameters (every field of the actor-critic agent; REINFORCE's defaults)."""

    rollout: str = preset("rollout", "episodes")
    standardize: bool = field(default=True, metadata=doc(
        "standardise the weights (returns or advantages) over each batch in the default chain"))
    optimizer: str = preset("optimizer", "adam")
    learning_rate: float = preset("learning_rate", 3e-3)
    optimizer_eps: float = preset("optimizer_eps", 1e-7)
    max_grad_norm: float = preset("max_grad_norm", 1.0)


def reinforce_chain(cfg: ReinforceConfig):
    """``chain(weight_by(key, standardize), mean_steps())``, ``key`` the advantages with a
    baseline, else the returns."""
    import pgrad

    key = "advantages" if cfg.baseline else "returns"
    return pgrad.chain(pgrad.weight_by(key, standardize=cfg.standardize), pgrad.mean_steps(),
                       name="reinforce")


ALGORITHMS = (Algorithm("reinforce", "Reinforce", ReinforceConfig, chain=reinforce_chain,
                        summary="Monte-Carlo policy gradient over whole episodes, optional "
                                "baseline"),)
