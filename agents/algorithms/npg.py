"""Natural policy gradient (NPG; Kakade 2001) as a preset of the actor-critic agent.

The policy step is the transform ``natural_gradient(damping, weights_key="advantages")``: the
damped natural gradient ``x = (F + damping I)^-1 g`` with the empirical Fisher of the per-step
log-probability gradients (a direct solve, or conjugate gradient on Fisher-vector products when
``T * P`` is large), scaled so that its KL, measured as ``0.5 x^T (F + damping I) x``, is
exactly ``max_kl``: the step ``sqrt(2 max_kl / g^T (F + damping I)^-1 g) x`` of TRPO (without
its line search) and of the NPG references (Spinning Up, mjrl's NPG of Rajeswaran et al. 2017;
Kakade 2001 gives the direction ``F^-1 g``). ``damped_kl = False`` measures by ``F`` alone
(longer steps along the same direction), ``exact_kl = False`` only bounds the KL, ``max_kl = 0``
does not scale. Advantages are standardised with the sample std (``normalize_advantage``, as
Stable-Baselines3). Plain SGD applies it (``learning_rate`` 1: the step is the transform's; with
``max_kl = 0`` the learning rate is the step size, as Tianshou's ``actor_step_size``), so
``max_grad_norm`` is off by default. The critic trains
separately after each policy step (``critic_updates`` passes with its own Adam), as in the NPG
and TRPO references. Per-env settings: ``pgrad_app/config/hyperparams/npg.yaml``.
"""

from __future__ import annotations

import pgrad
from agents.base import ActorCriticAgent
from agents.catalog.configs import NPGConfig


class NPG(ActorCriticAgent):
    """NPG: the actor-critic agent with a natural-gradient chain and a separate critic."""

    Config = NPGConfig
    cfg: NPGConfig
    name = "npg"

    def default_transform(self) -> pgrad.GradientTransform:
        cfg = self.cfg
        return pgrad.chain(
            pgrad.natural_gradient(cfg.damping, weights_key="advantages",
                                   max_kl=cfg.max_kl or None, solver=cfg.solver,
                                   cg_iters=cfg.cg_iters, exact_kl=cfg.exact_kl and cfg.max_kl > 0,
                                   damped_kl=cfg.damped_kl),
            name=self.name)
