"""TRL's side of ``scripts/grpo_vs_trl.py`` (needs ``torch`` and ``trl``): TRL's own loss,
logit gradient and advantages on the inputs of :mod:`grpo_trl_cases`, written as fixtures.

:func:`trl_loss` runs ``GRPOTrainer._compute_loss`` (``RLOOTrainer``'s for ``rloo``) bound to a
trainer object that carries only the attributes the loss reads, set from a real ``GRPOConfig``
as ``GRPOTrainer.__init__`` sets them; its log-probabilities come from TRL's own fused LM-head
kernel (``ChunkedLogProbFunction`` with an identity head, so the kernel's input is the logits),
and ``torch.autograd`` differentiates it with respect to the logits. :func:`trl_advantages` and
:func:`trl_rloo_advantages` are the lines of the trainers' generation loops that compute the
advantages. :func:`write` saves each case to ``<dir>/<case>.npz`` with its configuration.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np
from grpo_trl_cases import CASES, CONFIG_KEYS, PROMPT, G, L, V, config_of, make_inputs


def trl_advantages(rewards, group_size: int, scale_rewards: str):
    """``GRPOTrainer._generate_and_score_completions``' advantage lines (sum_then_normalize)."""
    import torch
    from trl.trainer.utils import nanstd

    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    mean_grouped = torch.nanmean(rewards.view(-1, group_size), dim=1)
    mean_grouped = mean_grouped.repeat_interleave(group_size, dim=0)
    if scale_rewards in ("group", "none"):
        std = nanstd(rewards.view(-1, group_size), dim=1).repeat_interleave(group_size, dim=0)
    else:
        std = nanstd(rewards).expand_as(rewards)
    adv = rewards - mean_grouped
    if scale_rewards != "none":
        adv = adv / (std + 1e-4)
    return torch.nan_to_num(adv, nan=0.0).numpy()


def trl_rloo_advantages(rewards, group_size: int, normalize: bool):
    """``RLOOTrainer._generate_and_score_completions``' leave-one-out lines."""
    import torch
    from trl.trainer.utils import nanstd

    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    grouped = rewards.view(-1, group_size)
    counts = (~torch.isnan(grouped)).sum(dim=1, keepdim=True)
    total = torch.nansum(grouped, dim=1, keepdim=True)
    adv = rewards - ((total - grouped) / (counts - 1)).view(-1)
    if normalize:
        adv = (adv - torch.nanmean(adv)) / (nanstd(adv) + 1e-4)
    return torch.nan_to_num(adv, nan=0.0).numpy()


def identity_head_model(logits):
    """What ``add_fused_lm_head`` makes of a causal LM (its CPU branch), with the backbone's last
    hidden states being the given logits ``[N, L, V]`` and an identity LM head."""
    import torch
    from trl.kernels import ChunkedLogProbFunction
    from trl.trainer.utils import FusedCausalLMOutput

    n = logits.shape[0]

    class IdentityHeadModel(torch.nn.Module):
        def forward(self, input_ids, attention_mask, labels, fused_lm_head, **kwargs):
            assert fused_lm_head
            hidden = torch.zeros(n, input_ids.shape[1], V)
            hidden = torch.cat([hidden[:, : PROMPT - 1], logits, hidden[:, PROMPT - 1 + L:]], 1)
            hidden, labels = hidden[:, :-1], labels[:, 1:]
            mask = labels != -100
            per_token = ChunkedLogProbFunction.apply(
                hidden.reshape(-1, V), torch.eye(V), None, labels.clamp(min=0).reshape(-1), 1.0,
                32768, None, 1.0, ("log_probs", "entropy"))
            log_probs, entropy = (x.view(mask.shape).masked_fill(~mask, 0) for x in per_token[:2])
            return FusedCausalLMOutput(log_probs=log_probs, entropy=entropy)

    return IdentityHeadModel()


def _prompt_and_completions(inputs, n):
    import torch

    return {
        "prompt_ids": torch.zeros(n, PROMPT, dtype=torch.long),
        "prompt_mask": torch.ones(n, PROMPT, dtype=torch.long),
        "completion_ids": torch.tensor(inputs["completion_ids"]).long(),
        "completion_mask": torch.tensor(inputs["completion_mask"]).long(),
    }


def trl_rloo_loss(cfg: dict, inputs: dict, logits, model):
    """``RLOOTrainer._compute_loss`` on the inputs (the sequence-level clipped ratio)."""
    import torch
    from accelerate import Accelerator
    from trl import RLOOConfig, RLOOTrainer

    n = logits.shape[0]
    with tempfile.TemporaryDirectory() as tmp:
        args = RLOOConfig(output_dir=tmp, report_to="none", use_cpu=True, num_generations=G,
                          per_device_train_batch_size=n, epsilon=cfg["epsilon"],
                          epsilon_high=cfg["epsilon_high"],
                          normalize_advantages=cfg["normalize_advantages"])
    trainer = RLOOTrainer.__new__(RLOOTrainer)
    trainer.args, trainer.model, trainer.accelerator = args, model, Accelerator(cpu=True)
    trainer.epsilon_low = args.epsilon
    trainer.epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon
    trainer.aux_loss_enabled = False
    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    adv = trl_rloo_advantages(inputs["rewards"], G, args.normalize_advantages)
    mask = inputs["completion_mask"]
    batch = {**_prompt_and_completions(inputs, n), "advantages": torch.tensor(adv),
             "old_logps": torch.tensor((inputs["old_log_probs"] * mask).sum(1))}
    loss = RLOOTrainer._compute_loss(trainer, model, batch)
    loss.backward()
    clipped = trainer._metrics["train"]["clip_ratio/region_mean"][0]
    return (float(loss.detach()), logits.grad.numpy().astype(np.float32), adv.astype(np.float32),
            float(clipped))


def trl_loss(case: dict, inputs: dict) -> tuple[float, np.ndarray, np.ndarray, float]:
    """TRL's loss, its gradient w.r.t. the logits, the advantages it used, the clipped fraction."""
    import torch
    from accelerate import Accelerator
    from trl import GRPOConfig, GRPOTrainer

    cfg = config_of(case)
    logits = torch.tensor(inputs["logits"], requires_grad=True)  # [N, L, V]
    n = logits.shape[0]
    model = identity_head_model(logits).train()
    if cfg["loss_type"] == "rloo":
        return trl_rloo_loss(cfg, inputs, logits, model)

    with tempfile.TemporaryDirectory() as tmp:
        args = GRPOConfig(
            output_dir=tmp, report_to="none", use_cpu=True, num_generations=G,
            per_device_train_batch_size=n, gradient_accumulation_steps=1, steps_per_generation=1,
            **{k: cfg[k] for k in CONFIG_KEYS
               if k not in ("max_completion_length", "normalize_advantages")},
            max_completion_length=cfg["max_completion_length"])
    trainer = GRPOTrainer.__new__(GRPOTrainer)
    # The attributes GRPOTrainer.__init__ sets from the config and _compute_loss reads.
    trainer.args, trainer.model, trainer.accelerator = args, model, Accelerator(cpu=True)
    trainer.loss_type, trainer.beta = args.loss_type, args.beta
    trainer.importance_sampling_level = args.importance_sampling_level
    trainer.epsilon_low = args.epsilon
    trainer.epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon
    trainer.max_completion_length = args.max_completion_length
    trainer.top_entropy_quantile = args.top_entropy_quantile
    trainer.off_policy_mask_threshold = args.off_policy_mask_threshold
    trainer.use_vllm = args.use_vllm
    trainer.vllm_importance_sampling_correction = args.vllm_importance_sampling_correction
    trainer.aux_loss_enabled, trainer._entropy_bonus_enabled = False, False
    trainer.current_gradient_accumulation_steps = 1
    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}

    adv = trl_advantages(inputs["rewards"], G, args.scale_rewards)
    batch = {
        **_prompt_and_completions(inputs, n),
        "advantages": torch.tensor(adv),
        "ref_per_token_logps": torch.tensor(inputs["ref_log_probs"]),
        "num_items_in_batch": torch.tensor(float(inputs["num_items_in_batch"])),
    }
    if not case.get("on_policy"):
        batch["old_per_token_logps"] = torch.tensor(inputs["old_log_probs"])
    loss = GRPOTrainer._compute_loss(trainer, model, batch)
    loss.backward()
    clipped = trainer._metrics["train"].get("clip_ratio/region_mean") or \
        trainer._metrics["train"].get("cispo_clip_ratio") or [float("nan")]
    return (float(loss.detach()), logits.grad.numpy().astype(np.float32), adv.astype(np.float32),
            float(clipped[0]))


def write(out: Path) -> None:
    import accelerate
    import torch
    import transformers
    import trl

    versions = {"python": sys.version.split()[0], "torch": torch.__version__,
                "trl": trl.__version__, "transformers": transformers.__version__,
                "accelerate": accelerate.__version__, "numpy": np.__version__}
    out.mkdir(parents=True, exist_ok=True)
    for name, case in CASES.items():
        inputs = make_inputs(name, case)
        loss, grad, adv, clipped = trl_loss(case, inputs)
        meta = {"case": name, "config": config_of(case), "group_size": G,
                "on_policy": bool(case.get("on_policy")), "trl_clipped_fraction": clipped,
                "versions": versions}
        np.savez_compressed(out / f"{name}.npz", **inputs, advantages=adv,
                            trl_loss=np.float64(loss), trl_grad_logits=grad,
                            meta=np.array(json.dumps(meta)))
        print(f"{name:<20} TRL loss {loss:+.6f}  max|grad| {np.abs(grad).max():.4f}  "
              f"clipped {clipped:.3f}")
    # Advantages alone: a NaN (unscorable) reward, ties, and every scaling mode.
    rewards = np.array([1.0, 0.0, 0.5, 2.0, 2.0, 2.0, 0.3, np.nan, 1.3, 0.2, -1.0, 0.7],
                       np.float32)
    table = {f"grpo_{m}": trl_advantages(rewards, G, m) for m in ("group", "batch", "none")}
    table.update({f"rloo_normalize_{b}": trl_rloo_advantages(rewards, G, b)
                  for b in (False, True)})
    np.savez_compressed(out / "advantages.npz", rewards=rewards, group_size=np.int32(G),
                        versions=np.array(json.dumps(versions)), **table)
    print(f"wrote {len(CASES) + 1} files to {out}")
