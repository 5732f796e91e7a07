"""pgrad: policy gradients you can see and change.

Per-step log-probability gradients, one composable transform layer over them, Keras optimizers
to apply the result. See README.md and docs/architecture.md.

Layers, bottom to top (each imports only the ones below it; ``pgrad`` never imports ``agents``):
``pgrad.core`` -> ``pgrad.transforms`` -> ``pgrad.engine`` -> ``pgrad.tools`` -> ``pgrad.rl``.
Importing pgrad changes nothing global: no environment variables, warning filters or patched
classes. It imports TensorFlow first, without TensorFlow's start-up lines on stderr
(``pgrad._quiet_tf``; ``PGRAD_TF_LOGS=1`` shows them; the commands: ``pgrad_app.quiet``).
"""

import importlib

import pgrad._quiet_tf  # noqa: F401  (first: TensorFlow loads there, its start-up lines filtered)
from pgrad.core.apply import all_finite, apply_updates
from pgrad.core.per_step import per_step_grads, per_step_norms
from pgrad.engine import EngineOutput, plan, policy_gradients
from pgrad.engine import run as run_engine
from pgrad.rl.advantages.returns import (
    VTraceReturns,
    discounted_returns,
    gae,
    lambda_returns,
    vtrace,
)
from pgrad.rl.distributions import ActionHead, make_head
from pgrad.rl.models.networks import mlp
from pgrad.tools.adversarial import fgsm, pgd
from pgrad.tools.diagnostics import per_step_diagnostics, policy_diagnostics
from pgrad.tools.gradcheck import GradCheck, check_gradients
from pgrad.tools.ops import (
    ClipGradient,
    ReverseGradient,
    ScaleGradient,
    clip_gradient,
    reverse_gradient,
    scale_gradient,
)
from pgrad.transforms import (
    ClipState,
    EmptyState,
    FisherState,
    GradientTransform,
    ImportanceState,
    RatioState,
    RunningStats,
    StepScale,
    TransformError,
    TransformState,
    chain,
    clip_by_global_norm,
    clip_per_step,
    clip_ratio,
    from_function,
    global_norm,
    identity,
    importance_weight,
    mean_steps,
    natural_gradient,
    per_step_scale,
    register_transform,
    registered_transforms,
    scale,
    scale_steps,
    state_metrics,
    stateless,
    sum_steps,
    transform_from_spec,
    trust_region,
    weight_by,
    weight_by_running,
)

__version__ = "0.2.0"

# Imported on first use: PerSampleModel needs private Keras modules, evaluate needs gymnasium's
# env machinery; neither should load (or fail) when a user only wants per-step gradients.
_LAZY = {
    "PerSampleModel": "pgrad.tools.keras_model",
    "evaluate": "pgrad.rl.evaluation.evaluate_policy",
}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'pgrad' has no attribute {name!r}")


__all__ = [
    "ActionHead", "ClipGradient", "ClipState", "EmptyState", "EngineOutput", "FisherState",
    "GradCheck", "GradientTransform", "ImportanceState", "PerSampleModel", "RatioState",
    "ReverseGradient", "RunningStats", "ScaleGradient", "StepScale", "TransformError",
    "TransformState", "all_finite", "apply_updates", "chain", "check_gradients",
    "clip_by_global_norm", "clip_gradient", "clip_per_step", "clip_ratio", "discounted_returns",
    "evaluate", "fgsm", "from_function", "gae", "global_norm", "identity", "importance_weight",
    "lambda_returns", "make_head", "mean_steps", "mlp", "natural_gradient", "per_step_diagnostics",
    "per_step_grads", "per_step_norms", "per_step_scale", "pgd", "plan", "policy_diagnostics",
    "policy_gradients", "register_transform", "registered_transforms", "reverse_gradient",
    "run_engine", "scale", "scale_gradient", "scale_steps", "state_metrics", "stateless",
    "sum_steps", "transform_from_spec", "trust_region", "VTraceReturns", "vtrace", "weight_by",
    "weight_by_running",
]
