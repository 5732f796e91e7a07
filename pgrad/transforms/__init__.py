"""Transforms: what happens to per-step gradients between the tape and the optimizer.

``GradientTransform(init, update)`` and its per-step-scale subtype, ``chain``, the built-ins,
importance weights, COMA's counterfactual advantage, natural gradient and trust region, the GRPO
family's per-token terms and normalisers, and a registry that rebuilds chains from JSON specs.
"""

from pgrad.transforms.base import (
    EmptyState,
    FusedForm,
    GradientTransform,
    StepScale,
    TransformError,
    context_value,
    empty_init,
    global_norm,
    per_step_scale,
    scale_rows,
)
from pgrad.transforms.builtins import (
    ClipState,
    RatioState,
    RunningStats,
    clip_by_global_norm,
    clip_per_step,
    clip_ratio,
    from_function,
    identity,
    mean_steps,
    scale,
    scale_steps,
    standardized,
    stateless,
    sum_steps,
    weight_by,
    weight_by_running,
)
from pgrad.transforms.chain import Chain, chain, check_outputs, flatten, run_updates, state_metrics
from pgrad.transforms.counterfactual import counterfactual_advantage, counterfactual_advantages
from pgrad.transforms.importance import ImportanceState, importance_weight
from pgrad.transforms.natural import (
    FisherState,
    natural_gradient,
    natural_policy_gradient,
    trust_region,
)
from pgrad.transforms.registry import (
    normalize_spec,
    register_transform,
    registered_transforms,
    transform_from_spec,
)
from pgrad.transforms.sequence import (
    LOSS_TYPES,
    SequenceNormalizer,
    describe,
    grpo_chain,
    mean_over_global_tokens,
    mean_over_sequences,
    mean_over_tokens,
    sequence_loss,
    sequence_normalizer,
    sum_over_max_length,
)
from pgrad.transforms.sequence_terms import (
    TokenTerm,
    add_terms,
    cispo_weight,
    clipped_ratio,
    kl_k3,
    token_term,
)
from pgrad.transforms.state import TransformState

__all__ = [
    "Chain", "ClipState", "EmptyState", "FisherState", "FusedForm", "GradientTransform",
    "ImportanceState", "RatioState", "RunningStats", "StepScale", "TransformError", "chain",
    "check_outputs", "clip_by_global_norm", "clip_per_step", "clip_ratio", "context_value",
    "counterfactual_advantage", "counterfactual_advantages",
    "empty_init", "flatten", "from_function", "global_norm", "identity", "importance_weight",
    "mean_steps", "natural_gradient", "natural_policy_gradient", "normalize_spec", "per_step_scale",
    "register_transform", "registered_transforms", "run_updates", "scale", "scale_rows",
    "scale_steps", "standardized", "state_metrics", "stateless", "sum_steps", "transform_from_spec",
    "TransformState", "trust_region", "weight_by", "weight_by_running",
    # sequences: the GRPO family
    "LOSS_TYPES", "SequenceNormalizer", "TokenTerm", "add_terms", "cispo_weight", "clipped_ratio",
    "describe", "grpo_chain", "kl_k3", "mean_over_global_tokens", "mean_over_sequences",
    "mean_over_tokens", "sequence_loss", "sequence_normalizer", "sum_over_max_length",
    "token_term",
]
