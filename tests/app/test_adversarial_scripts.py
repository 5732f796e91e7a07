"""Issue 8 integration: attacked evaluation, --diagnostics and --adversarial-epsilon training."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import agents
import pgrad
from agents.acting import adversarial
from agents.update import diagnostics
from pgrad_app.errors import UserError
from pgrad_app.run.evaluate import evaluate_run
from pgrad_app.run.robustness import parse_epsilons

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parents[2]
DIAG_COLUMNS = ("diag_step_norm_min", "diag_step_norm_median", "diag_step_norm_p90",
                "diag_step_norm_max", "diag_clip_fraction", "diag_grad_snr", "diag_mean_cosine",
                "diag_mean_grad_norm")


def run(script: str, *args) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, str(ROOT / "scripts" / script), *map(str, args)],
                          capture_output=True, text=True, timeout=240, env=env)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A tiny A2C CartPole run trained with --diagnostics and --adversarial-epsilon."""
    out = tmp_path_factory.mktemp("runs") / "a2c"
    proc = run("train.py", "--agent", "a2c", "--total-steps", 160, "--num-envs", 2, "--seed", 0,
               "--out", out, "--quiet", "--diagnostics", "--adversarial-epsilon", 0.05,
               "--set", "n_steps=5", "--log-every", 4)
    assert proc.returncode == 0, proc.stderr
    return out


def test_diagnostics_columns_in_updates_csv_and_histograms(run_dir):
    with open(run_dir / "updates.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    # 16 updates (160 steps / (2 envs x 5 steps)): the first, every 4th after it, the last
    assert [int(r["step"]) for r in rows] == [10, 50, 90, 130, 160]
    for col in DIAG_COLUMNS:
        values = np.array([float(r[col]) for r in rows])
        assert np.isfinite(values).all(), col
    norms = np.array([[float(r[f"diag_step_norm_{q}"]) for q in ("min", "median", "p90", "max")]
                      for r in rows])
    assert (np.diff(norms, axis=1) >= 0).all()  # quantiles are ordered
    frac = np.array([float(r["diag_clip_fraction"]) for r in rows])
    assert ((frac >= 0) & (frac <= 1)).all()
    assert "diag_step_norms" not in rows[0]  # the [N] array is a histogram, not a column
    tags = set()
    for path in (run_dir / "tb").glob("events.*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for v in event.summary.value:
                tags.add(v.tag)
    assert "train/diag_step_norms" in tags and "train/diag_grad_snr" in tags
    cfg = (run_dir / "config.yaml").read_text()
    assert "diagnostics: true" in cfg and "adversarial_epsilon: 0.05" in cfg


def test_attacked_evaluation_through_the_script(run_dir):
    proc = run("evaluate.py", run_dir, "--attack", "fgsm", "--epsilon", "0.05,0.5",
               "--episodes", 3, "--deterministic")
    assert proc.returncode == 0, proc.stderr
    # an attacked evaluation has its own file; eval.json keeps the plain one
    result = json.loads((run_dir / "eval-attack-fgsm.json").read_text())
    attack = result["attack"]
    assert attack["kind"] == "fgsm" and attack["epsilons"] == [0.0, 0.05, 0.5]
    assert len(attack["rows"]) == 3 and all(len(r["returns"]) == 3 for r in attack["rows"])
    assert result["return_mean"] == attack["return_mean"][0]  # top level = the clean row
    assert (run_dir / "robustness.png").stat().st_size > 1000
    assert "0.05" in proc.stdout and "±" in proc.stdout and "robustness.png" in proc.stdout
    # A large attack on this barely trained greedy policy shortens its episodes.
    assert attack["return_mean"][2] <= attack["return_mean"][0]


def test_attack_flag_errors(run_dir):
    proc = run("evaluate.py", run_dir, "--epsilon", "0.1")
    assert proc.returncode == 2 and "--epsilon needs --attack" in proc.stderr
    with pytest.raises(UserError, match="--video cannot"):
        evaluate_run(run_dir, attack="fgsm", video_dir=str(run_dir / "v"), write=False)
    assert parse_epsilons("0.1, 0.01,0.1") == [0.0, 0.01, 0.1]
    with pytest.raises(UserError):
        parse_epsilons("-0.1")


def test_pgd_library_call_is_no_better_for_the_policy(run_dir):
    common = dict(episodes=2, deterministic=True, epsilons=[0.3], write=False)
    fgsm = evaluate_run(run_dir, attack="fgsm", **common)["attack"]
    pgd = evaluate_run(run_dir, attack="pgd", pgd_steps=3, **common)["attack"]
    assert pgd["pgd_steps"] == 3 and pgd["epsilons"] == [0.0, 0.3]
    assert fgsm["return_mean"][0] == pgd["return_mean"][0]  # same clean episodes


@pytest.mark.parametrize("normalize_obs", [False, True])
def test_adversarial_training_stores_the_observations_acted_on(monkeypatch, normalize_obs):
    eps = 0.05
    A2C = agents.get("a2c")
    agent = A2C(A2C.Config(num_envs=2, n_steps=4, adversarial_epsilon=eps,
                           normalize_obs=normalize_obs), "CartPole-v1", seed=1)
    seen, radii = [], []
    original, original_radius = adversarial.replace_observations, adversarial._epsilon_vector

    def radius_spy(agent_, epsilon):
        radii.append(original_radius(agent_, epsilon))  # at the start of each rollout
        return radii[-1]

    def spy(traj, perturbed):
        out = original(traj, perturbed)
        # The weights that acted are still in the networks (the update comes after).
        obs = tf.constant(out.observations.reshape(-1, out.observations.shape[-1]))
        logp = agent.head.distribution(agent.net.params(obs)).log_prob(traj.actions.reshape(-1))
        seen.append((traj.observations, out.observations, traj.log_probs.reshape(-1),
                     logp.numpy(), radii[-1]))
        return out

    monkeypatch.setattr(adversarial, "replace_observations", spy)
    monkeypatch.setattr(adversarial, "_epsilon_vector", radius_spy)
    try:
        for _ in range(3):
            agent.step()
    finally:
        agent.close()
    assert len(seen) == 3
    for clean, stored, logp_acted, logp_stored, radius in seen:
        delta = np.abs(stored - clean)
        if not normalize_obs:
            np.testing.assert_array_equal(radius, np.float32(eps))
        # With normalize_obs the radius is eps / std (statistics at the start of the rollout).
        assert (delta <= radius * (1 + 1e-5) + 1e-6).all()
        assert delta.max() > 0.5 * radius.min()  # the attack did move them
        np.testing.assert_allclose(logp_stored, logp_acted, atol=1e-5)
    if not normalize_obs:
        clean, stored = seen[0][0], seen[0][1]
        np.testing.assert_allclose(np.abs(stored - clean).max(), eps, rtol=1e-4)


def test_update_diagnostics_hook_matches_materialised_per_step_gradients():
    """The agent hook (cheap path, weights = advantages) against per_step_grads + a dense
    reference in numpy, in tf.function as the agent runs it."""
    import gymnasium as gym

    from pgrad.rl.acting.policy import ActorCritic

    head = pgrad.make_head(gym.spaces.Discrete(2))
    net = ActorCritic(4, head, (8,), "tanh", False, critic=False, seed=3)
    rng = np.random.default_rng(0)
    obs = tf.constant(rng.normal(size=(12, 4)), tf.float32)
    act = tf.constant(rng.integers(0, 2, size=12), tf.int32)
    adv = tf.constant(rng.normal(size=12), tf.float32)

    def log_prob_fn(o, a):
        return head.distribution(net.params(o)).log_prob(a)

    variables = net.policy_variables
    diag, norms = tf.function(lambda: diagnostics.update_diagnostics(
        log_prob_fn, variables, obs, act, adv, 0.5))()
    grads = pgrad.per_step_grads(log_prob_fn, variables, obs, act)
    rows = np.concatenate([np.reshape(g.numpy(), (12, -1)) for g in grads], 1).astype(np.float64)
    rows *= adv.numpy()[:, None]  # [T, P] terms A_t g_t
    mean = rows.mean(0)
    step = np.linalg.norm(rows, axis=1)
    np.testing.assert_allclose(norms.numpy(), step, rtol=1e-4)
    trace = ((rows - mean) ** 2).sum() / 11
    expect = {
        "diag_step_norm_median": np.median(step), "diag_step_norm_max": step.max(),
        "diag_step_norm_p90": np.percentile(step, 90), "diag_clip_fraction": (step > 0.5).mean(),
        "diag_grad_snr": (mean @ mean) / (trace / 12),
        "diag_mean_cosine": np.mean(rows @ mean / (step * np.linalg.norm(mean))),
        "diag_mean_grad_norm": np.linalg.norm(mean),
    }
    for key, value in expect.items():
        np.testing.assert_allclose(float(diag[key]), value, rtol=1e-3, atol=1e-6, err_msg=key)
