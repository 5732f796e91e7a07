"""Evaluation under observation attacks: the same seeded episodes at each attack radius.

With ``attack="fgsm"`` or ``"pgd"`` (:func:`pgrad.evaluate`) every observation is perturbed
against the policy before it acts, for each radius in ``epsilons`` (0, the clean baseline, always
included); the attacked quantity is the log-probability of the action the policy would take on
the clean observation (:mod:`pgrad.tools.adversarial`), and epsilon is in raw observation units
(the flattened observation the env returns, before normalisation). Every radius runs the same
seeded episodes (:func:`pgrad.rl.evaluation.episodes.run_episodes`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from pgrad.rl.acting.policy import Policy
from pgrad.rl.evaluation.episodes import run_episodes, summary

ATTACKS = ("fgsm", "pgd")
#: Bounds on the work of one robustness evaluation, checked before any episode: PGD's
#: sign-gradient steps per observation, and the attack radii (0 included) each running every
#: episode again.
MAX_PGD_STEPS = 10_000
MAX_EPSILONS = 32


def check_budget(kind: str, epsilons: Sequence[float], pgd_steps: int) -> list[float]:
    """Checks an attack's settings before any work; returns the sorted radii with 0 added.

    Raises:
      ValueError: an unknown ``kind``, ``pgd_steps`` outside ``[1, MAX_PGD_STEPS]``, a radius
        that is negative or not finite, or more than ``MAX_EPSILONS`` radii.
    """
    if kind not in ATTACKS:
        raise ValueError(f"attack must be one of {', '.join(ATTACKS)}; got {kind!r}.")
    if not 1 <= int(pgd_steps) <= MAX_PGD_STEPS:
        raise ValueError(f"pgd_steps must be in [1, {MAX_PGD_STEPS:,}]; got {pgd_steps}.")
    eps_list = sorted({float(e) for e in epsilons} | {0.0})
    if any(not math.isfinite(e) or e < 0 for e in eps_list):
        raise ValueError(f"epsilons must be finite and >= 0; got {list(epsilons)}.")
    if len(eps_list) > MAX_EPSILONS:
        raise ValueError(f"at most {MAX_EPSILONS} epsilons (0 included) per evaluation, each "
                         f"runs every episode again; got {len(eps_list)}.")
    return eps_list


def attack_function(policy: Policy, kind: str, pgd_steps: int = 10) -> Callable[..., Any]:
    """``tf.function (flat raw obs [B, d], epsilon []) -> perturbed flat raw obs [B, d]``."""
    import tensorflow as tf

    from pgrad.tools.adversarial import fgsm, pgd

    check_budget(kind, (), pgd_steps)
    layout = getattr(policy, "layout", None)
    if layout is not None and not layout.flat:
        raise ValueError("observation attacks perturb vector observations only; this policy "
                         f"observes images ({policy.observation_space}).")

    def attack(flat, eps):
        if kind == "fgsm":
            return fgsm(flat, policy.distribution, eps)
        return pgd(flat, policy.distribution, eps, steps=pgd_steps)

    dim = policy.flatten(_sample_batch(policy.observation_space)).shape[1]
    return tf.function(attack, input_signature=[tf.TensorSpec([None, dim], tf.float32),
                                                tf.TensorSpec([], tf.float32)])


def _sample_batch(space):
    from pgrad.rl.observations.spaces import batch_of_one

    return batch_of_one(space.sample())


def robustness(policy: Policy, make_env: Callable[[int], Any], kind: str,
               epsilons: Sequence[float], episodes: int, seed: int, deterministic: bool,
               pgd_steps: int = 10,
               name: str = "env") -> dict[str, Any]:
    """Mean ± std return under ``kind`` attacks for each epsilon (0 = clean), same episodes.

    Raises:
      ValueError: settings :func:`check_budget` refuses (checked before any episode).
    """
    import tensorflow as tf

    eps_list = check_budget(kind, epsilons, pgd_steps)
    attack = attack_function(policy, kind, int(pgd_steps))
    rows = []
    for eps in eps_list:
        perturb = None
        if eps > 0:
            e = tf.constant(eps, tf.float32)
            perturb = lambda flat, e=e: attack(tf.constant(flat), e).numpy()  # noqa: E731
        returns, lengths = run_episodes(policy, make_env, episodes, seed, deterministic, perturb,
                                        name=name)
        rows.append({"epsilon": eps, **summary(returns, lengths)})
    return {
        "kind": kind,
        "space": "raw observation units (before observation normalisation), L-inf",
        "pgd_steps": int(pgd_steps) if kind == "pgd" else None,
        "target": "log-prob of the greedy action at the clean observation",
        "epsilons": [r["epsilon"] for r in rows],
        "return_mean": [r["return_mean"] for r in rows],
        "return_std": [r["return_std"] for r in rows],
        "length_mean": [r["length_mean"] for r in rows],
        "rows": rows,
    }
