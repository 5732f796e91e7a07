"""How pgrad-train resolves a run's settings: defaults < tuned < --config < flags < --set, and
what ``--resume DIR`` may change. Every bad value is a one-line ``UserError``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pgrad_app.config import settings as config_lib
from pgrad_app.config import yamlfile
from pgrad_app.config.values import field_types, parse_set
from pgrad_app.errors import UserError, one_line

# Flags that describe the run itself and so cannot change when resuming it.
FIXED_ON_RESUME = ("agent", "env", "seed", "num_envs", "config", "set", "out", "diagnostics",
                   "adversarial_epsilon", "no_tuned", "transform_arg", "env_kwargs", "env_wrapper")


def parse_env_kwarg(pair: str) -> tuple[str, object]:
    """``key=value`` (or rl-zoo's ``key:value``) -> ``(key, value read as YAML)``."""
    if "=" not in pair and ":" in pair:
        pair = pair.replace(":", "=", 1)
    return parse_set(pair, "--env-kwargs")


def run_defaults() -> dict:
    return {f.name: f.default for f in dataclasses.fields(config_lib.RunSettings)}


# ---------------------------------------------------------------------------------------------
# Resolving settings.
# ---------------------------------------------------------------------------------------------


def _get_agent(name: str):
    import agents

    try:
        return agents.get(name)
    except (KeyError, ValueError) as err:
        raise UserError(f"--agent: {one_line(err)}") from None


FLAG_KEYS = {  # argparse dest -> run setting
    "agent": "agent", "env": "env", "total_steps": "total_steps", "seed": "seed",
    "transform": "transform", "stop_at_return": "stop_at_return",
    "checkpoint_every": "checkpoint_every", "checkpoint_seconds": "checkpoint_seconds",
    "max_nonfinite_skips": "max_nonfinite_skips",
    "log_every": "log_every", "workers": "workers",
    "eval_every": "eval_every", "eval_episodes": "eval_episodes", "track": "track",
    "capture_video": "capture_video",
}


def resolve(args) -> tuple[config_lib.RunSettings, object, type, dict, Path | None]:
    """Merges defaults < tuned < file < flags < --set into (RunSettings, agent Config, agent
    class, where each value came from, the tuned file used or None).

    The tuned layer is the agent's entry for the env in ``pgrad_app/config/hyperparams/AGENT.yaml``
    (``pgrad_app.config.tuned``), skipped with ``--no-tuned``.
    """
    from pgrad_app.config import tuned as hyperparams

    file_values = yamlfile.load_yaml(args.config) if args.config else {}
    set_pairs = [parse_set(p) for p in args.set]
    agent_name = args.agent or dict(set_pairs).get("agent") or file_values.get("agent") or "a2c"
    agent_cls = _get_agent(str(agent_name))
    env = (args.env or dict(set_pairs).get("env") or file_values.get("env")
           or run_defaults()["env"])
    source: dict[str, str] = {}
    run_values, hyper = {}, {}
    try:
        # The tuned table is read once per run: the entry carries its values, key and budget.
        found = None if args.no_tuned else hyperparams.lookup(str(agent_name), str(env))
    except UserError as err:
        raise UserError(f"{err} (--no-tuned skips the tuned hyperparameters)") from None
    if found is not None:
        hyper.update(found.hyperparameters)
        source.update({k: f"{found.path}: {found.key}: {k}" for k in found.hyperparameters})
    if args.config:
        run_f, hyper_f = config_lib.split_keys(file_values, agent_cls.Config, args.config)
        run_values.update(run_f)
        hyper.update(hyper_f)
        source.update({k: f"{args.config}: {k}" for k in [*run_f, *hyper_f]})
    for dest, key in FLAG_KEYS.items():
        value = getattr(args, dest)
        if value is not None:
            run_values[key] = value
            source[key] = "--" + dest.replace("_", "-")
    if args.num_envs is not None:
        if "num_envs" not in field_types(agent_cls.Config):
            raise UserError(f"--num-envs: agent {agent_name!r} has no num_envs setting.")
        hyper["num_envs"] = args.num_envs
        source["num_envs"] = "--num-envs"
    for dest in ("diagnostics", "adversarial_epsilon"):  # agent hyperparameters with a flag
        if getattr(args, dest) is not None:
            hyper[dest] = getattr(args, dest)
            source[dest] = "--" + dest.replace("_", "-")
    for key, value in set_pairs:
        run_s, hyper_s = config_lib.split_keys({key: value}, agent_cls.Config, f"--set {key}")
        run_values.update(run_s)
        hyper.update(hyper_s)
        source[key] = f"--set {key}"
    if args.transform_arg:
        run_values["transform_args"] = {
            **(run_values.get("transform_args") or {}),
            **dict(parse_set(p, "--transform-arg") for p in args.transform_arg)}
        source["transform_args"] = "--transform-arg"
    if args.env_kwargs:
        run_values["env_kwargs"] = {**(run_values.get("env_kwargs") or {}),
                                    **dict(parse_env_kwarg(p) for p in args.env_kwargs)}
        source["env_kwargs"] = "--env-kwargs"
    for dest in ("env_wrapper", "gym_packages"):
        if getattr(args, dest):
            run_values[dest] = list(getattr(args, dest))
            source[dest] = "--" + dest.replace("_", "-")
    run_values["agent"] = str(agent_name)
    if "total_steps" not in run_values and found is not None and found.budget is not None:
        run_values["total_steps"] = found.budget  # the tuned entry's budget
        source["total_steps"] = f"{found.path}: {env}: n_timesteps"
    settings = config_lib.build(config_lib.RunSettings, run_values, source)
    cfg = config_lib.build(agent_cls.Config, hyper, source)
    # The tuned file counts only if one of its values survived the later layers.
    tuned_path = found.path if found is not None else None
    if tuned_path is not None and not any(v.startswith(f"{tuned_path}: ") for v in source.values()):
        tuned_path = None
    return settings, cfg, agent_cls, source, tuned_path


def tuned_note(agent: str, env: str, path: Path) -> str:
    """The line pgrad-train prints when a tuned entry applies."""
    return (f"using tuned hyperparameters for {agent} on {env} from {path} "
            "(--no-tuned for the plain defaults)")


def resolve_resume(args) -> tuple[config_lib.RunSettings, object, type]:
    """Settings of the run in ``--resume DIR``; only the length/stopping flags may change.

    ``DIR`` may also be a directory ``agent.save`` wrote (then ``--total-steps`` is needed).
    config.yaml is checked against what the run recorded (agent.json, checkpoints); code it
    names is imported only if given again (--env, --transform) or with --trust-run-code.
    """
    from pgrad_app.config.plugins import (
        check_run_code,
        names_code,
        run_code_of,
        same_spec,
        wrapper_names,
    )
    from pgrad_app.run import resume as resume_lib
    from pgrad_app.run.layout import RunLayout

    out = Path(args.resume)
    layout = RunLayout(out)
    if layout.config.is_file():
        values = yamlfile.load_yaml(layout.config)
    else:  # a directory agent.save wrote becomes a run directory from here on
        values = config_lib.saved_run_values(out)
        if values is None:
            raise UserError(f"--resume {out}: no run there (no config.yaml) and no saved agent "
                            "(no agent.json).")
        if args.total_steps is None and getattr(args, "more_steps", None) is None:
            raise UserError(f"--resume {out}: a saved agent has no run settings yet; give "
                            "--total-steps N (the env-step count to train to) or --more-steps "
                            "N.")
        named = config_lib.saved_transform(out)
        if named and args.transform is None:
            raise UserError(f"--resume {out}: the agent was trained with the transform "
                            f"{named!r}; pass it again with --transform MODULE:ATTR.")
    recorded_env = str(values.get("env", ""))
    for dest in FIXED_ON_RESUME:
        value = getattr(args, dest)
        if dest == "env" and value is not None and same_spec(value, recorded_env):
            continue  # naming the run's env module again is how its code is allowed
        if dest == "env_wrapper" and value == wrapper_names(values.get("env_wrapper")):
            continue  # so is naming its wrappers again
        if value not in (None, [], False) and not (dest == "out" and Path(value) == out):
            flag = "--" + dest.replace("_", "-")
            raise UserError(f"{flag} cannot be changed when resuming; the settings are in "
                            f"{out / 'config.yaml'} (change them in a new run).")
    agent_cls = _get_agent(str(values.get("agent", "a2c")))
    run_values, hyper = config_lib.split_keys(values, agent_cls.Config, str(layout.config))
    recorded = run_values.get("transform")
    if recorded and args.transform is None and not args.trust_run_code:
        # Never import code because a run directory names it: the user passes it again.
        raise UserError(f"this run was trained with --transform {recorded}; pass it again "
                        "to resume (pgrad never imports code named by a run directory; "
                        "or --trust-run-code).")
    if args.transform is not None and not same_spec(args.transform, recorded, split_last=True):
        was = f"--transform {recorded}" if recorded else "the agent's own chain"
        raise UserError(f"--transform {args.transform} cannot be changed when resuming: this run "
                        f"was trained with {was}, and its checkpoints hold that transform's "
                        "state (start a new run for another transform).")
    if names_code(recorded_env):
        check_run_code("env", recorded_env, args.env, args.trust_run_code, out, "--env")
    named = set(args.gym_packages) | set(args.env_wrapper)
    unnamed = [c for c in run_code_of(values) if c not in named]
    if unnamed and not args.trust_run_code:
        raise UserError(f"{out} names code to import: {', '.join(unnamed)}. pgrad imports code "
                        "named by a run directory only when you name it again: pass "
                        "--gym-packages / --env-wrapper with it (after checking it), or "
                        "--trust-run-code.")
    source = {}
    for dest, key in FLAG_KEYS.items():
        value = getattr(args, dest)
        if value is not None and key not in ("env", "transform"):  # checked above
            run_values[key] = value
            source[key] = "--" + dest.replace("_", "-")
    settings = config_lib.build(config_lib.RunSettings, run_values, source)
    cfg = config_lib.build(agent_cls.Config, hyper, {})
    resume_lib.check(out, settings, cfg)
    return settings, cfg, agent_cls
