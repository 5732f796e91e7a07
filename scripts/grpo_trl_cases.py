"""The cases of ``scripts/grpo_vs_trl.py`` and their inputs (numpy only): TRL configurations
(:data:`CASES`, filled in by :func:`config_of`) and, for each, logits ``[N, L, V]``, completion
ids and mask ``[N, L]``, rewards ``[N]`` in groups of ``G``, old and reference log-probs
``[N, L]`` (:func:`make_inputs`), drawn so that no importance ratio sits on a clip boundary.
"""

from __future__ import annotations

import numpy as np

N_GROUPS, G, L, V, PROMPT = 2, 3, 5, 7, 2
#: Ratios this close (relative) to a clip boundary would make float32 and float64 disagree on
#: which branch is active; the inputs are redrawn until none is.
MARGIN = 1e-3

# name: GRPOConfig arguments (+ "on_policy": old log-probs are the current ones,
# "num_items_scale": num_items_in_batch as a multiple of this batch's tokens).
CASES: dict[str, dict] = {
    "bnpo_on_policy": dict(loss_type="bnpo", beta=0.0, on_policy=True),
    "grpo": dict(loss_type="grpo", epsilon=0.2, epsilon_high=0.28, beta=0.04),
    "grpo_delta": dict(loss_type="grpo", epsilon=0.2, epsilon_high=0.28, delta=1.25, beta=0.0),
    "grpo_kl_uncorrected": dict(loss_type="grpo", beta=0.1, use_bias_correction_kl=False),
    "bnpo": dict(loss_type="bnpo", epsilon=0.2, epsilon_high=0.28, beta=0.04,
                 scale_rewards="batch"),
    "dr_grpo": dict(loss_type="dr_grpo", epsilon=0.2, epsilon_high=0.28, beta=0.04,
                    scale_rewards="none", max_completion_length=8),
    "dapo": dict(loss_type="dapo", epsilon=0.2, epsilon_high=0.28, beta=0.04,
                 num_items_scale=2.0),
    "dapo_local": dict(loss_type="dapo", epsilon=0.2, epsilon_high=0.28, beta=0.0),
    "cispo": dict(loss_type="cispo", epsilon_high=1.1, beta=0.04, num_items_scale=1.5),
    "gspo": dict(loss_type="grpo", importance_sampling_level="sequence", epsilon=0.05,
                 epsilon_high=0.08, beta=0.04),
    "gspo_paper_eps": dict(loss_type="grpo", importance_sampling_level="sequence",
                           epsilon=3e-4, epsilon_high=4e-4, beta=0.0),
    "gspo_bnpo": dict(loss_type="bnpo", importance_sampling_level="sequence", epsilon=0.05,
                      epsilon_high=0.08, beta=0.04),
    # TRL's SAPO: not a pgrad built-in, the example of docs/sequences/write_your_own_variant.md.
    "sapo": dict(loss_type="sapo", beta=0.04),
    # RLOOTrainer's loss (its KL penalty goes into the rewards, outside the loss).
    "rloo": dict(loss_type="rloo", epsilon=0.2, epsilon_high=0.28, normalize_advantages=True),
}
CONFIG_KEYS = ("loss_type", "epsilon", "epsilon_high", "beta", "delta", "scale_rewards",
               "importance_sampling_level", "use_bias_correction_kl", "max_completion_length",
               "normalize_advantages")


def config_of(case: dict) -> dict:
    """The case's GRPOConfig values, TRL's defaults filled in (``loss_type`` as given)."""
    out = dict(epsilon=0.2, epsilon_high=None, beta=0.0, delta=None, scale_rewards="group",
               importance_sampling_level="token", use_bias_correction_kl=True,
               max_completion_length=L, normalize_advantages=False)
    if case["loss_type"] == "rloo":
        out.update(beta=0.0, importance_sampling_level="sequence_sum")
    out.update({k: v for k, v in case.items() if k in CONFIG_KEYS})
    return out



def _log_softmax(logits: np.ndarray, ids: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64)
    z = z - z.max(-1, keepdims=True)
    lse = np.log(np.exp(z).sum(-1))
    return np.take_along_axis(z, ids[..., None], -1)[..., 0] - lse  # [N, L]


def _ratios_safe(cfg: dict, lp, old, mask) -> bool:
    """No ratio (of the case's level) within MARGIN of a threshold the loss compares it with."""
    lr = (lp - old) * mask
    if cfg["importance_sampling_level"] == "sequence":
        x = lr.sum(1) / np.maximum(mask.sum(1), 1.0)
    elif cfg["importance_sampling_level"] == "sequence_sum":
        x = lr.sum(1)
    else:
        x = lr[mask > 0]
    ratio = np.exp(x)
    high = cfg["epsilon_high"] if cfg["epsilon_high"] is not None else cfg["epsilon"]
    bounds = [high] if cfg["loss_type"] == "cispo" else [1 - cfg["epsilon"], 1 + high]
    if cfg["delta"] is not None:
        bounds.append(cfg["delta"])
    return all(np.min(np.abs(ratio / b - 1.0)) > MARGIN for b in bounds)


def make_inputs(name: str, case: dict) -> dict[str, np.ndarray]:
    """Inputs for one case, seeded by its name, redrawn until no ratio sits on a boundary."""
    cfg = config_of(case)
    n = N_GROUPS * G
    seed = sum(map(ord, name))
    for attempt in range(200):
        rng = np.random.default_rng(seed + 1000 * attempt)
        logits = rng.normal(0.0, 1.5, size=(n, L, V)).astype(np.float32)
        ids = rng.integers(0, V, size=(n, L))
        lengths = rng.integers(2, L + 1, size=n)
        lengths[0] = L
        mask = (np.arange(L)[None, :] < lengths[:, None]).astype(np.float32)
        rewards = rng.normal(size=n).round(1).astype(np.float32)
        lp = _log_softmax(logits, ids)
        old = np.where(mask > 0, lp + rng.normal(0.0, 0.25, size=lp.shape), 0.0)
        if case.get("on_policy"):
            old = lp
        ref = np.where(mask > 0, lp + rng.normal(0.0, 0.3, size=lp.shape), 0.0)
        old, ref = old.astype(np.float32), ref.astype(np.float32)
        if case.get("on_policy") or _ratios_safe(cfg, lp, old.astype(np.float64), mask):
            break
    else:
        raise RuntimeError(f"{name}: no draw kept the ratios off the clip boundaries.")
    tokens = float(mask.sum())
    return dict(logits=logits, completion_ids=ids.astype(np.int32), completion_mask=mask,
                rewards=rewards, old_log_probs=old, ref_log_probs=ref,
                num_items_in_batch=np.float32(tokens * case.get("num_items_scale", 1.0)))
