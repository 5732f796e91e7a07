"""Evaluation: N episodes of a policy (an agent, a policy or an export) side by side, mean and
std of return and length, success rates, optionally under observation attacks.
"""
from __future__ import annotations

from pgrad.rl._lazy import lazy_getattr

#: The public names of this room, by the module that defines them (imported on first use).
_HOME = {
    "evaluate": "pgrad.rl.evaluation.evaluate_policy",
    "eval_seed": "pgrad.rl.evaluation.evaluate_policy",
    "EVAL_SEED_OFFSET": "pgrad.rl.evaluation.evaluate_policy",
    "MAX_EPISODES": "pgrad.rl.evaluation.evaluate_policy",
    "ATTACKS": "pgrad.rl.evaluation.attacks",
}

__all__ = sorted(_HOME)

__getattr__ = lazy_getattr(__name__, _HOME)
