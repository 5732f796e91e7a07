"""Presenting robustness to observation attacks: parsing --epsilon, the table, the plot.

The attacks and episodes themselves are :func:`pgrad.evaluate`'s (``attack="fgsm"``/``"pgd"``).

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

from pgrad_app.errors import UserError


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


def check_attack(kind: str, epsilons: list[float], pgd_steps: int) -> None:
    """The bounds of :func:`pgrad.rl.evaluation.attacks.check_budget`, before any work, as one
    line naming the flag (``--pgd-steps``, ``--epsilon``)."""
    from pgrad.rl.evaluation.attacks import MAX_EPSILONS, MAX_PGD_STEPS

    if not 1 <= int(pgd_steps) <= MAX_PGD_STEPS:
        raise UserError(f"--pgd-steps must be in [1, {MAX_PGD_STEPS:,}] (each step is one more "
                        f"gradient of the policy per observation); got {pgd_steps}.")
    if len(epsilons) > MAX_EPSILONS:
        raise UserError(f"--epsilon: at most {MAX_EPSILONS} values (0 included), each runs "
                        f"every episode again; got {len(epsilons)}.")


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
