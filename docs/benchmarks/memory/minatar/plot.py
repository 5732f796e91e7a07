"""The MinAtar memory benchmark side by side: the three results folders next to this file
(``lstm/``, ``cnn/``: MinAtar/Breakout-NoTrail-v1 with and without the LSTM core; ``full/``:
MinAtar/Breakout-v1, the trail plane seen), one curve figure and one markdown table.

    python docs/benchmarks/memory/minatar/plot.py   # writes curves.png here, prints the table
"""
from pathlib import Path

import numpy as np

from pgrad_app.experiments.benchmark import report, stats
from pgrad_app.experiments.benchmark.plots import plot_env

HERE = Path(__file__).resolve().parent
#: folder -> label
RUNS = {"lstm": "CNN + LSTM, no trail", "cnn": "CNN, no trail",
        "full": "CNN, full frame (trail seen)"}


def last_mean(run: dict, steps: int = 50_000) -> float:
    """Mean training return of the episodes that ended in the run's last ``steps`` env steps."""
    curve = np.asarray(run["curve"], float).reshape(-1, 2)  # [K, 2]: step, block mean
    return float(curve[curve[:, 0] > curve[-1, 0] - steps, 1].mean())


def main() -> None:
    bands, lines = {}, [
        "| policy | env | seeds | env steps | eval (20 greedy) mean ± std | per seed | "
        "training mean, last 50k steps | steps/s |", "|---|---|---|---|---|---|---|---|"]
    for folder, label in RUNS.items():
        runs = sorted(report.load_results(HERE / folder), key=lambda r: r["seed"])
        if not runs:
            continue
        bands[label] = report.curve_band(runs)
        scores = [r["eval"]["return_mean"] for r in runs]
        mean, std = stats.mean_std(scores)
        lasts = [last_mean(r) for r in runs]
        seeds = ", ".join(str(r["seed"]) for r in runs)
        lines.append(
            f"| {label} | {runs[0]['env']} | {len(runs)} ({seeds}) "
            f"| {max(r['steps'] for r in runs):,} | {mean:.1f} ± {std:.1f} "
            f"| {' / '.join(f'{s:.1f}' for s in scores)} "
            f"| {np.mean(lasts):.1f} ({' / '.join(f'{x:.1f}' for x in lasts)}) "
            f"| {np.mean([r['steps_per_s'] for r in runs]):.0f} |")
    plot_env("Breakout", bands, HERE / "curves.png")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
