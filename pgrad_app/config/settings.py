"""Run configuration: dataclasses <-> YAML and ``--set key=value``, typed and validated.

A run is described by two things:

* :class:`RunSettings` -- what the training script itself needs (agent, env, seed, steps, ...);
* the agent's ``Config`` dataclass -- every hyperparameter, each documented in its field's
  ``metadata["help"]``.

A YAML file holds the run settings at the top level and the hyperparameters under
``hyperparameters:`` (hyperparameters may also be given at the top level, as a shorthand). Files
are read with ``yaml.safe_load`` only: no tags, no objects, nothing executed. Every value is
checked against the field's type, and every unknown key gets the nearest known key as a hint.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pgrad_app.config.values import coerce, field_types, to_plain
from pgrad_app.errors import UserError, command, suggest

HYPER_KEY = "hyperparameters"
#: Upper bounds of the run settings (a typo such as an extra zero is refused, not run).
MAX_TOTAL_STEPS = 10**12
#: The default checkpoint cadence: seconds of training between checkpoints (as Sample Factory's
#: ``save_every_sec``). Bounds what a crash can lose in time, whatever the env's speed: a fixed
#: 10,000 env steps wrote one nearly every update of a fast env (MinAtar PPO: 50 in a 40 s run).
DEFAULT_CHECKPOINT_SECONDS = 60.0
#: Experiment trackers ``track`` may name (``None``: the run directory only).
TRACKERS = (None, "wandb")


@dataclass
class RunSettings:
    """What ``pgrad-train`` needs besides the agent's hyperparameters."""

    agent: str = field(default="a2c", metadata={"help": "agent name (see agents.names())"})
    env: str = field(
        default="CartPole-v1",
        metadata={"help": "Gymnasium env id, or 'module:EnvId' (the module registers it)"},
    )
    env_kwargs: dict[str, Any] | None = field(
        default=None,
        metadata={"help": "keyword arguments of the env id's gymnasium.make (--env-kwargs k=v)"},
    )
    env_wrapper: list[Any] | str | None = field(
        default=None,
        metadata={"help": "wrappers applied to each env, in order: dotted names, or {name: kwargs}"
                  " (rl-zoo's env_wrapper; --env-wrapper NAME)"},
    )
    gym_packages: list[str] | None = field(
        default=None,
        metadata={"help": "modules imported before the env is made, to register their ids "
                  "(--gym-packages)"},
    )
    seed: int = field(default=0, metadata={"help": "seed for networks, sampling and envs"})
    total_steps: int = field(default=100_000, metadata={"help": "env steps to train for"})
    transform: str | None = field(
        default=None,
        metadata={"help": "user transform 'module:attr' (module may be a .py path); none: agent's"},
    )
    transform_args: dict[str, Any] | None = field(
        default=None,
        metadata={"help": "keyword arguments for the transform factory (--transform-arg k=v)"},
    )
    stop_at_return: float | None = field(
        default=None,
        metadata={"help": "stop once the mean return of the last 20 training episodes is >= this"},
    )
    checkpoint_every: int = field(
        default=0,
        metadata={"help": "env steps between checkpoints; 0: one every checkpoint_seconds of "
                  "training (one is also saved at the end and on a stop)"},
    )
    checkpoint_seconds: float = field(
        default=DEFAULT_CHECKPOINT_SECONDS,
        metadata={"help": "seconds of training between checkpoints when checkpoint_every is 0"},
    )
    log_every: int = field(
        default=0,
        metadata={"help": "updates between rows of updates.csv / TensorBoard (each the interval's "
                  "mean, KEY_max beside the norms); 0: the agent's (a2c 100, reinforce 10, "
                  "ppo and npg 1)"},
    )
    workers: int = field(
        default=0,
        metadata={"help": "rollout workers on Ray, the envs split among them (0: in-process)"},
    )
    max_nonfinite_skips: int = field(
        default=10,
        metadata={"help": "stop after this many consecutive updates skipped for NaN/Inf gradients"},
    )
    eval_every: int = field(
        default=0,
        metadata={"help": "evaluate on separate envs every this many env steps (eval.csv, best/);"
                  " 0: off"},
    )
    eval_episodes: int = field(
        default=10,
        metadata={"help": "episodes per evaluation during training (deterministic actions)"},
    )
    capture_video: int = field(
        default=0,
        metadata={"help": "film every N-th training episode of env 0 into videos/ (CleanRL's "
                  "--capture-video; gymnasium's RecordVideo, needs moviepy); 0: off"},
    )
    track: str | None = field(
        default=None,
        metadata={"help": "experiment tracking besides the run directory: 'wandb' (pip install "
                  "'pgrad[wandb]'); none: off"},
    )

    def validate(self) -> None:
        """Raises ``ValueError`` naming the field and its range."""
        if not 0 <= self.checkpoint_every <= MAX_TOTAL_STEPS:
            raise ValueError(f"checkpoint_every must be >= 0 (0: every checkpoint_seconds); "
                             f"got {self.checkpoint_every}.")
        if not 0 < self.checkpoint_seconds < float("inf"):
            raise ValueError(f"checkpoint_seconds must be > 0; got {self.checkpoint_seconds}.")
        for name in ("total_steps", "max_nonfinite_skips"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1; got {getattr(self, name)}.")
            if getattr(self, name) > MAX_TOTAL_STEPS:
                raise ValueError(f"{name} must be <= {MAX_TOTAL_STEPS:,}; "
                                 f"got {getattr(self, name):,}.")
        if not 0 <= self.log_every <= MAX_TOTAL_STEPS:
            raise ValueError(f"log_every must be >= 0 (0: the agent's default); "
                             f"got {self.log_every}.")
        if self.workers < 0:
            raise ValueError(f"workers must be >= 0; got {self.workers}.")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0; got {self.seed}.")
        if self.stop_at_return is not None and not math.isfinite(self.stop_at_return):
            raise ValueError(f"stop_at_return must be finite; got {self.stop_at_return}.")
        if self.transform_args is not None:
            if not isinstance(self.transform_args, dict):
                raise ValueError(f"transform_args must be a mapping of name: value; got "
                                 f"{self.transform_args!r}.")
            if self.transform is None:
                raise ValueError("transform_args need a transform (--transform MODULE:ATTR).")
        if not 0 <= self.eval_every <= MAX_TOTAL_STEPS:
            raise ValueError(f"eval_every must be >= 0 (0: off); got {self.eval_every}.")
        if self.capture_video < 0:
            raise ValueError(f"capture_video must be >= 0 (film every N-th episode; 0: off); "
                             f"got {self.capture_video}.")
        if not 1 <= self.eval_episodes <= 10_000:
            raise ValueError(f"eval_episodes must be in [1, 10000]; got {self.eval_episodes}.")
        if self.env_kwargs is not None and not isinstance(self.env_kwargs, dict):
            raise ValueError(f"env_kwargs must be a mapping of name: value; got "
                             f"{self.env_kwargs!r}.")
        for w in self.env_wrapper or ():
            if not (isinstance(w, str) or (isinstance(w, dict) and len(w) == 1)):
                raise ValueError(f"env_wrapper entries are dotted names or {{name: kwargs}}; "
                                 f"got {w!r}.")
        if self.track not in TRACKERS:
            raise ValueError(f"track must be one of {[t for t in TRACKERS if t]} or none; "
                             f"got {self.track!r}.")


RUN_KEYS = tuple(f.name for f in dataclasses.fields(RunSettings))


def split_keys(values: dict[str, Any], config_cls: type, source: str) -> tuple[dict, dict]:
    """Splits a flat mapping into run settings and hyperparameters; unknown keys are errors.

    A ``hyperparameters:`` sub-mapping is merged into the hyperparameters.
    """
    fields = field_types(config_cls)
    run, hyper = {}, {}
    for key, value in values.items():
        key = str(key)
        if key == HYPER_KEY and isinstance(value, dict):
            for sub, sub_value in value.items():
                sub = str(sub)
                if sub not in fields:
                    hint = suggest(sub, fields) or f" Known: {', '.join(fields)}."
                    raise UserError(f"{source}: unknown hyperparameter {sub!r}.{hint}")
                hyper[sub] = sub_value
        elif key in RUN_KEYS:
            run[key] = value
        elif key in fields:
            hyper[key] = value
        else:
            known = list(RUN_KEYS) + list(fields)
            hint = suggest(key, known) or (
                f" Run settings: {', '.join(RUN_KEYS)}; hyperparameters: {', '.join(fields)}."
            )
            raise UserError(f"{source}: unknown key {key!r}.{hint}")
    return run, hyper


def build(cls: type, values: dict[str, Any], source: dict[str, str]) -> Any:
    """Instantiates dataclass ``cls`` from typed ``values``; ``source[key]`` says where each came
    from (for error messages). Calls ``validate()`` if the class has one.
    """
    types_ = field_types(cls)
    typed = {k: coerce(v, types_[k], source.get(k, k)) for k, v in values.items()}
    try:
        obj = cls(**typed)
        if hasattr(obj, "validate"):
            obj.validate()
    except (ValueError, TypeError) as err:
        text = str(err)
        # Name where the offending value came from (a flag, --set, or a file) when we know it.
        origin = next((source[k] for k in values if k in source and text.startswith(k)), None)
        raise UserError(f"invalid setting{f' ({origin})' if origin else ''}: {text}") from None
    return obj


def dump_run_config(settings: RunSettings, hyper: Any) -> str:
    """The fully resolved ``config.yaml`` text: run settings, then every hyperparameter."""
    data = {k: to_plain(v) for k, v in dataclasses.asdict(settings).items()}
    data[HYPER_KEY] = {f.name: to_plain(getattr(hyper, f.name)) for f in dataclasses.fields(hyper)}
    python = {k: v for k, v in data[HYPER_KEY].items() if not _yaml_value(v)}
    for name, value in python.items():  # a Python function or model: this file names it only
        data[HYPER_KEY][name] = f"python:{getattr(value, '__qualname__', type(value).__name__)}"
    header = (
        "# pgrad run configuration, fully resolved (every setting, defaults included).\n"
        f"# Reproduce: {command('train')} --config config.yaml --out NEW_DIR\n"
    )
    return header + yaml.safe_dump(data, sort_keys=False, default_flow_style=None)


def _yaml_value(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_yaml_value(v) for v in value)
    if isinstance(value, dict):
        return all(_yaml_value(v) for v in value.values())
    return value is None or isinstance(value, (bool, int, float, str))


def field_help(cls: type) -> list[tuple[str, str, Any]]:
    """``(name, help, default)`` for each field of a dataclass (for ``--help`` listings)."""
    out = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        else:
            default = None
        out.append((f.name, f.metadata.get("help", ""), to_plain(default)))
    return out


def saved_run_values(path: Path) -> dict[str, Any] | None:
    """The settings of a directory ``agent.save`` wrote (``agent.json``, no ``config.yaml``) as a
    ``config.yaml`` mapping would hold them (agent, env, seed, hyperparameters), or ``None`` if
    ``path`` holds no ``agent.json``. A custom transform is recorded by name only, so it is not
    among them: the caller asks for it (:func:`saved_transform`).

    Raises:
      UserError: an ``agent.json`` that is not a pgrad agent record.
    """
    from agents.persistence.save_load import AGENT_FILE, read_description

    if not (path / AGENT_FILE).is_file():
        return None
    try:
        record = read_description(path)
    except ValueError as err:
        raise UserError(str(err)) from None
    values = {"agent": record["agent"], "seed": record.get("seed", 0),
              HYPER_KEY: record["hyperparameters"]}
    if record.get("env"):
        values["env"] = record["env"]
    for key in ("env_kwargs", "env_wrapper"):
        if record.get(key):
            values[key] = record[key]
    return values


def saved_transform(path: Path) -> str | None:
    """The name of the custom transform a saved agent was trained with (``None``: its own)."""
    from agents.persistence.save_load import read_description

    try:
        return read_description(path).get("transform")
    except ValueError:
        return None
