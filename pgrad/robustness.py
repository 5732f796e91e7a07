"""Return of a trained policy under observation attacks (FGSM / PGD), one row per epsilon.

``pgrad.evaluate(run_dir, attack="fgsm", epsilons=[0, 0.01, 0.05])`` (and ``evaluate.py DIR
--attack fgsm --epsilon ...``) land here. The attack needs the differentiable policy, which the
exported ``policy/`` SavedModel does not expose (it only has the deterministic
``action(observation)`` signature), so the policy comes from the run's newest good checkpoint
restored into a fresh agent.

**Which space epsilon is in:** raw observation units -- the (flattened) observation the env
returns, before the run's observation normalisation. The attacked function is
``o -> log pi(a* | normalise(o))``, so with ``normalize_obs`` the gradient flows through the
normaliser and the perturbation stays an L-inf ball of radius epsilon in env units.

Every epsilon runs the same episodes: ``episodes`` envs seeded ``seed, seed + 1, ...``, stepped
together (one batched attack per step), so the rows differ only by the attack.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from pgrad.errors import UserError
from pgrad.spaces import batch_of_one

ATTACKS = ("fgsm", "pgd")


def parse_epsilons(text: str | Any) -> list[float]:
    """``"0.01,0.05"`` or a sequence -> sorted unique floats with 0 (the clean baseline) added."""
    items = text.split(",") if isinstance(text, str) else list(text)
    try:
        eps = [float(x) for x in items if str(x).strip() != ""]
    except ValueError:
        raise UserError(f"--epsilon: expected comma-separated numbers; got {text!r}.") from None
    if not eps:
        raise UserError("--epsilon: give at least one value, e.g. 0.01,0.05,0.1.")
    if any(not np.isfinite(e) or e < 0 for e in eps):
        raise UserError(f"--epsilon: values must be finite and >= 0; got {text!r}.")
    return sorted(set(eps) | {0.0})


def _attack_fn(agent, kind: str, pgd_steps: int):
    """``tf.function (raw flat obs [B, d], epsilon []) -> perturbed raw obs [B, d]``."""
    import tensorflow as tf

    from pgrad.adversarial import fgsm, pgd

    net, head, norm = agent.net, agent.head, agent.obs_norm

    def policy(raw):  # the policy as a function of the raw observation
        obs = raw if norm is None else norm.tf_normalize(raw)
        return head.distribution(net.params(obs))

    def attack(raw, eps):
        if kind == "fgsm":
            return fgsm(raw, policy, eps)
        return pgd(raw, policy, eps, steps=pgd_steps)

    dim = agent.collector.obs_dim
    return tf.function(attack, input_signature=[tf.TensorSpec([None, dim], tf.float32),
                                                tf.TensorSpec([], tf.float32)])


def _run_episodes(agent, env_id: str, episodes: int, seed: int, deterministic: bool,
                  perturb) -> tuple[list[float], list[int]]:
    """``episodes`` envs stepped together; ``perturb(raw [B, d]) -> [B, d]`` before acting."""
    import gymnasium as gym

    envs = [gym.make(env_id) for _ in range(episodes)]
    rng = np.random.default_rng([seed, 7])
    prep = agent.collector.preprocess
    try:
        obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]
        returns, lengths = [0.0] * episodes, [0] * episodes
        live = list(range(episodes))
        while live:
            flat = np.concatenate([prep(batch_of_one(obs[i])) for i in live]).astype(np.float32)
            flat = perturb(flat)
            x = flat if agent.obs_norm is None else agent.obs_norm(flat)
            params, _ = agent.mirror.forward(x)
            actions = (agent.mirror.mode(params) if deterministic
                       else agent.mirror.sample(params, rng)[0])
            env_actions = agent.head.to_env(actions)
            still = []
            for j, i in enumerate(live):
                obs[i], reward, term, trunc, _ = envs[i].step(env_actions[j])
                returns[i] += float(reward)
                lengths[i] += 1
                if not (term or trunc):
                    still.append(i)
            live = still
    finally:
        for env in envs:
            env.close()
    return returns, lengths


def robustness(agent, env_id: str, kind: str, epsilons: list[float], episodes: int,
               seed: int, deterministic: bool, pgd_steps: int = 10) -> dict[str, Any]:
    """Mean ± std return under ``kind`` attacks for each epsilon (0 = clean).

    Args:
      agent: a restored agent (networks, normaliser statistics).
      env_id: a registered env id.
      kind: ``"fgsm"`` or ``"pgd"``.
      epsilons: L-inf radii in raw observation units.
      episodes: episodes per epsilon (the same seeded episodes for every epsilon).
      seed: seed of the first episode (episode i gets ``seed + i``).
      deterministic: act greedily on the attacked observation (else sample).
      pgd_steps: sign-gradient steps of PGD.

    Returns:
      ``{"kind", "space", "pgd_steps", "epsilons", "return_mean", "return_std", "length_mean",
      "rows": [{"epsilon", "return_mean", "return_std", "length_mean", "returns"}, ...]}``.
    """
    import tensorflow as tf

    if kind not in ATTACKS:
        raise UserError(f"--attack must be one of {', '.join(ATTACKS)}; got {kind!r}.")
    if int(pgd_steps) < 1:
        raise UserError(f"--pgd-steps must be >= 1; got {pgd_steps}.")
    agent._sync()  # the numpy acting copy and normaliser statistics from the restored variables
    attack = _attack_fn(agent, kind, int(pgd_steps))
    rows = []
    for eps in epsilons:
        if eps == 0:
            perturb = lambda flat: flat  # noqa: E731
        else:
            e = tf.constant(eps, tf.float32)
            perturb = lambda flat, e=e: attack(tf.constant(flat), e).numpy()  # noqa: E731
        returns, lengths = _run_episodes(agent, env_id, episodes, seed, deterministic, perturb)
        rows.append({"epsilon": float(eps), "return_mean": float(np.mean(returns)),
                     "return_std": float(np.std(returns)),
                     "length_mean": float(np.mean(lengths)), "returns": returns,
                     "lengths": lengths})
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


def plot_robustness(result: dict[str, Any], png: str | Path, title: str = "") -> Path:
    """Writes a PNG of mean return (± std) against epsilon."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    eps = np.asarray(result["epsilons"])
    mean, std = np.asarray(result["return_mean"]), np.asarray(result["return_std"])
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    try:
        ax.errorbar(eps, mean, yerr=std, marker="o", capsize=3)
        ax.set_xlabel(f"epsilon ({result['kind'].upper()}, L-inf, raw observation units)")
        ax.set_ylabel("episode return (mean ± std)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(png)
    finally:
        plt.close(fig)
    return Path(png)


def table(result: dict[str, Any]) -> str:
    """A small text table: epsilon, return mean ± std, mean length."""
    lines = [f"{'epsilon':>8}  {'return':>18}  {'length':>7}"]
    for r in result["rows"]:
        ret = f"{r['return_mean']:.1f} ± {r['return_std']:.1f}"
        lines.append(f"{r['epsilon']:>8g}  {ret:>18}  {r['length_mean']:>7.1f}")
    return "\n".join(lines)
