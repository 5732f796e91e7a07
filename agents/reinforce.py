"""REINFORCE: Monte-Carlo policy gradient over whole episodes, optional learned baseline.

Each :meth:`Reinforce.step` collects whole episodes (at least ``batch_steps`` steps, see
:meth:`pgrad.rollout.Collector.collect_episodes`), computes reward-to-go returns
``G_t = r_t + gamma G_{t+1}`` (a time-limit truncation bootstraps from the baseline's value of
the final observation when there is a baseline, else counts as the end), and makes one update:

* policy: per-step gradients through the transform chain, by default
  ``chain(weight_by(key, standardize=standardize), mean_steps())`` with ``key = "advantages"``
  (``G_t - V(o_t)``) when ``baseline`` is on and ``"returns"`` otherwise;
* baseline: ``vf_coef * mean((G_t - V(o_t))^2)`` from an ordinary tape, added after aggregation;
* entropy bonus ``ent_coef`` likewise; the sum is clipped to ``max_grad_norm`` and applied.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tensorflow as tf

import pgrad
from agents.common import Agent, CommonConfig, _help


@dataclass
class Config(CommonConfig):
    """REINFORCE hyperparameters (plus the common ones in ``CommonConfig``)."""

    batch_steps: int = field(default=1000, metadata=_help(
        "minimum env steps per update; every env's part of the batch ends at an episode end"))
    baseline: bool = field(default=True, metadata=_help(
        "learn a value baseline and weight by advantages G_t - V(o_t)"))
    standardize: bool = field(default=True, metadata=_help(
        "standardise the weights (returns or advantages) over each batch in the default chain"))
    optimizer: str = field(default="adam", metadata=_help("'rmsprop', 'adam' or 'sgd'"))
    learning_rate: float = field(default=3e-3, metadata=_help("optimizer learning rate"))
    optimizer_eps: float = field(default=1e-7, metadata=_help("epsilon of RMSprop/Adam"))
    max_grad_norm: float = field(default=1.0, metadata=_help(
        "clip the combined (policy + value + entropy) gradient to this global norm; 0 = off"))

    def validate(self) -> None:
        super().validate()
        if int(self.batch_steps) < 1:
            raise ValueError(f"batch_steps must be >= 1; got {self.batch_steps}")


class Reinforce(Agent):
    """REINFORCE with optional baseline. See ``agents/__init__.py`` for the interface."""

    Config = Config
    name = "reinforce"

    def __init__(self, cfg: Config, env_id="CartPole-v1", seed: int = 0, transform=None):
        self.uses_critic = bool(cfg.baseline)
        super().__init__(cfg, env_id, seed, transform)

    def default_transform(self) -> pgrad.GradientTransform:
        key = "advantages" if self.cfg.baseline else "returns"
        return pgrad.chain(pgrad.weight_by(key, standardize=self.cfg.standardize),
                           pgrad.mean_steps(), name="reinforce")

    def steps_per_update(self) -> int:
        return self.cfg.batch_steps

    def _collect(self, policy_fn):
        return self.collector.collect_episodes(policy_fn, self.cfg.batch_steps)

    def _targets(self, rewards, terminated, truncated, values, next_values):
        returns = pgrad.discounted_returns(rewards, terminated, truncated, next_values,
                                           self.cfg.gamma)  # [T, B]
        if not self.uses_critic:
            return returns, returns
        return returns - tf.stop_gradient(values), returns
