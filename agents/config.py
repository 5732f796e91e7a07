"""Hyperparameters: one dataclass for the actor-critic agent (the presets' are in preset_configs).

Every field documents itself in ``metadata["help"]`` (``pgrad-train --help`` lists them, ``--set
NAME=VALUE`` sets them). ``validate()`` refuses, before anything runs, values that cannot work or
would poison a run: non-finite numbers, out-of-range ones, and sizes past sane limits.
The module is data: it imports no TensorFlow (``pgrad-train --help`` lists it before TensorFlow
loads); ``validate`` imports the lists of names it checks against from the layers that own them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TypeVar

from agents import schedules

_T = TypeVar("_T")
OPTIMIZERS = ("rmsprop", "adam", "sgd")
ROLLOUTS = ("steps", "episodes", "groups")
RECURRENT = ("", "lstm", "gru")
#: Sizes past which a setting is refused as a mistake (a typo such as num_envs=100000).
MAX_ENVS = 4096
MAX_WIDTH = 16384
#: Most Transformer blocks (encoder 'transformer').
MAX_LAYERS = 256
#: Env steps in one update (n_steps x num_envs, or batch_steps): its arrays are held in memory.
MAX_BATCH_STEPS = 1 << 24
#: Flat observation width the MLP policies accept (the first layer is width x hidden[0]).
MAX_OBS_DIM = 1 << 20
#: Weights between hidden layers (sum of hidden[i] x hidden[i+1]): each network holds them, its
#: optimizer two more copies, its gradients one (67M float32 weights: ~1 GiB per network).
MAX_HIDDEN_PARAMS = 1 << 26
#: Largest adversarial_epsilon (raw observation units): past it the perturbed observation leaves
#: float32's range long before it means anything.
MAX_EPSILON = 1e6


def doc(text: str) -> dict:
    return {"help": text}


def scheduled(text: str, floor: float | None = None) -> dict:
    """The metadata of a field that takes a schedule (:mod:`agents.schedules`); its values are
    clamped to ``floor`` if given."""
    return {"help": text + "; a number or a schedule over the run: 'lin_X' (linear from X to "
            "0), 'lin_X_Y' (to Y), or from Python a function of the progress remaining",
            "schedule": True, "floor": floor}


@dataclass
class ActorCriticConfig:
    """Every hyperparameter of the actor-critic agent (the presets change defaults only)."""

    # -- rollouts ------------------------------------------------------------------------------
    num_envs: int = field(default=8, metadata=doc("parallel environments in the vector env"))
    vector_mode: str = field(default="sync", metadata=doc(
        "'sync' (all envs in this process), 'async' (one subprocess per env), 'envpool' "
        "(envpool's C++ pool; pip install 'pgrad[envpool]') or 'overlap' (this process: the "
        "policy acts on one half of the envs while a thread steps the other; same rollouts as "
        "'sync', faster where a core would idle; feed-forward policies without normalize_obs)"))
    rollout: str = field(default="steps", metadata=doc(
        "'steps' (n_steps per env per update), 'episodes' (whole episodes, >= batch_steps) or "
        "'groups' (one episode per env, envs reset in groups of group_size with one seed: a "
        "shared prompt; the GRPO family)"))
    group_size: int = field(default=1, metadata=doc(
        "with rollout 'groups': envs per group (TRL's num_generations), reset with one seed so "
        "they share a prompt; num_envs must be a multiple of it"))
    n_steps: int = field(default=5, metadata=doc(
        "with rollout 'steps': rollout length per env between updates"))
    batch_steps: int = field(default=1000, metadata=doc(
        "with rollout 'episodes': minimum env steps per update; every env's part ends at an "
        "episode end"))
    # -- returns -------------------------------------------------------------------------------
    gamma: float = field(default=0.99, metadata=doc("discount factor in [0, 1]"))
    gae_lambda: float = field(default=1.0, metadata=doc(
        "GAE lambda in [0, 1]; 1 = n-step / Monte-Carlo returns, 0 = one-step TD"))
    baseline: bool = field(default=True, metadata=doc(
        "learn a value function (critic); off: no critic, advantages are the returns"))
    normalize_advantage: bool = field(default=False, metadata=doc(
        "standardise advantages over each minibatch (mean 0, std 1) before the chain sees them"))
    # -- networks ------------------------------------------------------------------------------
    encoder: str = field(default="auto", metadata=doc(
        "what reads the observations: 'auto' (a CNN for image observations -- nature_cnn, or "
        "minatar_cnn for images under 36x36 -- the transformer for token contexts, else mlp), "
        "'mlp', 'nature_cnn', 'impala_cnn', 'minatar_cnn' or 'transformer' (a causal "
        "Transformer on token observations: d_model, num_heads, num_layers, ffn_dim); from "
        "Python also a function observation_space -> keras.Model, or a Keras model (a causal "
        "language model on token observations)"))
    share_encoder: bool = field(default=True, metadata=doc(
        "with an encoder (images, or your own): actor and critic share it (else each has a copy)"))
    hidden: tuple[int, ...] = field(default=(64, 64), metadata=doc(
        "hidden layer widths of the MLP (vector observations; with a CNN, the vector part of a "
        "Dict observation)"))
    critic_hidden: tuple[int, ...] = field(default=(), metadata=doc(
        "hidden layer widths of the critic's MLP when it differs from the actor's (separate "
        "networks on vector observations; SB3's net_arch=dict(pi=[...], vf=[...])); () = hidden"))
    d_model: int = field(default=64, metadata=doc(
        "with encoder 'transformer': the width of the token features (divisible by num_heads)"))
    num_heads: int = field(default=4, metadata=doc(
        "with encoder 'transformer': attention heads per layer"))
    num_layers: int = field(default=2, metadata=doc(
        "with encoder 'transformer': Transformer blocks (the context length comes from the "
        "observation space)"))
    ffn_dim: int = field(default=0, metadata=doc(
        "with encoder 'transformer': the hidden width of each block's MLP; 0 = 4 x d_model"))
    activation: str = field(default="tanh", metadata=doc("'tanh' or 'relu'"))
    shared_trunk: bool = field(default=False, metadata=doc(
        "MLP policies on vector observations: actor and critic share the hidden layers (else "
        "two separate networks)"))
    trunk_grad_scale: float = field(default=0.5, metadata=doc(
        "with shared_trunk: factor on the critic's gradient flowing into the shared trunk"))
    log_std_init: float = field(default=0.0, metadata=doc(
        "initial log standard deviation of Gaussian (Box) actions"))
    state_dependent_std: bool = field(default=False, metadata=doc(
        "Box actions: the actor outputs a log-std per state (else one learned log-std vector)"))
    squash: bool = field(default=False, metadata=doc(
        "Box actions: squash the Gaussian into the bounds with tanh (exact log-det-jacobian); "
        "else samples are clipped to the bounds"))
    use_sde: bool = field(default=False, metadata=doc(
        "Box actions: generalised state-dependent exploration (gSDE): noise latent(s) @ W, W "
        "held for sde_sample_freq steps, a [latent, A] learned log-std"))
    sde_sample_freq: int = field(default=-1, metadata=doc(
        "with use_sde: resample the exploration matrices every this many steps; -1 = once per "
        "rollout"))
    ortho_init: bool = field(default=True, metadata=doc(
        "orthogonal initialisation (gains sqrt 2, 0.01 policy, 1 value); else PyTorch's default"))
    recurrent: str = field(default="", metadata=doc(
        "a recurrent core after the features: 'lstm' or 'gru' (actor and critic each have one, "
        "as sb3-contrib's RecurrentPPO); '' = none (feed-forward)"))
    lstm_units: int = field(default=256, metadata=doc(
        "with recurrent: units of the LSTM/GRU core (sb3-contrib's lstm_hidden_size)"))
    sequence_length: int = field(default=0, metadata=doc(
        "with recurrent: PPO's minibatches are pieces of this many steps of one env's rollout, "
        "each from the core's state at its first step (as sb3-contrib's RecurrentPPO); it must "
        "divide n_steps, and minibatch_size be a multiple of it; 0 = whole env sequences "
        "(n_steps)"))
    # -- optimisation --------------------------------------------------------------------------
    optimizer: str = field(default="rmsprop", metadata=doc("'rmsprop', 'adam' or 'sgd'"))
    learning_rate: float | str = field(default=7e-4, metadata=scheduled(
        "optimizer learning rate"))
    optimizer_eps: float = field(default=1e-10, metadata=doc(
        "epsilon of RMSprop/Adam; Keras adds it inside RMSprop's square root, so 1e-10 here is "
        "about PyTorch's (SB3's) 1e-5 outside it"))
    rmsprop_rho: float = field(default=0.99, metadata=doc("RMSprop decay of the squared mean"))
    lr_decay_steps: int = field(default=0, metadata=doc(
        "decay the learning rates linearly to 0 over this many env steps counted from 0 (not "
        "relative to the run: learning_rate: lin_X is); 0 = off"))
    epochs: int = field(default=1, metadata=doc("passes over each rollout"))
    minibatch_size: int = field(default=0, metadata=doc(
        "steps per minibatch, shuffled each epoch; 0 = the whole rollout in one update"))
    target_kl: float = field(default=0.0, metadata=doc(
        "stop an update's epochs early once the approximate KL to the behaviour policy exceeds "
        "1.5 x this (as SB3); 0 = off"))
    max_grad_norm: float = field(default=0.5, metadata=doc(
        "clip the combined (policy + value + entropy) gradient to this global norm; 0 = off"))
    vf_coef: float | str = field(default=0.5, metadata=scheduled("weight of the value loss"))
    clip_range_vf: float | str = field(default=0.0, metadata=scheduled(
        "clip the new value to old value +- this in the value loss (PPO2's max form); 0 = off"))
    ent_coef: float | str = field(default=0.0, metadata=scheduled("weight of the entropy bonus"))
    critic_updates: int = field(default=0, metadata=doc(
        "train the critic separately, after the policy step: this many passes over each rollout "
        "with its own Adam (as NPG/TRPO do); 0 = one joint loss with vf_coef"))
    critic_learning_rate: float | str = field(default=1e-3, metadata=scheduled(
        "with critic_updates: the critic's Adam learning rate (decays with lr_decay_steps)"))
    critic_minibatch_size: int = field(default=0, metadata=doc(
        "with critic_updates: steps per critic minibatch; 0 = the whole rollout"))
    # -- normalisation -------------------------------------------------------------------------
    normalize_obs: bool = field(default=False, metadata=doc(
        "normalise observations with running mean/std (saved in checkpoints and the export)"))
    normalize_reward: bool = field(default=False, metadata=doc(
        "scale rewards by the running std of the discounted return"))
    clip_obs: float = field(default=10.0, metadata=doc("clip normalised observations to +-this"))
    clip_reward: float = field(default=10.0, metadata=doc("clip normalised rewards to +-this"))
    # -- engine and opt-in extras --------------------------------------------------------------
    engine_path: str = field(default="auto", metadata=doc(
        "policy-gradient engine path: 'auto' (cheapest exact), 'fused' or 'full'"))
    diagnostics: bool = field(default=False, metadata=doc(
        "log per-step gradient diagnostics (diag_* in updates.csv) each update"))
    diagnostics_max_norm: float = field(default=1.0, metadata=doc(
        "with diagnostics: per-step norm threshold of diag_clip_fraction; 0 = leave it out"))
    jit_compile: bool = field(default=False, metadata=doc(
        "compile fixed-shape updates with XLA (one fused computation; whole-episode batches "
        "stay plain); an update XLA cannot compile warns once and runs without it"))
    adversarial_epsilon: float = field(default=0.0, metadata=doc(
        "act on FGSM-perturbed observations (L-inf radius in raw observation units); 0 = off"))

    def validate_schedules(self, ranges: dict[str, tuple[float, float | None]],
                           positive_start: bool = False) -> None:
        """Checks that every value the schedules of ``ranges`` take at the start and end of a run
        lies in ``[lo, hi]`` (with ``positive_start``: ``> 0`` at the start)."""
        for name, (lo, hi) in ranges.items():
            value = getattr(self, name)
            points = schedules.bounds(value, name)  # ValueError: malformed, non-finite
            constant = isinstance(schedules.parse(value, name), schedules.Constant)
            open_lo = positive_start and constant  # a constant learning rate: (0, hi]
            where = (f"{'(' if open_lo else '['}{lo:g}, {hi:g}]" if hi is not None
                     else f">= {lo:g}")
            if constant:
                if points[0] < lo or (open_lo and points[0] <= lo) or (
                        hi is not None and points[0] > hi):
                    raise ValueError(f"{name} must be {'in ' if hi is not None else ''}{where}; "
                                     f"got {value}")
                continue
            shown = value if schedules.is_data(value) else f"{value!r} -> {points}"
            if positive_start and not points[0] > 0:
                raise ValueError(f"{name} must be > 0 at the start of the run; got {shown}")
            if any(p < lo or (hi is not None and p > hi) for p in points):
                raise ValueError(f"{name} must stay {'in ' if hi is not None else ''}{where} over "
                                 f"the run; got {shown}")

    def absolute_decays(self) -> dict[str, int]:
        """``{scheduled field: env steps}`` of the legacy linear decays over absolute env steps."""
        return {"learning_rate": int(self.lr_decay_steps),
                "critic_learning_rate": int(self.lr_decay_steps)}

    def steps_per_update(self) -> int:
        """Env steps per update (nominal for whole-episode and group rollouts: batch_steps)."""
        return self.n_steps * self.num_envs if self.rollout == "steps" else self.batch_steps

    def validate(self) -> None:
        """Raises ValueError naming the first field out of range (checked before anything runs)."""
        # The owners of these names import TensorFlow: imported here, not with the data.
        from pgrad.engine import PATHS
        from pgrad.rl.collection.rollout import VECTOR_MODES
        from pgrad.rl.models import encoders

        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{f.name} must be a finite number; got {value}")

        def need(ok: bool, msg: str):
            if not ok:
                raise ValueError(msg)

        need(1 <= int(self.num_envs) <= MAX_ENVS,
             f"num_envs must be in [1, {MAX_ENVS}]; got {self.num_envs}")
        need(self.vector_mode in VECTOR_MODES,
             f"vector_mode must be one of {VECTOR_MODES}; got {self.vector_mode!r}")
        for on, what in ((self.recurrent, f"recurrent={self.recurrent!r}"),
                         (self.normalize_obs, "normalize_obs")):
            need(not (on and self.vector_mode == "overlap"), f"vector_mode 'overlap' acts on half "
                 f"the envs at a time, which {what} does not allow; use vector_mode 'sync'")
        need(self.rollout in ROLLOUTS, f"rollout must be one of {ROLLOUTS}; got {self.rollout!r}")
        if self.rollout == "groups":
            g = self.group_size
            need(isinstance(g, int) and not isinstance(g, bool) and g >= 1,
                 f"group_size must be an int >= 1; got {g!r}")
            need(self.num_envs % g == 0, f"group_size {g} must divide num_envs {self.num_envs} "
                 "(each group is group_size envs sharing a prompt)")
            need(self.vector_mode in ("sync", "async"), "rollout 'groups' resets each env with "
                 f"its group's seed: vector_mode must be 'sync' or 'async'; got "
                 f"{self.vector_mode!r}")
            need(not self.recurrent, "rollout 'groups' needs a feed-forward or Transformer "
                 f"policy; got recurrent={self.recurrent!r}")
        need(int(self.n_steps) >= 1, f"n_steps must be >= 1; got {self.n_steps}")
        need(int(self.batch_steps) >= 1, f"batch_steps must be >= 1; got {self.batch_steps}")
        need(self.steps_per_update() <= MAX_BATCH_STEPS,
             f"{'n_steps x num_envs' if self.rollout == 'steps' else 'batch_steps'} must be "
             f"<= {MAX_BATCH_STEPS:,} env steps per update; got {self.steps_per_update():,}")
        need(0.0 <= self.gamma <= 1.0, f"gamma must be in [0, 1]; got {self.gamma}")
        need(0.0 <= self.gae_lambda <= 1.0, f"gae_lambda must be in [0, 1]; got {self.gae_lambda}")
        for name in ("hidden", "critic_hidden"):
            widths = getattr(self, name)
            need(len(widths) <= 16 and all(0 < int(h) <= MAX_WIDTH for h in widths),
                 f"{name} widths must be in [1, {MAX_WIDTH}] (at most 16 layers); got {widths}")
            weights = sum(int(a) * int(b) for a, b in zip(widths, widths[1:]))
            need(weights <= MAX_HIDDEN_PARAMS,
                 f"{name} {list(widths)} needs {weights:,} weights between its layers; at most "
                 f"{MAX_HIDDEN_PARAMS:,} fit in memory with their optimizer state (narrow the "
                 "layers)")
        need(not (self.critic_hidden and self.shared_trunk),
             "critic_hidden gives the critic its own widths; with shared_trunk actor and critic "
             "share the hidden layers (choose one)")
        need(self.activation in ("tanh", "relu"),
             f"activation must be 'tanh' or 'relu'; got {self.activation!r}")
        encoders.check_name(self.encoder)
        self.validate_transformer(need)
        need(not (self.use_sde and self.state_dependent_std),
             "use_sde and state_dependent_std are alternatives; choose one")
        need(int(self.sde_sample_freq) >= -1 and int(self.sde_sample_freq) != 0,
             f"sde_sample_freq must be -1 or >= 1; got {self.sde_sample_freq}")
        need(self.trunk_grad_scale >= 0,
             f"trunk_grad_scale must be >= 0; got {self.trunk_grad_scale}")
        need(-20.0 <= self.log_std_init <= 5.0,
             f"log_std_init must be in [-20, 5]; got {self.log_std_init}")
        need(self.optimizer in OPTIMIZERS,
             f"optimizer must be one of {OPTIMIZERS}; got {self.optimizer!r}")
        self.validate_schedules({"learning_rate": (0, 10.0), "critic_learning_rate": (0, 10.0)},
                                positive_start=True)
        for name in ("learning_rate", "critic_learning_rate"):
            need(not (self.lr_decay_steps and not isinstance(
                schedules.parse(getattr(self, name), name), schedules.Constant)),
                f"{name}: a schedule and lr_decay_steps are two decays; choose one (lin_X "
                "decays over the run)")
        need(0 < self.optimizer_eps < 1,
             f"optimizer_eps must be in (0, 1); got {self.optimizer_eps}")
        need(0.0 < self.rmsprop_rho < 1.0, f"rmsprop_rho must be in (0, 1); got {self.rmsprop_rho}")
        need(int(self.lr_decay_steps) >= 0,
             f"lr_decay_steps must be >= 0; got {self.lr_decay_steps}")
        need(1 <= int(self.epochs) <= 1000, f"epochs must be in [1, 1000]; got {self.epochs}")
        need(int(self.minibatch_size) >= 0,
             f"minibatch_size must be >= 0 (0 = whole batch); got {self.minibatch_size}")
        if self.rollout == "steps" and self.minibatch_size:
            batch = self.n_steps * self.num_envs
            need(self.minibatch_size <= batch and batch % self.minibatch_size == 0,
                 f"minibatch_size must divide n_steps x num_envs = {batch}; "
                 f"got {self.minibatch_size}")
        need(self.target_kl >= 0, f"target_kl must be >= 0; got {self.target_kl}")
        need(self.max_grad_norm >= 0, f"max_grad_norm must be >= 0; got {self.max_grad_norm}")
        self.validate_schedules({"vf_coef": (0, None), "clip_range_vf": (0, None),
                                 "ent_coef": (0, None)})
        need(0 <= int(self.critic_updates) <= 1000,
             f"critic_updates must be in [0, 1000]; got {self.critic_updates}")

        need(int(self.critic_minibatch_size) >= 0,
             f"critic_minibatch_size must be >= 0; got {self.critic_minibatch_size}")
        if self.critic_updates:
            need(self.baseline and not self.shared_trunk,
                 "critic_updates needs a separate critic (baseline on, shared_trunk off)")
        need(self.clip_obs > 0 and self.clip_reward > 0, "clip_obs and clip_reward must be > 0")
        need(self.engine_path in PATHS,
             f"engine_path must be one of {PATHS}; got {self.engine_path!r}")
        need(0 <= self.adversarial_epsilon <= MAX_EPSILON,  # (NaN fails both)
             f"adversarial_epsilon must be in [0, {MAX_EPSILON:g}]; got {self.adversarial_epsilon}")
        need(self.recurrent in RECURRENT,
             f"recurrent must be one of {RECURRENT}; got {self.recurrent!r}")
        need(1 <= int(self.lstm_units) <= MAX_WIDTH,
             f"lstm_units must be in [1, {MAX_WIDTH}]; got {self.lstm_units}")
        if self.recurrent:
            self.validate_recurrent(need)
        else:
            need(int(self.sequence_length) == 0,
                 f"sequence_length applies to recurrent policies only (recurrent is off); got "
                 f"{self.sequence_length}")
        need(self.diagnostics_max_norm >= 0,
             f"diagnostics_max_norm must be >= 0; got {self.diagnostics_max_norm}")


    def validate_transformer(self, need: Callable[[bool, str], None]) -> None:
        """The Transformer's sizes: positive integers (``ffn_dim`` 0 = default), bounded, and
        ``d_model`` divisible by ``num_heads``."""
        bounds = {"d_model": (1, MAX_WIDTH), "num_heads": (1, MAX_WIDTH),
                  "num_layers": (1, MAX_LAYERS), "ffn_dim": (0, MAX_WIDTH)}
        for name, (lo, hi) in bounds.items():
            value = getattr(self, name)
            whole = isinstance(value, int) and not isinstance(value, bool)
            kind = "a positive integer" if lo else "an integer >= 0 (0 = 4 x d_model)"
            need(whole and lo <= value <= hi, f"{name} must be {kind} of at most {hi}; "
                 f"got {value!r}")
        need(self.d_model % self.num_heads == 0, f"d_model ({self.d_model}) must be divisible "
             f"by num_heads ({self.num_heads})")

    def sequence_steps(self) -> int:
        """``L``: the steps of one recurrent sequence in the update (``sequence_length``, or
        ``n_steps`` for whole env sequences)."""
        return int(self.sequence_length) or int(self.n_steps)

    def validate_recurrent(self, need: Callable[[bool, str], None]) -> None:
        """What a recurrent core needs: fixed-length rollouts cut into equal pieces."""
        why = f"recurrent={self.recurrent!r}"
        need(self.rollout == "steps", f"{why} needs rollout='steps' (whole env sequences of "
             "n_steps; set n_steps to the horizon)")
        length, n_steps = int(self.sequence_length), int(self.n_steps)
        need(length == 0 or (1 <= length <= n_steps and n_steps % length == 0),
             f"sequence_length must divide n_steps = {n_steps} (0 = whole env sequences); "
             f"got {self.sequence_length}")
        what, unit = (("whole env sequences", f"n_steps = {n_steps}") if length == 0 else
                      (f"pieces of {length} steps", f"sequence_length = {length}"))
        need(int(self.minibatch_size) % self.sequence_steps() == 0,
             f"{why}: minibatches are {what}, so minibatch_size must be a multiple of "
             f"{unit}; got {self.minibatch_size}")
        need(not self.shared_trunk, f"{why}: actor and critic have their own cores; "
             "shared_trunk does not apply")
        need(self.adversarial_epsilon == 0, f"{why}: adversarial_epsilon attacks feed-forward "
             "policies only")
        need(not self.diagnostics, f"{why}: diagnostics apply to feed-forward policies only")
        need(int(self.critic_minibatch_size) == 0, f"{why}: critic_minibatch_size must be 0 "
             "(the critic trains on whole sequences)")


def preset(name: str, value: _T) -> _T:
    """A preset's own default for an :class:`ActorCriticConfig` field, keeping its help text.

    ``num_envs: int = preset("num_envs", 16)`` in a subclass changes the default only.
    """
    base = {f.name: f for f in fields(ActorCriticConfig)}
    if name not in base:
        raise KeyError(f"ActorCriticConfig has no field {name!r}")
    return field(default=value, metadata=base[name].metadata)
