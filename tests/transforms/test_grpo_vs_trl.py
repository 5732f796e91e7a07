"""pgrad's GRPO-family chains against TRL 1.16's ``GRPOTrainer`` (and ``RLOOTrainer``) loss.

``scripts/grpo_vs_trl.py write`` ran TRL's own ``_compute_loss`` (and its advantage lines) on
the inputs stored beside its outputs in ``tests/fixtures/grpo_trl/``; these tests need no torch.
For every loss type, pgrad's loss and its gradient with respect to the logits match TRL's to
1e-5 relative, on the engine's fused and materialised paths.
"""

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from pgrad import engine
from pgrad.rl.group_advantages import group_advantages, rloo_advantages, token_context
from pgrad.transforms import grpo_chain, sequence_loss

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "grpo_trl"
CASES = sorted(p.stem for p in FIXTURES.glob("*.npz") if p.stem != "advantages")
TOLERANCE = 1e-5


def load(name):
    fx = dict(np.load(FIXTURES / f"{name}.npz"))
    return fx, json.loads(str(fx["meta"]))


def pgrad_loss_and_grad(fx, meta, path):
    """pgrad's loss and d loss / d logits ``[N, L, V]`` for a fixture's inputs."""
    cfg = meta["config"]
    sequence = cfg["importance_sampling_level"] == "sequence"
    kind = "gspo" if sequence and cfg["loss_type"] == "grpo" else cfg["loss_type"]
    transform = grpo_chain(kind, epsilon=cfg["epsilon"], epsilon_high=cfg["epsilon_high"],
                           beta=cfg["beta"], delta=cfg["delta"],
                           importance_sampling_level=cfg["importance_sampling_level"],
                           use_bias_correction_kl=cfg["use_bias_correction_kl"],
                           max_completion_length=cfg["max_completion_length"])
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


def test_every_loss_type_has_fixtures():
    kinds = set()
    for name in CASES:
        cfg = load(name)[1]["config"]
        seq = cfg["importance_sampling_level"] == "sequence"
        kinds.add("gspo" if seq and cfg["loss_type"] == "grpo" else cfg["loss_type"])
    assert kinds == {"grpo", "bnpo", "dr_grpo", "dapo", "cispo", "gspo", "rloo"}


@pytest.mark.parametrize("name", CASES)
def test_the_fixture_exercises_what_it_claims(name):
    fx, meta = load(name)
    assert meta["versions"]["trl"] == "1.16.0"
    mask = fx["completion_mask"]
    assert 0 < mask.sum() < mask.size  # padding present
    if meta["on_policy"]:
        return
    lp = np.log(np.exp(fx["logits"].astype(np.float64)) / np.exp(
        fx["logits"].astype(np.float64)).sum(-1, keepdims=True))
    lp = np.take_along_axis(lp, fx["completion_ids"][..., None], -1)[..., 0]
    assert np.abs((lp - fx["old_log_probs"]) * mask).max() > 0.1  # several iterations: off-policy
    assert 0.0 < meta["trl_clipped_fraction"] < 1.0  # both branches of the clip


@pytest.mark.parametrize("path", ["fused", "full"])
@pytest.mark.parametrize("name", CASES)
def test_loss_and_logit_gradient_match_trl(name, path):
    fx, meta = load(name)
    loss, grad, adv = pgrad_loss_and_grad(fx, meta, path)
    want_loss, want_grad = float(fx["trl_loss"]), fx["trl_grad_logits"]
    np.testing.assert_allclose(adv, fx["advantages"], rtol=TOLERANCE, atol=1e-6)
    assert abs(loss - want_loss) <= TOLERANCE * abs(want_loss), (loss, want_loss)
    assert np.abs(grad - want_grad).max() <= TOLERANCE * np.abs(want_grad).max()
    # Padding tokens get no gradient, in TRL as here.
    assert np.all(want_grad[fx["completion_mask"] == 0] == 0.0)


def test_advantages_match_trl():
    fx = dict(np.load(FIXTURES / "advantages.npz"))
    g = int(fx["group_size"])
    assert np.isnan(fx["rewards"]).any()
    for mode in ("group", "batch", "none"):
        np.testing.assert_allclose(group_advantages(fx["rewards"], g, mode).numpy(),
                                   fx[f"grpo_{mode}"], rtol=TOLERANCE, atol=1e-6)
    for normalize in (False, True):
        np.testing.assert_allclose(rloo_advantages(fx["rewards"], g, normalize).numpy(),
                                   fx[f"rloo_normalize_{normalize}"], rtol=TOLERANCE, atol=1e-6)
