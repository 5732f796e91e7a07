"""pgrad-compare's statistics of the final scores alone, from ``evals.json``: for the table's
groups after the populations' run directories are gone (they are not kept in the repository).

    python docs/benchmarks/populations/minatar_breakout_notrail/final_scores.py [--lstm-seeds N]

Reads the LSTM seeds' benchmark JSONs (docs/benchmarks/memory/minatar/lstm) into evals.json's
``lstm`` group, then prints and writes (final_scores.json) rliable's IQM, mean and median with
their 95% stratified bootstrap intervals and P(LSTM > CNN), with pgrad-compare's own functions,
resamples and seed (so with the same scores they repeat compare.json's numbers). The sample-
efficiency curves need the training curves of the run directories: those stay in compare.json.
"""
import argparse
import json
from pathlib import Path

import numpy as np

from pgrad_app.experiments.compare import metrics

HERE = Path(__file__).parent
LSTM = HERE.parents[1] / "memory" / "minatar" / "lstm"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lstm-seeds", type=int, default=10, help="LSTM seeds 0..N-1")
    args = parser.parse_args()
    evals = json.loads((HERE / "evals.json").read_text())
    for seed in range(args.lstm_seeds):  # the benchmark's results are the LSTM side's source
        result = json.loads((LSTM / f"ppo__MinAtar_Breakout-NoTrail-v1__seed{seed}.json")
                            .read_text())["eval"]
        evals["lstm"][str(seed)] = {"eval_mean": result["return_mean"],
                                    "eval_std": float(np.std(result["returns"])),
                                    "episodes": len(result["returns"])}
    evals["lstm"] = {k: evals["lstm"][k] for k in map(str, range(args.lstm_seeds))}
    (HERE / "evals.json").write_text(json.dumps(evals, indent=1) + "\n")
    scores = {g: np.array([[s["eval_mean"]] for s in seeds.values()])  # [runs, 1 task]
              for g, seeds in evals.items()}
    names = metrics.metric_names(None)
    out = {"reps": metrics.REPS, "seed": 0, "groups": {}, "probability_of_improvement": []}
    for group, estimates in metrics.aggregates(scores, gap_threshold=None).items():
        out["groups"][group] = {"seeds": len(scores[group]),
                                **{n: e.as_data() for n, e in zip(names, estimates)}}
        print(group, len(scores[group]), "seeds:", ", ".join(
            f"{n} {e.point:.2f} [{e.low:.2f}, {e.high:.2f}]" for n, e in zip(names, estimates)))
    for x, y, e in metrics.improvement(scores, ["lstm", "cnn", "full"]):
        out["probability_of_improvement"].append({"x": x, "y": y, **e.as_data()})
        print(f"P({x} > {y}) = {e.point:.3f} [{e.low:.3f}, {e.high:.3f}]")
    (HERE / "final_scores.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
