"""Natural policy gradient (NPG; Kakade 2001) as a preset of the actor-critic agent.

The policy step is the transform ``natural_gradient(damping, weights_key="advantages")``: the
damped natural gradient ``(F + damping I)^-1 g`` with the empirical Fisher of the per-step
log-probability gradients (a direct solve, or conjugate gradient on Fisher-vector products when
``T * P`` is large), optionally scaled so its estimated KL is at most ``max_kl`` (then it is a
trust-region step without line search). Plain SGD applies it with ``learning_rate`` as the step
size (Tianshou's ``actor_step_size``), so ``max_grad_norm`` is off by default. The critic trains
separately after each policy step (``critic_updates`` passes with its own Adam), as in the NPG
and TRPO references. Per-env settings: ``configs/npg.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pgrad
from agents.base import ActorCriticAgent
from agents.config import ActorCriticConfig, help_text
from pgrad.transforms.natural import SOLVERS


@dataclass
class NPGConfig(ActorCriticConfig):
    """NPG hyperparameters (every field of the actor-critic agent; NPG's defaults)."""

    num_envs: int = field(default=16, metadata=help_text("parallel environments in the vector env"))
    n_steps: int = field(default=64, metadata=help_text(
        "with rollout 'steps': rollout length per env between updates"))
    gae_lambda: float = field(default=0.95, metadata=help_text(
        "GAE lambda in [0, 1]; 1 = n-step / Monte-Carlo returns, 0 = one-step TD"))
    normalize_advantage: bool = field(default=True, metadata=help_text(
        "standardise advantages over each minibatch (mean 0, std 1) before the chain sees them"))
    optimizer: str = field(default="sgd", metadata=help_text("'rmsprop', 'adam' or 'sgd'"))
    learning_rate: float = field(default=0.1, metadata=help_text(
        "step size of the natural-gradient step (SGD learning rate)"))
    max_grad_norm: float = field(default=0.0, metadata=help_text(
        "clip the combined gradient to this global norm; 0 = off (it would distort the step)"))
    critic_updates: int = field(default=20, metadata=help_text(
        "train the critic separately, after the policy step: this many passes over each rollout "
        "with its own Adam (as NPG/TRPO do); 0 = one joint loss with vf_coef"))
    damping: float = field(default=0.1, metadata=help_text("Tikhonov damping of the Fisher, > 0"))
    max_kl: float = field(default=0.0, metadata=help_text(
        "scale each step so its estimated KL is <= this (a trust region); 0 = off"))
    solver: str = field(default="auto", metadata=help_text(
        "'cholesky' (direct), 'cg' (conjugate gradient on Fisher-vector products) or 'auto'"))
    cg_iters: int = field(default=10, metadata=help_text("conjugate-gradient iterations at most"))

    def validate(self) -> None:
        super().validate()
        if not self.damping > 0:
            raise ValueError(f"damping must be > 0; got {self.damping}")
        if self.max_kl < 0:
            raise ValueError(f"max_kl must be >= 0; got {self.max_kl}")
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}; got {self.solver!r}")
        if not 1 <= int(self.cg_iters) <= 1000:
            raise ValueError(f"cg_iters must be in [1, 1000]; got {self.cg_iters}")


class NPG(ActorCriticAgent):
    """NPG: the actor-critic agent with a natural-gradient chain and a separate critic."""

    Config = NPGConfig
    name = "npg"

    def default_transform(self) -> pgrad.GradientTransform:
        cfg = self.cfg
        return pgrad.chain(
            pgrad.natural_gradient(cfg.damping, weights_key="advantages",
                                   max_kl=cfg.max_kl or None, solver=cfg.solver,
                                   cg_iters=cfg.cg_iters), name=self.name)
