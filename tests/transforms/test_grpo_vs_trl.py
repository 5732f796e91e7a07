"""pgrad's GRPO-family chains against TRL 1.16's ``GRPOTrainer`` (and ``RLOOTrainer``) loss.

``scripts/grpo_vs_trl.py write`` ran TRL's own ``_compute_loss`` (and its advantage lines) on
the inputs stored beside its outputs in ``tests/fixtures/grpo_trl/``; these tests need no torch.
For every loss type, pgrad's loss and its gradient with respect to the logits match TRL's to
1e-5 relative, on the engine's fused and materialised paths.
"""

import numpy as np
import pytest
from grpo_trl import FIXTURES, TOLERANCE, load, pgrad_loss_and_grad, relative_errors

from pgrad.rl.advantages.groups import group_advantages, rloo_advantages

#: ``sapo`` is TRL's, built as a user's variant in docs/sequences/write_your_own_variant.md
#: (tests/transforms/test_sequence_docs.py checks it against its fixture).
CASES = sorted(p.stem for p in FIXTURES.glob("*.npz") if p.stem not in ("advantages", "sapo"))


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
    np.testing.assert_allclose(adv, fx["advantages"], rtol=TOLERANCE, atol=1e-6)
    loss_error, grad_error = relative_errors(fx, loss, grad)
    assert loss_error <= TOLERANCE, (loss, float(fx["trl_loss"]))
    assert grad_error <= TOLERANCE
    # Padding tokens get no gradient, in TRL as here.
    assert np.all(fx["trl_grad_logits"][fx["completion_mask"] == 0] == 0.0)


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
