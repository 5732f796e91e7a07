"""Every preset's hyperparameters: one dataclass per agent, data only (no TensorFlow).

``pgrad-train --help`` lists these tables and ``--set`` types its values from them, both before
TensorFlow loads; the agent classes (``agents/algorithms/a2c.py``, ``ppo.py``, ...) take them
as their ``Config``. :data:`CONFIGS` maps each registered agent name to its dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agents import schedules
from agents.config import ActorCriticConfig, doc, preset, scheduled

#: Largest IMPALA ``lag`` (updates between the acting and the learning weights).
MAX_LAG = 1000

#: APPO's ``clip_against`` values: the policy whose ratio to the current one PPO's clip bounds.
CLIP_AGAINST = ("behaviour", "learner")


@dataclass
class A2CConfig(ActorCriticConfig):
    """A2C hyperparameters (every field of the actor-critic agent; A2C's defaults)."""

    # 16 envs x 5 steps (SB3/rl-zoo: 8 x 5) with twice SB3's learning rate: half as many updates
    # per env step -- each update has a fixed cost -- and, measured on CartPole seeds 0-9, fewer
    # env steps to solve, too (docs/agents.md).
    num_envs: int = preset("num_envs", 16)
    learning_rate: float = preset("learning_rate", 1.4e-3)


@dataclass
class PPOConfig(ActorCriticConfig):
    """PPO hyperparameters (every field of the actor-critic agent; PPO's defaults)."""

    num_envs: int = preset("num_envs", 1)
    n_steps: int = preset("n_steps", 2048)
    gae_lambda: float = preset("gae_lambda", 0.95)
    normalize_advantage: bool = preset("normalize_advantage", True)
    optimizer: str = preset("optimizer", "adam")
    learning_rate: float = preset("learning_rate", 3e-4)
    optimizer_eps: float = preset("optimizer_eps", 1e-5)
    epochs: int = preset("epochs", 10)
    minibatch_size: int = preset("minibatch_size", 64)
    # Floored at 1e-3: a ratio clip of exactly 0 (the end of lin_X) would freeze the policy.
    clip_range: float | str = field(default=0.2, metadata=scheduled(
        "PPO's clip range epsilon of the probability ratio", floor=1e-3))
    clip_decay_steps: int = field(default=0, metadata=doc(
        "decay the clip range linearly to 0 over this many env steps counted from 0 (not "
        "relative to the run: clip_range: lin_X is); 0 = off"))

    def validate(self) -> None:
        super().validate()
        self.validate_schedules({"clip_range": (0, 1)}, positive_start=True)
        if schedules.bounds(self.clip_range, "clip_range")[0] >= 1:
            raise ValueError(f"clip_range must be in (0, 1); got {self.clip_range}")
        if int(self.clip_decay_steps) < 0:
            raise ValueError(f"clip_decay_steps must be >= 0; got {self.clip_decay_steps}")

    def absolute_decays(self) -> dict[str, int]:
        return {**super().absolute_decays(), "clip_range": int(self.clip_decay_steps)}


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


@dataclass
class IMPALAConfig(ActorCriticConfig):
    """IMPALA hyperparameters (every field of the actor-critic agent, plus V-trace's and the
    actor-learner schedule's). Defaults: A2C's CartPole settings with IMPALA's truncations."""

    num_envs: int = preset("num_envs", 16)
    learning_rate: float = preset("learning_rate", 1.4e-3)
    # A floor under RMSprop's root (1e-6 inside Keras's, ~1e-3 outside it). With A2C's 1e-10,
    # once the policy solves and its gradients fade, RMSprop's mean square fades with them; the
    # next failure's gradient is divided by almost nothing (~10x the learning rate per weight)
    # and a learner that sees its step only `lag` updates later overshoots into a deterministic
    # policy: CartPole, lag 4, 150k steps: 4 of 8 seeds below 475 (seed 0: 9.4); with 1e-6, 8 of
    # 8 at 500. Reference IMPALAs use a larger floor (RMSProp epsilon 0.01 in TorchBeast, 0.1 in
    # RLlib); 1e-4 (TorchBeast's, 0.01 outside) stopped the collapse too but slowed CartPole at
    # this learning rate so much that no seed's training mean reached 475 in 150k steps
    # (docs/benchmarks/async/README.md).
    optimizer_eps: float = preset("optimizer_eps", 1e-6)
    rho_bar: float = field(default=1.0, metadata=doc(
        "V-trace: truncation of the importance weights in the value targets (rho-bar)"))
    c_bar: float = field(default=1.0, metadata=doc(
        "V-trace: truncation of the trace coefficients c_t (c-bar)"))
    pg_rho_bar: float = field(default=1.0, metadata=doc(
        "V-trace: truncation of the importance weight of the policy gradient"))
    lag: int = field(default=0, metadata=doc(
        "in-process actor (no --workers): updates between the weights that act and those that "
        "learn (a deterministic schedule, for tests and studies)"))
    broadcast_interval: int = field(default=1, metadata=doc(
        "broadcast the learner's weights to the actors every this many updates"))
    queue_size: int = field(default=4, metadata=doc(
        "with --workers: trajectories requested from the actors and not yet learned from, at "
        "most (a slow learner throttles the actors)"))

    def validate(self) -> None:
        super().validate()
        if self.rollout != "steps":
            raise ValueError("impala learns from fixed-length trajectories: rollout must be "
                             f"'steps'; got {self.rollout!r}")
        for name in ("rho_bar", "c_bar", "pg_rho_bar"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0; got {getattr(self, name)}")
        if not 0 <= int(self.lag) <= MAX_LAG:
            raise ValueError(f"lag must be in [0, {MAX_LAG}]; got {self.lag}")
        if int(self.broadcast_interval) < 1:
            raise ValueError(f"broadcast_interval must be >= 1; got {self.broadcast_interval}")
        if int(self.queue_size) < 1:
            raise ValueError(f"queue_size must be >= 1; got {self.queue_size}")


@dataclass
class APPOConfig(IMPALAConfig):
    """APPO hyperparameters: IMPALA's plus PPO's clip range (RLlib's APPO defaults where they
    fit the actor-critic agent)."""

    clip_range: float | str = field(default=0.4, metadata=scheduled(
        "APPO's clip range epsilon of the probability ratio (see clip_against)", floor=1e-3))
    clip_against: str = field(default="behaviour", metadata=doc(
        "the policy the clipped ratio is taken against: 'behaviour' = pi / mu, mu the weights "
        "that acted; 'learner' = pi / pi_prox, pi_prox the learner's policy at the start of the "
        "update, each step weighted by min(pg_rho_bar, pi_prox / mu) (decoupled PPO, Hilton et "
        "al. 2021; RLlib's target network refreshed every update); equal at lag 0"))
    # A2C's (its clipping bounds each step; its CartPole results were measured with this).
    optimizer_eps: float = preset("optimizer_eps", 1e-10)

    def validate(self) -> None:
        super().validate()
        self.validate_schedules({"clip_range": (0, 1)}, positive_start=True)
        if schedules.bounds(self.clip_range, "clip_range")[0] >= 1:
            raise ValueError(f"clip_range must be in (0, 1); got {self.clip_range}")
        if self.clip_against not in CLIP_AGAINST:
            raise ValueError(f"clip_against must be one of {CLIP_AGAINST}; "
                             f"got {self.clip_against!r}")


#: Registered agent name -> its hyperparameter dataclass (``agents.get(name).Config``).
CONFIGS: dict[str, type[ActorCriticConfig]] = {
    "a2c": A2CConfig, "appo": APPOConfig, "impala": IMPALAConfig, "npg": NPGConfig,
    "ppo": PPOConfig, "reinforce": ReinforceConfig}
