"""pgrad: policy gradients you can see and change.

Per-step log-probability gradients, one composable transform layer over them, Keras optimizers
to apply the result. See README.md.
"""

from pgrad import _quiet  # noqa: F401  (must run before TensorFlow is imported)
from pgrad.adversarial import fgsm, pgd
from pgrad.apply import all_finite, apply_updates
from pgrad.compose import chain, state_metrics
from pgrad.diagnostics import per_step_diagnostics, policy_diagnostics
from pgrad.distributions import ActionHead, make_head
from pgrad.engine import plan, policy_gradients
from pgrad.evaluate import evaluate
from pgrad.gradcheck import GradCheck, check_gradients
from pgrad.keras_model import PerSampleModel, TransformState
from pgrad.natural import FisherState, natural_gradient, trust_region
from pgrad.networks import mlp
from pgrad.ops import (
    ClipGradient,
    ReverseGradient,
    ScaleGradient,
    clip_gradient,
    reverse_gradient,
    scale_gradient,
)
from pgrad.per_step import per_step_grads, per_step_norms
from pgrad.returns import discounted_returns, gae, lambda_returns
from pgrad.transform_specs import register_transform, registered_transforms, transform_from_spec
from pgrad.transforms import (
    ClipState,
    EmptyState,
    GradientTransform,
    RunningStats,
    TransformError,
    clip_by_global_norm,
    clip_per_step,
    global_norm,
    identity,
    mean_steps,
    scale,
    scale_steps,
    stateless,
    sum_steps,
    weight_by,
    weight_by_running,
)

__version__ = "0.1.0"

__all__ = [
    "ClipGradient",
    "GradCheck",
    "PerSampleModel",
    "ReverseGradient",
    "ScaleGradient",
    "TransformState",
    "check_gradients",
    "clip_gradient",
    "register_transform",
    "registered_transforms",
    "reverse_gradient",
    "scale_gradient",
    "transform_from_spec",
    "ActionHead",
    "ClipState",
    "EmptyState",
    "FisherState",
    "GradientTransform",
    "RunningStats",
    "TransformError",
    "all_finite",
    "apply_updates",
    "chain",
    "clip_by_global_norm",
    "clip_per_step",
    "discounted_returns",
    "fgsm",
    "evaluate",
    "gae",
    "global_norm",
    "identity",
    "lambda_returns",
    "make_head",
    "mean_steps",
    "mlp",
    "natural_gradient",
    "per_step_diagnostics",
    "per_step_grads",
    "per_step_norms",
    "pgd",
    "plan",
    "policy_diagnostics",
    "policy_gradients",
    "scale",
    "scale_steps",
    "state_metrics",
    "stateless",
    "sum_steps",
    "trust_region",
    "weight_by",
    "weight_by_running",
]
