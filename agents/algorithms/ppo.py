"""Proximal policy optimisation (PPO, Schulman et al. 2017) as a preset of the actor-critic agent.

Not a copy of an algorithm: the actor-critic agent with ``epochs`` passes over each rollout in
shuffled minibatches, advantages standardised per minibatch, optional value clipping and
``target_kl`` early stop -- and the chain ``chain(clip_ratio("clip_range"), mean_steps())``,
whose per-step scale ``A_t r_t 1[not clipped]`` is exactly the gradient of the clipped surrogate
and runs on the engine's fused path from the current log-probabilities of its forward pass.
Defaults are Stable-Baselines3's (per-env settings: ``pgrad_app/config/hyperparams/ppo.yaml``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agents import schedules
from agents.catalog.declare import Algorithm
from agents.config import ActorCriticConfig, doc, preset, scheduled


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


def ppo_chain(cfg: PPOConfig):
    """``chain(clip_ratio("clip_range"), mean_steps())``: the clip range reaches the chain
    through the context, evaluated each update from its schedule (agents/schedules.py); the
    chain reports PPO's surrogate and approx_kl."""
    import pgrad

    return pgrad.chain(pgrad.clip_ratio("clip_range"), pgrad.mean_steps(), name="ppo")


ALGORITHMS = (Algorithm("ppo", "PPO", PPOConfig, chain=ppo_chain,
                        summary="proximal policy optimisation: the clipped-ratio chain over "
                                "epochs of minibatches"),)
