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
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pgrad.core.errors import UserError, suggest
from pgrad_app.cli import command
from pgrad_app.plugins import TRANSFORM_KINDS, load_transform, resolve_env  # noqa: F401  (re-exported)

HYPER_KEY = "hyperparameters"
#: A config file larger than this is not a config (e.g. ``--config /dev/zero``).
MAX_CONFIG_BYTES = 1 << 20
#: Upper bounds of the run settings (a typo such as an extra zero is refused, not run).
MAX_TOTAL_STEPS = 10**12
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
        default=10_000,
        metadata={"help": "env steps between checkpoints (one is also saved at the end)"},
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
    track: str | None = field(
        default=None,
        metadata={"help": "experiment tracking besides the run directory: 'wandb' (pip install "
                  "'pgrad[wandb]'); none: off"},
    )

    def validate(self) -> None:
        """Raises ``ValueError`` naming the field and its range."""
        for name in ("total_steps", "checkpoint_every", "max_nonfinite_skips"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1; got {getattr(self, name)}.")
            if getattr(self, name) > MAX_TOTAL_STEPS:
                raise ValueError(f"{name} must be <= {MAX_TOTAL_STEPS:,}; "
                                 f"got {getattr(self, name):,}.")
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
        if not 1 <= self.eval_episodes <= 10_000:
            raise ValueError(f"eval_episodes must be in [1, 10000]; got {self.eval_episodes}.")
        if self.track not in TRACKERS:
            raise ValueError(f"track must be one of {[t for t in TRACKERS if t]} or none; "
                             f"got {self.track!r}.")


RUN_KEYS = tuple(f.name for f in dataclasses.fields(RunSettings))


# ---------------------------------------------------------------------------------------------
# Typed values.
# ---------------------------------------------------------------------------------------------


def field_types(cls: type) -> dict[str, Any]:
    """``{field name: resolved type}`` of a dataclass (string annotations resolved)."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # unresolvable annotation: fall back to the raw ones
        hints = {}
    return {f.name: hints.get(f.name, f.type) for f in dataclasses.fields(cls)}


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def coerce(value: Any, tp: Any, where: str) -> Any:
    """Checks ``value`` (already parsed from YAML) against type ``tp``; converts where lossless.

    Raises:
      UserError: naming ``where`` (e.g. ``"--set gamma"``), the expected type and the value.
    """
    if tp is Any or tp is None:
        return value
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(value, arg, where)
            except UserError as err:
                errors.append(err)
        raise UserError(f"{where}: expected {_type_name(tp)}; got {value!r}.")
    if origin is typing.Literal:
        if value in args:
            return value
        hint = suggest(str(value), map(str, args))
        raise UserError(f"{where}: must be one of {list(args)}; got {value!r}.{hint}")
    if origin in (tuple, list) or tp in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise UserError(f"{where}: expected a list like [64, 64]; got {value!r}.")
        if origin is tuple and args and args[-1] is Ellipsis:
            items = [coerce(v, args[0], where) for v in value]
        elif origin is tuple and args:
            if len(args) != len(value):
                raise UserError(f"{where}: expected {len(args)} values; got {value!r}.")
            items = [coerce(v, a, where) for v, a in zip(value, args)]
        else:
            items = [coerce(v, args[0], where) if args else v for v in value]
        return tuple(items) if (origin is tuple or tp is tuple) else items
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise UserError(f"{where}: expected true or false; got {value!r}.")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:  # "1e5" or "100_000" -> int (PyYAML reads "1e5" as a string)
                as_float = float(value)
                if as_float.is_integer():
                    return int(as_float)
            except ValueError:
                pass
        raise UserError(f"{where}: expected an integer; got {value!r}.")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:  # PyYAML reads "1e-3" (no dot) as a string
                return float(value)
            except ValueError:
                pass
        raise UserError(f"{where}: expected a number; got {value!r}.")
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise UserError(f"{where}: expected a string; got {value!r}.")
    return value


def parse_set(pair: str, flag: str = "--set") -> tuple[str, Any]:
    """``"key=value"`` -> ``(key, value parsed as YAML)``; the value is typed later."""
    if "=" not in pair:
        raise UserError(f"{flag} {pair!r}: expected key=value, e.g. {flag} gamma=0.98.")
    key, text = pair.split("=", 1)
    key = key.strip()
    if not key:
        raise UserError(f"{flag} {pair!r}: the key is empty.")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        value = text  # a plain string such as "a:b" that YAML cannot read
    return key, value


# ---------------------------------------------------------------------------------------------
# YAML files.
# ---------------------------------------------------------------------------------------------


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Reads a YAML mapping with the safe loader; errors name the file and line.

    Raises:
      UserError: missing file, malformed YAML (with line and column), or not a mapping.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES:
            raise UserError(f"config file {str(path)!r} is larger than "
                            f"{MAX_CONFIG_BYTES // 1024} KiB; it is not a pgrad config.")
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise UserError(f"config file {str(path)!r} does not exist.") from None
    except IsADirectoryError:
        raise UserError(f"config file {str(path)!r} is a directory.") from None
    except OSError as err:
        raise UserError(f"cannot read config file {str(path)!r}: {err.strerror or err}.") from None
    except UnicodeDecodeError as err:
        raise UserError(f"config file {str(path)!r} is not UTF-8 text ({err.reason} at byte "
                        f"{err.start}).") from None
    if "\0" in text:
        raise UserError(f"config file {str(path)!r} holds NUL bytes; it is not a YAML file.")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(err, "problem", None) or "could not parse"
        raise UserError(f"{where}: malformed YAML: {problem}.") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of key: value; got a {type(data).__name__}.")
    return data


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


def to_plain(value: Any) -> Any:
    """Dataclass values -> YAML-safe plain values (tuples become lists)."""
    if isinstance(value, (tuple, list)):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    return value


def dump_run_config(settings: RunSettings, hyper: Any) -> str:
    """The fully resolved ``config.yaml`` text: run settings, then every hyperparameter."""
    data = {k: to_plain(v) for k, v in dataclasses.asdict(settings).items()}
    data[HYPER_KEY] = {f.name: to_plain(getattr(hyper, f.name)) for f in dataclasses.fields(hyper)}
    header = (
        "# pgrad run configuration, fully resolved (every setting, defaults included).\n"
        f"# Reproduce: {command('train')} --config config.yaml --out NEW_DIR\n"
    )
    return header + yaml.safe_dump(data, sort_keys=False, default_flow_style=None)


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
    from agents.persistence import AGENT_FILE, read_description

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
    return values


def saved_transform(path: Path) -> str | None:
    """The name of the custom transform a saved agent was trained with (``None``: its own)."""
    from agents.persistence import read_description

    try:
        return read_description(path).get("transform")
    except ValueError:
        return None
