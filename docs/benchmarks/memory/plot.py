"""Training curves of the memory benchmarks: the rolling mean of the last 20 training episodes
per seed, one panel per env, pgrad's benchmark JSONs (``curve``: [step, return] per episode)
beside sb3-contrib's (``episodes``, from sb3c_ppo_lstm.py).

    python docs/benchmarks/memory/plot.py     # writes curves_<env>.png next to this file
"""
import json
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
NAME = re.compile(r"^(?P<label>.+)__(?P<env>[^_]+-v\d)__seed(?P<seed>\d+)\.json$")
COLORS = {"ppo_lstm": "tab:blue", "ppo_mlp": "tab:gray", "sb3c_ppo_lstm": "tab:orange",
          "ppo_lstm_freshnoise": "tab:green",  # before gSDE held its noise
          "ppo_lstm_n128": "tab:purple"}  # before sequence_length: 128-step rollouts


def rolling(rows, window=20):
    rows = np.asarray(rows, float)
    ret = np.convolve(rows[:, 1], np.ones(window) / window, "valid")
    return rows[window - 1:, 0], ret


def main():
    by_env = {}
    for path in sorted(HERE.glob("*.json")):
        m = NAME.match(path.name)
        if m:
            by_env.setdefault(m["env"], []).append((m["label"], int(m["seed"]), path))
    for env, runs in by_env.items():
        fig, ax = plt.subplots(figsize=(7, 4))
        seen = set()
        for label, _seed, path in runs:
            data = json.loads(path.read_text())
            rows = data.get("curve") or data["episodes"]
            x, y = rolling(rows)
            ax.plot(x, y, color=COLORS.get(label), lw=1, alpha=0.8,
                    label=None if label in seen else label)
            seen.add(label)
        ax.set(xlabel="env steps", ylabel="last-20 training return",
               title=f"{env} (one line per seed)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(HERE / f"curves_{env}.png", dpi=90)


if __name__ == "__main__":
    main()
