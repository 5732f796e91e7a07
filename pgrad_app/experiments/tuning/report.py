"""What a ``pgrad-tune`` study found: ``best.yaml``, the report and its figures (see
:mod:`pgrad_app.experiments.tuning.search`)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from pgrad.rl.evaluation.evaluate_policy import eval_seed
from pgrad_app.config import settings as config_lib
from pgrad_app.experiments.tuning.study import (
    BEST,
    REPORT,
    Options,
    TuneSpec,
    counted,
    import_optuna,
    open_study,
)

FIGURES = {"history": "optimization_history.png", "importance": "param_importances.png",
           "intermediate": "intermediate_values.png"}


def best_trial(study):
    """The complete trial with the highest value (the first of equals), or None."""
    done = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    return max(done, key=lambda t: (t.value, -t.number)) if done else None


def best_yaml(spec: TuneSpec, trial, study_name: str) -> str:
    """A ready ``pgrad-train --config`` file: the run settings and every hyperparameter of the
    best trial, as ``config.yaml`` is laid out."""
    import agents

    cls = agents.get(spec.agent)
    cfg = config_lib.build(cls.Config, trial.user_attrs["hyperparameters"], {})
    settings = config_lib.RunSettings(agent=spec.agent, env=spec.env, seed=spec.seed,
                                      total_steps=spec.budget)
    body = config_lib.dump_run_config(settings, cfg)
    body = "\n".join(ln for ln in body.splitlines() if not ln.startswith("#")) + "\n"
    return (f"# pgrad-tune: the best trial of study {study_name!r}: trial {trial.number}, mean "
            f"return {trial.value:.2f} ({spec.eval_episodes} deterministic evaluation episodes "
            f"after {spec.budget:,} env steps).\n# Train with it: pgrad-train --config best.yaml "
            "--out DIR (total_steps is the trials' budget; --total-steps N for more).\n" + body)


def importances(study) -> dict[str, float]:
    """PED-ANOVA importances (Optuna's default evaluator; numpy only, no scikit-learn) of the
    complete trials; {} while fewer than two completed."""
    optuna = import_optuna()
    if sum(t.state.name == "COMPLETE" for t in study.get_trials(deepcopy=False)) < 2:
        return {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return optuna.importance.get_param_importances(
                study, evaluator=optuna.importance.PedAnovaImportanceEvaluator())
    except (ValueError, RuntimeError, ZeroDivisionError):
        return {}


def _figures(study, results: Path, with_importance: bool) -> list[str]:
    """Optuna's matplotlib figures of the study, as PNGs; returns the names written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pgrad.rl.storage.files import write_atomic

    optuna = import_optuna()
    vis = optuna.visualization.matplotlib
    target = "mean evaluation return"
    plots = {"history": lambda s: vis.plot_optimization_history(s, target_name=target),
             "intermediate": vis.plot_intermediate_values}
    if with_importance:
        plots["importance"] = lambda s: vis.plot_param_importances(
            s, evaluator=optuna.importance.PedAnovaImportanceEvaluator(), target_name=target)
    written = []
    for key, plot in plots.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the matplotlib backend is "experimental"
            try:
                ax = plot(study)
            except (ValueError, RuntimeError):
                continue
        fig = ax.figure
        try:
            import io

            fig.set_size_inches(8, 5)
            fig.tight_layout()
            buf = io.BytesIO()
            fig.savefig(buf, format="png", dpi=100)
            write_atomic(results / FIGURES[key], buf.getvalue())
            written.append(FIGURES[key])
        finally:
            plt.close(fig)
    return written


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|")


def report(spec: TuneSpec, study, opts: Options, figures: list[str],
           weights: dict[str, float]) -> str:
    """The study's README.md: settings, best trial, importances, figures, every trial."""
    trials = study.get_trials(deepcopy=False)
    kept = [t for t in trials if counted(t)]
    states = {s: sum(t.state.name == s for t in kept) for s in ("COMPLETE", "PRUNED", "FAIL")}
    best = best_trial(study)
    names = [p.name for p in spec.space.params]
    others = len(trials) - len(kept)
    lines = [f"# Tuning {spec.agent} on {spec.env}", "",
             f"Study `{opts.name}` in `{opts.url}`: {len(kept)} of {opts.n_trials} trials "
             f"({states['COMPLETE']} complete, {states['PRUNED']} pruned, {states['FAIL']} "
             "failed)" + (f"; {others} more records not counted (a process that ended "
                          "mid-trial, or surplus claims)" if others else "") + ".",
             f"Each trial: {spec.budget:,} env steps, seed {spec.seed}, {spec.n_evaluations} "
             f"evaluations of {spec.eval_episodes} deterministic episodes (seeds from "
             f"{eval_seed(spec.seed)}); its value is the last one's mean return. Sampler "
             f"{opts.sampler}, pruner {opts.pruner}, space `{spec.space.path}`; the settings "
             "it samples over: the agent's defaults"
             + (f" < `{spec.tuned_from}`" if spec.tuned_from else "")
             + (" < --set " + " ".join(f"{k}={_cell(v)}" for k, v in spec.overrides.items())
                if spec.overrides else "") + ".", ""]
    if best is not None:
        lines += [f"**Best: trial {best.number}, return {best.value:.2f}** -- `{BEST}`: "
                  f"`pgrad-train --config {BEST} --out DIR`.", ""]
    lines += ["## Search space", "", "| parameter | sampled as |", "|---|---|"]
    lines += [f"| {p.name} | {_cell(p.describe())} |" for p in spec.space.params]
    if weights:
        lines += ["", f"## Parameter importance (PED-ANOVA over {states['COMPLETE']} complete "
                  "trials)", "",
                  "| parameter | importance |", "|---|---|"]
        lines += [f"| {k} | {v:.3f} |" for k, v in weights.items()]
    lines += [""] + [f"![{name}]({name})" for name in figures]
    lines += ["", "## Trials", "",
              "| trial | state | last evaluation | evaluations | " + " | ".join(names)
              + " | note |",
              "|---" * (len(names) + 5) + "|"]
    for t in sorted(kept, key=lambda t: t.number):
        note = (t.user_attrs.get("invalid") or t.user_attrs.get("fail_reason") or "")
        value = f"{t.value:.2f}" if t.value is not None else "-"
        lines.append(f"| {t.number} | {t.state.name.lower()} | {value} | "
                     f"{len(t.intermediate_values)} | "
                     + " | ".join(_cell(t.params.get(n, "-")) for n in names)
                     + f" | {_cell(note)} |")
    return "\n".join(lines) + "\n"


def write_outputs(spec: TuneSpec, opts: Options) -> Path | None:
    """Writes ``best.yaml`` (if a trial completed), the PNGs and ``README.md`` into the results
    folder (atomically: processes sharing a study may write them at once); returns best.yaml's
    path or None."""
    from pgrad.rl.storage.files import write_atomic

    results = Path(opts.results)
    results.mkdir(parents=True, exist_ok=True)
    study = open_study(spec, opts.url, opts.name, create=False)
    best, weights = best_trial(study), importances(study)
    figures = _figures(study, results, with_importance=bool(weights))
    write_atomic(results / REPORT, report(spec, study, opts, figures, weights))
    if best is None:
        return None
    return write_atomic(results / BEST, best_yaml(spec, best, opts.name))
