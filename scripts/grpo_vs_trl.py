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

The parts: ``scripts/grpo_trl_cases.py`` (the cases and their inputs, numpy only),
``scripts/grpo_trl_reference.py`` (TRL's side and ``write``) and this file (pgrad's side,
``compare`` and the command line).

Fixtures in the repository were written with Python 3.11.7, torch 2.13.0+cpu, trl 1.16.0,
transformers 5.23.0, accelerate 1.16.0, numpy 2 (``write`` records the versions in each file).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
from grpo_trl_reference import write

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "grpo_trl"


def pgrad_loss_and_grad(fixture, path: str = "auto") -> tuple[float, np.ndarray, np.ndarray]:
    """pgrad's loss, gradient of the loss w.r.t. the logits, and group advantages (a fixture)."""
    import tensorflow as tf

    import pgrad
    from pgrad.rl.advantages.groups import group_advantages, rloo_advantages, token_context
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
