"""A hyperparameter search with Optuna from Python, then training with the best settings.

What ``pgrad-tune --agent a2c --env CartPole-v1 ...`` does, step by step:

1. ``plan`` resolves what every trial shares: the agent's defaults < its tuned entry < ``sets``,
   the budget, the search space (``pgrad_app/experiments/tuning/search_spaces/a2c.yaml``).
2. ``work`` runs trials in this process until the study holds ``n_trials``: TPE samples a
   point, ``agent.learn`` trains it with an evaluation every ``steps // n_evaluations`` env
   steps, and the median pruner stops trials that fall behind. The study is a SQLite file
   (``RESULTS/study.db``): running this again continues it, and several processes (or
   ``tuning.work_on_ray(spec, opts, workers=N)``) can share it.
3. ``write_outputs`` writes ``best.yaml`` (a ready ``pgrad-train --config`` file), ``README.md``
   (the report) and Optuna's figures.
4. The best settings are read back and trained with ``agents.make``; with the trial's seed and
   budget that run reproduces the trial's value.

Run: ``python examples/tuning_run.py`` (10 trials of 10,000 env steps: a few minutes on 2 CPU
cores); ``--trials 2 --steps 1000`` for a smoke run. Needs ``pip install 'pgrad[tune]'``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

# isort: off
from pgrad_app.quiet import silence  # noqa: I001

silence()  # first: TensorFlow's start-up noise off (what pgrad's commands do)
import yaml  # noqa: E402
import agents  # noqa: E402
import pgrad  # noqa: E402
from pgrad_app.experiments import tuning  # noqa: E402

# isort: on


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10, help="trials the study holds")
    parser.add_argument("--steps", type=int, default=10_000, help="env steps per trial")
    parser.add_argument("--evaluations", type=int, default=5, help="evaluations per trial")
    parser.add_argument("--results", type=Path, default=None,
                        help="results folder (default: a new temporary one)")
    args = parser.parse_args(argv)

    import optuna  # pip install 'pgrad[tune]'

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # pgrad prints one line per trial
    results = args.results or Path(tempfile.mkdtemp(prefix="pgrad-tune-"))
    results.mkdir(parents=True, exist_ok=True)  # the SQLite file goes in it
    # 1. What every trial shares (sets= fixes a hyperparameter the space does not sample).
    spec = tuning.plan("a2c", "CartPole-v1", steps=args.steps, seed=0, sets=["num_envs=8"],
                       n_evaluations=args.evaluations, eval_episodes=3)
    opts = tuning.Options(url=tuning.storage_url(results), name="a2c-CartPole-v1",
                          n_trials=args.trials, results=str(results))
    # 2. The trials (one line each); the same call again finds the study full and returns.
    ran = tuning.work(spec, opts)
    again = tuning.work(spec, opts)
    print(f"ran trials {ran}; a second call ran {len(again)} more (the study is full)")
    # 3. The outputs.
    best_path = tuning.write_outputs(spec, opts)
    print(f"wrote {sorted(p.name for p in results.iterdir())} in {results}")
    if best_path is None:
        print("no trial completed (all pruned or failed): nothing to train")
        return {"trials": float(len(ran)), "best_value": float("nan"), "retrained": float("nan")}

    # 4. best.yaml: the run settings (agent, env, seed, total_steps = the trials' budget, ...)
    # and every hyperparameter under "hyperparameters", typed as the agent's Config wants.
    best = yaml.safe_load(best_path.read_text())
    study = optuna.load_study(study_name=opts.name, storage=opts.url)  # Optuna's own
    print("best trial's sampled values: "
          + ", ".join(f"{k}={v}" for k, v in sorted(study.best_params.items())))
    agent = agents.make(best["agent"], best["env"], seed=best["seed"], **best["hyperparameters"])
    agent.learn(best["total_steps"], progress=False)
    # The trial's value is its last evaluation: eval episodes seeded as pgrad-evaluate's.
    result = pgrad.evaluate(agent, episodes=3, seed=pgrad.rl.evaluation.eval_seed(best["seed"]))
    print(f"best trial {study.best_trial.number}: {study.best_value:.2f}; trained again from "
          f"best.yaml: {result['return_mean']:.2f}")
    agent.close()
    return {"trials": float(len(ran)), "best_value": float(study.best_value),
            "retrained": float(result["return_mean"]), "counted": float(len(study.trials))}


if __name__ == "__main__":
    main()
