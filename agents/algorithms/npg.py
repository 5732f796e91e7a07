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

from dataclasses import dataclass, field

from agents.catalog.declare import Algorithm
from agents.config import ActorCriticConfig, doc, preset


@dataclass
class NPGConfig(ActorCriticConfig):
    """NPG hyperparameters (every field of the actor-critic agent; NPG's defaults)."""

    num_envs: int = preset("num_envs", 16)
    n_steps: int = preset("n_steps", 64)
    gae_lambda: float = preset("gae_lambda", 0.95)
    normalize_advantage: bool = preset("normalize_advantage", True)
    optimizer: str = preset("optimizer", "sgd")
    learning_rate: float = preset("learning_rate", 1.0)
    max_grad_norm: float = preset("max_grad_norm", 0.0)
    critic_updates: int = preset("critic_updates", 20)
    damping: float = field(default=0.1, metadata=doc("Tikhonov damping of the Fisher, > 0"))
    max_kl: float = field(default=0.01, metadata=doc(
        "the KL of each step: scaled to exactly this (exact_kl) or at most this; 0 = unscaled "
        "(then learning_rate is the step size)"))
    exact_kl: bool = field(default=True, metadata=doc(
        "scale every step to a measured KL of exactly max_kl (the normalised NPG/TRPO step); "
        "false: max_kl only bounds it"))
    damped_kl: bool = field(default=True, metadata=doc(
        "measure a step's KL as 0.5 x^T (F + damping I) x, as TRPO and the NPG references do; "
        "false: 0.5 x^T F x (longer steps, pgrad's convention before issue #27)"))
    solver: str = field(default="auto", metadata=doc(
        "'cholesky' (direct), 'cg' (conjugate gradient on Fisher-vector products) or 'auto'"))
    cg_iters: int = field(default=10, metadata=doc("conjugate-gradient iterations at most"))

    def validate(self) -> None:
        super().validate()
        if not self.damping > 0:
            raise ValueError(f"damping must be > 0; got {self.damping}")
        if self.max_kl < 0:
            raise ValueError(f"max_kl must be >= 0; got {self.max_kl}")
        from pgrad.transforms.natural import SOLVERS  # the solvers' own list (imports TF)

        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}; got {self.solver!r}")
        if not 1 <= int(self.cg_iters) <= 1000:
            raise ValueError(f"cg_iters must be in [1, 1000]; got {self.cg_iters}")


def npg_chain(cfg: NPGConfig, name: str = "npg"):
    """``chain(natural_gradient(damping, weights_key="advantages", max_kl, ...))``."""
    import pgrad

    return pgrad.chain(
        pgrad.natural_gradient(cfg.damping, weights_key="advantages",
                               max_kl=cfg.max_kl or None, solver=cfg.solver,
                               cg_iters=cfg.cg_iters, exact_kl=cfg.exact_kl and cfg.max_kl > 0,
                               damped_kl=cfg.damped_kl),
        name=name)


ALGORITHMS = (Algorithm("npg", "NPG", NPGConfig, chain=npg_chain,
                        summary="natural policy gradient: the damped Fisher solve scaled to a "
                                "KL, a separate critic"),)
