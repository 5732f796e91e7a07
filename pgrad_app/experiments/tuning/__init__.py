"""Hyperparameter search with Optuna (``pgrad-tune``): a study, its trials, its report and the
search spaces; from Python, the names below (``pgrad_app.experiments.tuning.plan`` and so on).

    from pgrad_app.experiments import tuning

    spec = tuning.plan("ppo", "CartPole-v1", steps=50_000)
    opts = tuning.Options(tuning.storage_url("results/t"), "ppo-CartPole-v1", 50, "results/t")
    tuning.work(spec, opts)
    tuning.write_outputs(spec, opts)
"""

from pgrad_app.experiments.tuning.report import write_outputs
from pgrad_app.experiments.tuning.search import work, work_on_ray
from pgrad_app.experiments.tuning.study import Options, TuneSpec, plan, storage_url

__all__ = ["Options", "TuneSpec", "plan", "storage_url", "work", "work_on_ray", "write_outputs"]
