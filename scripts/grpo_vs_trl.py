#!/usr/bin/env python
"""TRL's ``GRPOTrainer`` loss against pgrad's GRPO-family chains: fixtures and relative errors.

``write`` (needs ``torch`` and ``trl``) builds small inputs -- logits ``[N, L, V]``, completion
ids and mask ``[N, L]``, rewards ``[N]`` in groups of ``G``, old and reference log-probs -- and
runs TRL's own code on them: ``GRPOTrainer._compute_loss`` (bound to a trainer object that
carries only the attributes the loss reads, set from a real ``GRPOConfig`` as
``GRPOTrainer.__init__`` sets them), whose log-probabilities come from TRL's own
``_get_per_token_logps_and_entropies`` and its fused LM-head kernel (``ChunkedLogProbFunction``
with an identity head, so the kernel's input is the logits); the loss is differentiated with
respect to the logits by ``torch.autograd``. The advantages are the lines of
``GRPOTrainer._generate_and_score_completions`` and ``RLOOTrainer`` that compute them (they sit
inside the generation loop), with TRL's ``nanstd``. Each case goes to
``tests/fixtures/grpo_trl/<case>.npz`` with its configuration.

``compare`` (needs pgrad) computes pgrad's loss (``sequence_loss``) and its logit gradient
(the engine running ``grpo_chain``, fused and materialised paths) from the same inputs and
prints the relative errors: ``|dL| / |L|`` and ``max|dg| / max|g|``.

Run (torch and trl in a separate venv, so the project's ``.venv`` stays as it is)::

    python3 -m venv /work/venv-trl
    /work/venv-trl/bin/pip install torch==2.13.0        # the CPU wheel
    /work/venv-trl/bin/pip install trl==1.16.0 transformers==5.23.0
    /work/venv-trl/bin/python scripts/grpo_vs_trl.py write
    .venv/bin/python scripts/grpo_vs_trl.py compare

Fixtures in the repository were written with Python 3.11.7, torch 2.13.0+cpu, trl 1.16.0,
transformers 5.23.0, accelerate 1.16.0, numpy 2 (``write`` records the versions in each file).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "grpo_trl"
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


# ---------------------------------------------------------------------------------------------
# Inputs (numpy only).
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# TRL's side (torch).
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# pgrad's side (TensorFlow).
# ---------------------------------------------------------------------------------------------


def pgrad_loss_and_grad(fixture, path: str = "auto") -> tuple[float, np.ndarray, np.ndarray]:
    """pgrad's loss, gradient of the loss w.r.t. the logits, and group advantages (a fixture)."""
    import tensorflow as tf

    import pgrad
    from pgrad.rl.group_advantages import group_advantages, rloo_advantages, token_context
    from pgrad.transforms.sequence import grpo_chain, sequence_loss

    meta = json.loads(str(fixture["meta"]))
    cfg = meta["config"]
    kind = "gspo" if cfg["importance_sampling_level"] == "sequence" and cfg["loss_type"] == \
        "grpo" else cfg["loss_type"]
    transform = grpo_chain(
        kind, epsilon=cfg["epsilon"], epsilon_high=cfg["epsilon_high"], beta=cfg["beta"],
        importance_sampling_level=cfg["importance_sampling_level"], delta=cfg["delta"],
        use_bias_correction_kl=cfg["use_bias_correction_kl"],
        max_completion_length=cfg["max_completion_length"])
    shape = fixture["logits"].shape  # [N, L, V]
    logits = tf.Variable(fixture["logits"].reshape(-1, shape[-1]))  # [N*L, V]
    rows = tf.range(shape[0] * shape[1])  # [N*L] each row's own logits
    ids = tf.reshape(tf.constant(fixture["completion_ids"]), [-1])  # [N*L]

    def log_prob_fn(rows, ids):  # [T], [T] -> [T] log pi of each token (row t from row t)
        rows_logits = tf.gather(tf.convert_to_tensor(logits), rows)  # [T, V]
        return tf.reduce_sum(tf.nn.log_softmax(rows_logits) * tf.one_hot(ids, shape[-1]), -1)

    if cfg["loss_type"] == "rloo":
        adv = rloo_advantages(fixture["rewards"], meta["group_size"], cfg["normalize_advantages"])
    else:
        adv = group_advantages(fixture["rewards"], meta["group_size"], cfg["scale_rewards"])
    current = log_prob_fn(rows, ids)
    old = tf.reshape(current, shape[:2]) if meta["on_policy"] \
        else fixture["old_log_probs"]
    ctx = token_context(fixture["completion_mask"], adv, behaviour_log_probs=old,
                        ref_log_probs=fixture["ref_log_probs"])
    ctx["num_items_in_batch"] = tf.constant(fixture["num_items_in_batch"])
    out = pgrad.engine.run(transform, transform.init([logits]), log_prob_fn, [logits], (rows, ids),
                           ctx, path=path)
    loss = sequence_loss(transform, **{**ctx, "log_probs": out.log_probs})
    grad = -out.grads[0].numpy().reshape(shape)  # ascent -> the loss's gradient
    return float(loss), grad, adv.numpy()  # ascent -> the loss's gradient


def relative_errors(fixture, path: str = "auto") -> tuple[float, float, float]:
    """``(|dL| / |L|, max|dg| / max|g|, max|dA| / max|A|)`` of pgrad against TRL."""
    loss, grad, adv = pgrad_loss_and_grad(fixture, path)
    want_g, want_a = fixture["trl_grad_logits"], fixture["advantages"]
    return (abs(loss - float(fixture["trl_loss"])) / abs(float(fixture["trl_loss"])),
            float(np.abs(grad - want_g).max() / np.abs(want_g).max()),
            float(np.abs(adv - want_a).max() / np.abs(want_a).max()))


def compare(directory: Path) -> int:
    """Prints pgrad's errors for every built-in loss type (the ``sapo`` fixture checks the
    variant built in docs/sequences/write_your_own_variant.md: its test prints nothing here)."""
    files = sorted(p for p in directory.glob("*.npz") if p.stem not in ("advantages", "sapo"))
    if not files:
        print(f"no fixtures in {directory}; run `write` first")
        return 1
    worst = 0.0
    print(f"{'case':<20} {'loss rel':>10} {'grad rel':>10} {'grad rel':>10} {'adv rel':>10}")
    print(f"{'':<20} {'':>10} {'(fused)':>10} {'(full)':>10} {'':>10}")
    for p in files:
        fx = dict(np.load(p))
        loss_err, grad_err, adv_err = relative_errors(fx, "fused")
        _, grad_full, _ = relative_errors(fx, "full")
        worst = max(worst, loss_err, grad_err, grad_full, adv_err)
        print(f"{p.stem:<20} {loss_err:10.2e} {grad_err:10.2e} {grad_full:10.2e} {adv_err:10.2e}")
    print(f"worst relative error {worst:.2e} ({'within' if worst <= 1e-5 else 'OVER'} 1e-5)")
    return 0 if worst <= 1e-5 and not math.isnan(worst) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["write", "compare"])
    parser.add_argument("--dir", type=Path, default=FIXTURES, help="fixture directory")
    args = parser.parse_args(argv)
    if args.command == "write":
        write(args.dir)
        return 0
    sys.path.insert(0, str(ROOT))  # this checkout's pgrad
    return compare(args.dir)


if __name__ == "__main__":
    sys.exit(main())
