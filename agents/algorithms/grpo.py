"""GRPO and RLOO: the GRPO family's losses (TRL's ``loss_type``) on group rollouts, no critic.

Each algorithm is the actor-critic agent with three parts (docs/sequences/grpo_family.md):

* group rollouts (``rollout="groups"``): every update resets the envs in groups of
  ``group_size`` with one seed each, so a token task's group shares a prompt
  (:meth:`pgrad.rl.collection.rollout.Collector.collect_groups`), and each env writes one
  completion;
* the targets part :class:`agents.update.targets.GroupTargets`: a completion's reward is its
  episode's, its advantage group-relative (GRPO: ``(R - mean_g R) / std_g R`` as
  ``scale_rewards`` says; RLOO: ``R`` minus the mean of the group's others) on each token;
* the chain :func:`pgrad.transforms.grpo_chain` for ``loss_type`` (``grpo``, ``bnpo``, ``dr_grpo``,
  ``dapo``, ``cispo``, ``gspo``; ``rloo`` for the RLOO agent): a per-token term (the clipped
  ratio with ``epsilon``/``epsilon_high``, or CISPO's weight) and the normaliser that
  aggregates tokens, over ``epochs`` passes (TRL's ``num_iterations``) of the whole batch.

Names and defaults are TRL's ``GRPOConfig`` where they exist (``num_generations`` is
``group_size``; ``loss_type`` defaults to ``"dapo"``; ``beta`` 0), except the learning rate:
TRL's 1e-6 fine-tunes a pretrained model, these policies start from scratch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.catalog.declare import Algorithm
from agents.config import ActorCriticConfig, doc, preset

#: ``loss_type`` values of the grpo agent (:data:`pgrad.transforms.sequence.LOSS_TYPES` but
#: ``rloo``, the RLOO agent's).
GRPO_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "gspo")
SCALES = ("group", "batch", "none")


@dataclass
class GRPOConfig(ActorCriticConfig):
    """GRPO hyperparameters: TRL's GRPOConfig names, on the actor-critic agent's fields."""

    rollout: str = preset("rollout", "groups")
    group_size: int = preset("group_size", 8)
    num_envs: int = preset("num_envs", 64)
    batch_steps: int = preset("batch_steps", 512)
    baseline: bool = preset("baseline", False)
    optimizer: str = preset("optimizer", "adam")
    learning_rate: float = preset("learning_rate", 1e-3)
    max_grad_norm: float = preset("max_grad_norm", 1.0)
    minibatch_size: int = preset("minibatch_size", 0)
    gamma: float = preset("gamma", 1.0)
    loss_type: str = field(default="dapo", metadata=doc(
        "TRL's loss_type: 'grpo', 'bnpo', 'dr_grpo', 'dapo', 'cispo' or 'gspo' (the chain: "
        "docs/sequences/grpo_family.md)"))
    epsilon: float = field(default=0.2, metadata=doc("the ratio's lower clip range"))
    epsilon_high: float = field(default=0.0, metadata=doc(
        "the upper clip range (cispo: epsilon_max); 0 = epsilon (DAPO recommends 0.28)"))
    beta: float = field(default=0.0, metadata=doc(
        "KL coefficient to the reference policy (the starting weights, frozen; k3 estimator "
        "per token); 0 = no reference kept (TRL's default)"))
    sync_ref_model: bool = field(default=False, metadata=doc(
        "with beta > 0: move the reference toward the policy every ref_model_sync_steps "
        "updates (TR-DPO's soft update)"))
    ref_model_mixup_alpha: float = field(default=0.6, metadata=doc(
        "the soft update's alpha: ref <- alpha policy + (1 - alpha) ref"))
    ref_model_sync_steps: int = field(default=512, metadata=doc(
        "updates between soft updates of the reference (TRL counts optimizer steps)"))
    scale_rewards: str = field(default="group", metadata=doc(
        "divide the group-centred rewards by the group's std ('group'), the batch's ('batch') "
        "or not ('none': Dr. GRPO)"))
    importance_sampling_level: str = field(default="", metadata=doc(
        "'token' or 'sequence'; '' = 'sequence' for gspo, else 'token'"))
    supervision: str = field(default="outcome", metadata=doc(
        "'outcome': each completion's group-relative reward on all its tokens; 'process' "
        "(DeepSeekMath's process supervision): each token's reward normalised in its group, "
        "summed from that token on -- for envs that pay as rewards accrue (a token task's "
        "dense_rewards)"))
    process_baseline: str = field(default="steps", metadata=doc(
        "with supervision='process': 'steps' (DeepSeekMath: each token's reward minus the mean "
        "of its group's token rewards, summed from that token on) or 'position' (the rewards-"
        "to-go minus the mean over the group's completions at the same position); gamma "
        "discounts the rewards-to-go (1: to the end; 0: each token's own reward)"))
    max_completion_length: int = field(default=0, metadata=doc(
        "L_max of dr_grpo's constant normaliser (tokens); 0 = unset"))

    def validate(self) -> None:
        super().validate()
        self._validate_family(GRPO_LOSS_TYPES)

    def _validate_family(self, loss_types: tuple[str, ...]) -> None:
        if self.loss_type not in loss_types:
            raise ValueError(f"loss_type must be one of {loss_types}; got {self.loss_type!r}")
        if not 0 < self.epsilon < 1:
            raise ValueError(f"epsilon must be in (0, 1); got {self.epsilon}")
        if not 0 <= self.epsilon_high < 10:
            raise ValueError(f"epsilon_high must be in [0, 10) (0 = epsilon); got "
                             f"{self.epsilon_high}")
        if not 0 <= self.beta < 100:
            raise ValueError(f"beta must be in [0, 100) (0: no KL term); got {self.beta}")
        if not 0 < self.ref_model_mixup_alpha <= 1:
            raise ValueError("ref_model_mixup_alpha must be in (0, 1]; got "
                             f"{self.ref_model_mixup_alpha}")
        if self.sync_ref_model and int(self.ref_model_sync_steps) < 1:
            raise ValueError("sync_ref_model needs ref_model_sync_steps >= 1; got "
                             f"{self.ref_model_sync_steps}")
        if self.scale_rewards not in SCALES:
            raise ValueError(f"scale_rewards must be one of {SCALES}; got "
                             f"{self.scale_rewards!r}")
        if self.importance_sampling_level not in ("", "token", "sequence"):
            raise ValueError("importance_sampling_level must be 'token', 'sequence' or ''; got "
                             f"{self.importance_sampling_level!r}")
        if self.loss_type == "dr_grpo" and int(self.max_completion_length) < 1:
            raise ValueError("loss_type 'dr_grpo' divides by max_completion_length: set it to "
                             "the longest completion in tokens (> 0)")
        if self.supervision not in ("outcome", "process"):
            raise ValueError(f"supervision must be 'outcome' or 'process'; got "
                             f"{self.supervision!r}")
        if self.process_baseline not in ("steps", "position"):
            raise ValueError("process_baseline must be 'steps' or 'position'; got "
                             f"{self.process_baseline!r}")
        if self.supervision != "process" and (self.gamma != 1 or
                                              self.process_baseline != "steps"):
            raise ValueError("gamma and process_baseline discount and centre per-token rewards: "
                             f"they need supervision='process' (got gamma={self.gamma}, "
                             f"process_baseline={self.process_baseline!r} with "
                             f"{self.supervision!r})")
        if self.rollout != "groups":
            raise ValueError(f"the GRPO family needs rollout='groups'; got {self.rollout!r}")
        if self.minibatch_size != 0:
            raise ValueError("the GRPO family updates on whole completions: minibatch_size "
                             f"must be 0 (the whole batch); got {self.minibatch_size}")
        if self.baseline:
            raise ValueError("the GRPO family's baseline is the group's rewards: baseline must "
                             "be false (no critic)")
        if self.normalize_advantage:
            raise ValueError("the GRPO family's advantages are already group-scaled: "
                             "normalize_advantage must be false (scale_rewards says how)")


@dataclass
class RLOOConfig(GRPOConfig):
    """RLOO hyperparameters: TRL's RLOOConfig (leave-one-out baselines, the clipped ratio of
    whole completions)."""

    loss_type: str = field(default="rloo", metadata=doc("'rloo' (RLOOTrainer's loss)"))
    group_size: int = preset("group_size", 4)
    normalize_advantages: bool = field(default=False, metadata=doc(
        "standardise the leave-one-out advantages over the batch (TRL's "
        "normalize_advantages)"))

    def validate(self) -> None:
        ActorCriticConfig.validate(self)
        self._validate_family(("rloo",))
        if self.supervision != "outcome":
            raise ValueError("RLOO's baselines are whole completions': supervision must be "
                             f"'outcome'; got {self.supervision!r}")
        if self.beta != 0:
            raise ValueError("RLOO takes its KL penalty in the rewards, which this agent does "
                             f"not do: beta must be 0; got {self.beta}")
        if self.group_size < 2:
            raise ValueError("RLOO's baseline is the group's other members: group_size must be "
                             f">= 2; got {self.group_size}")


def grpo_chain(cfg: GRPOConfig):
    """:func:`pgrad.transforms.grpo_chain` of the config's ``loss_type`` and clip ranges."""
    from pgrad.transforms import grpo_chain as chain

    return chain(cfg.loss_type, epsilon=cfg.epsilon,
                 epsilon_high=cfg.epsilon_high or None, beta=float(cfg.beta),
                 importance_sampling_level=cfg.importance_sampling_level or None,
                 max_completion_length=int(cfg.max_completion_length) or None)


def group_targets(cfg: GRPOConfig):
    """The targets part: group-relative advantages of whole completions, and with ``beta > 0``
    the reference policy's log-probs (:mod:`agents.update.reference`)."""
    from agents.update.reference import ReferencePolicy, ReferenceTargets
    from agents.update.targets import GroupTargets

    if isinstance(cfg, RLOOConfig):
        return GroupTargets(cfg.group_size, "rloo", normalize=cfg.normalize_advantages)
    part = GroupTargets(cfg.group_size, "grpo", cfg.scale_rewards, supervision=cfg.supervision,
                        gamma=float(cfg.gamma), process_baseline=cfg.process_baseline)
    if cfg.beta == 0:
        return part
    sync = int(cfg.ref_model_sync_steps) if cfg.sync_ref_model else 0
    return ReferenceTargets(part, ReferencePolicy(sync, cfg.ref_model_mixup_alpha))


#: pgrad-tune's space (TRL's knobs that matter on small token tasks).
SEARCH_SPACE = {
    "learning_rate": {"type": "log_float", "low": 1e-4, "high": 3e-3},
    "group_size": {"type": "categorical", "choices": [4, 8, 16]},
    "epsilon_high": {"type": "categorical", "choices": [0.0, 0.28]},
    "epochs": {"type": "categorical", "choices": [1, 2, 4]},
    "d_model": {"type": "categorical", "choices": [32, 64]},
}

ALGORITHMS = (
    Algorithm("grpo", "GRPO", GRPOConfig, chain=grpo_chain, targets=group_targets,
              search_space=SEARCH_SPACE,
              summary="group-relative advantages on group rollouts, TRL's loss_type chains "
                      "(grpo, bnpo, dr_grpo, dapo, cispo, gspo)"),
    Algorithm("rloo", "RLOO", RLOOConfig, chain=grpo_chain, targets=group_targets,
              search_space={k: v for k, v in SEARCH_SPACE.items() if k != "epsilon_high"},
              summary="leave-one-out baselines, the clipped ratio of whole completions "
                      "(TRL's RLOOTrainer)"),
)
