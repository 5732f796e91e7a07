"""The TRL fixtures of ``scripts/grpo_vs_trl.py`` and pgrad's side of the comparison (shared by
tests/transforms/test_grpo_vs_trl.py and tests/transforms/test_sequence_docs.py)."""

import json
from pathlib import Path

import numpy as np
import tensorflow as tf

from pgrad import engine
from pgrad.rl.advantages.groups import group_advantages, rloo_advantages, token_context
from pgrad.transforms import grpo_chain, sequence_loss

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "grpo_trl"
TOLERANCE = 1e-5


def load(name):
    """``(arrays, meta)`` of ``tests/fixtures/grpo_trl/<name>.npz``."""
    fx = dict(np.load(FIXTURES / f"{name}.npz"))
    return fx, json.loads(str(fx["meta"]))


def chain_of(meta):
    """The built-in chain of a fixture's TRL configuration."""
    cfg = meta["config"]
    sequence = cfg["importance_sampling_level"] == "sequence"
    kind = "gspo" if sequence and cfg["loss_type"] == "grpo" else cfg["loss_type"]
    return grpo_chain(kind, epsilon=cfg["epsilon"], epsilon_high=cfg["epsilon_high"],
                      beta=cfg["beta"], delta=cfg["delta"],
                      importance_sampling_level=cfg["importance_sampling_level"],
                      use_bias_correction_kl=cfg["use_bias_correction_kl"],
                      max_completion_length=cfg["max_completion_length"])


def pgrad_loss_and_grad(fx, meta, path="auto", transform=None):
    """pgrad's loss, d loss / d logits ``[N, L, V]`` and advantages ``[N]`` for a fixture's
    inputs, with ``transform`` (default: :func:`chain_of` its configuration)."""
    cfg = meta["config"]
    transform = transform or chain_of(meta)
    n, length, vocab = fx["logits"].shape
    logits = tf.Variable(fx["logits"].reshape(-1, vocab))  # [N*L, V], one row per token
    rows, ids = tf.range(n * length), tf.constant(fx["completion_ids"].reshape(-1))

    def log_prob_fn(r, a):  # [T], [T] -> [T]
        rows_logits = tf.gather(tf.convert_to_tensor(logits), r)  # [T, V]
        return tf.reduce_sum(tf.nn.log_softmax(rows_logits) * tf.one_hot(a, vocab), -1)

    if cfg["loss_type"] == "rloo":  # RLOOTrainer's leave-one-out advantages
        adv = rloo_advantages(fx["rewards"], meta["group_size"], cfg["normalize_advantages"])
    else:
        adv = group_advantages(fx["rewards"], meta["group_size"], cfg["scale_rewards"])
    old = fx["old_log_probs"]
    if meta["on_policy"]:  # TRL's first iteration: the old log-probs are the current ones
        old = tf.reshape(log_prob_fn(rows, ids), (n, length))
    ctx = token_context(fx["completion_mask"], adv, behaviour_log_probs=old,
                        ref_log_probs=fx["ref_log_probs"])
    ctx["num_items_in_batch"] = fx["num_items_in_batch"]
    out = engine.run(transform, transform.init([logits]), log_prob_fn, [logits], (rows, ids), ctx,
                     path=path)
    loss = sequence_loss(transform, **{**ctx, "log_probs": out.log_probs})
    return float(loss), -out.grads[0].numpy().reshape(n, length, vocab), adv.numpy()


def relative_errors(fx, loss, grad):
    """``(|dL| / |L|, max|dg| / max|g|)`` against TRL's numbers in the fixture."""
    want_loss, want_grad = float(fx["trl_loss"]), fx["trl_grad_logits"]
    return (abs(loss - want_loss) / abs(want_loss),
            float(np.abs(grad - want_grad).max() / np.abs(want_grad).max()))
