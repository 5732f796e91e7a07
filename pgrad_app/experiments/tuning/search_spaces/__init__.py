"""Search spaces of ``pgrad-tune``: one YAML file per agent (``<agent>.yaml`` in this folder,
installed as package data) or the user's own (``--space FILE``), checked before any trial runs.

A space maps hyperparameters (fields of the agent's ``Config``) to how a trial samples them::

    learning_rate: {type: log_float, low: 1.0e-5, high: 1.0e-2}   # log-uniform
    vf_coef:       {type: float, low: 0.0, high: 1.0}              # uniform
    gamma:         {type: log_float, low: 1.0e-4, high: 0.03, one_minus: true}  # 1 - log-uniform
    epochs:        {type: int, low: 1, high: 20}                   # also step: N; log_int
    n_steps:       {type: categorical, choices: [8, 16, 32, 64]}
    hidden:        {type: categorical, choices: [[64], [64, 64], [256, 256]]}

``one_minus: true`` samples ``1 - value`` log-uniformly (rl-zoo's ``one_minus_gamma``: as many
trials between 0.99 and 0.999 as between 0.9 and 0.99); Optuna records the parameter as
``one_minus_<key>``. List choices (network widths) are recorded by Optuna as their YAML text
(``"[64, 64]"``; Optuna's categorical values are scalars) and decoded for the agent. Every key,
type, bound and choice is checked against the agent's ``Config`` field, with one-line errors
naming the file and the key. Before trial 0, :func:`check_values` also puts every value a
trial can sample at the extremes -- both ends of each range (for ``one_minus``, ``1 - low`` and
``1 - high``; for int ranges, the last value the step reaches) and every categorical choice --
through the agent's own validation (``Config.validate()``), with the other settings as the
study resolved them: a range that reaches a value the agent refuses (an optimizer it lacks, a
negative ``vf_coef``, an ``n_steps`` below 1 or past the per-update limit, an encoder it does
not know) is one line naming the file, the key and the value, not a study whose trials are all
pruned. A value is refused only if no other searched value rescues it: whether a sampled
*combination* is valid (``minibatch_size`` must divide ``n_steps x num_envs``, both searched)
is the trial's to find out: such a trial is pruned with the reason recorded.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from pathlib import Path
from typing import Any

import yaml

from pgrad_app.config import settings as config_lib
from pgrad_app.config import yamlfile
from pgrad_app.config.values import coerce, field_types, to_plain
from pgrad_app.errors import UserError, suggest

#: Where the agents' own spaces are: ``<agent name>.yaml`` each.
SPACE_DIR = Path(__file__).resolve().parent
#: The keys each type takes (``type`` itself aside); the first two are required where listed.
KINDS = {
    "float": ("low", "high", "one_minus"), "log_float": ("low", "high", "one_minus"),
    "int": ("low", "high", "step"), "log_int": ("low", "high"),
    "categorical": ("choices",),
}
REQUIRED = {"float": ("low", "high"), "log_float": ("low", "high"), "int": ("low", "high"),
            "log_int": ("low", "high"), "categorical": ("choices",)}


@dataclasses.dataclass(frozen=True)
class Param:
    """How one hyperparameter is sampled (a checked entry of a space file)."""

    key: str  # the Config field
    kind: str  # a key of KINDS
    low: float | int | None = None
    high: float | int | None = None
    step: int | None = None
    choices: tuple = ()  # typed values as the Config holds them
    one_minus: bool = False

    @property
    def name(self) -> str:
        """The parameter's name in the Optuna study."""
        return f"one_minus_{self.key}" if self.one_minus else self.key

    def labels(self) -> list:
        """The categorical choices as Optuna stores them (lists as their YAML text)."""
        return [_label(c) for c in self.choices]

    def suggest(self, trial) -> Any:
        """Samples this parameter in an Optuna trial; returns the value for the ``Config``."""
        if self.kind == "categorical":
            label = trial.suggest_categorical(self.name, self.labels())
            return self.choices[self.labels().index(label)]
        if self.kind in ("int", "log_int"):
            return trial.suggest_int(self.name, self.low, self.high, step=self.step or 1,
                                     log=self.kind == "log_int")
        value = trial.suggest_float(self.name, self.low, self.high, log=self.kind == "log_float")
        return 1.0 - value if self.one_minus else value

    def describe(self) -> str:
        """One line for the report: ``log_float [1e-05, 0.01]``."""
        if self.kind == "categorical":
            return "categorical " + ", ".join(
                str(c).lower() if isinstance(c, bool) else str(c) for c in self.labels())
        prefix = "1 - " if self.one_minus else ""
        step = f" step {self.step}" if self.step else ""
        return f"{prefix}{self.kind} [{self.low:g}, {self.high:g}]{step}"


def _label(value: Any) -> Any:
    """A choice as an Optuna categorical value: scalars as they are, lists as YAML text."""
    if isinstance(value, (list, tuple)):
        return yaml.safe_dump(to_plain(value), default_flow_style=True).strip()
    return value


@dataclasses.dataclass(frozen=True)
class Space:
    """A checked search space: its parameters in file order and where it was read from."""

    params: tuple[Param, ...]
    path: str

    @property
    def keys(self) -> list[str]:
        return [p.key for p in self.params]

    def sample(self, trial) -> dict[str, Any]:
        """``{Config field: value}`` sampled in ``trial`` (each parameter once, file order)."""
        return {p.key: p.suggest(trial) for p in self.params}

    def as_data(self) -> dict[str, dict]:
        """The space as plain data (recorded in the study, to refuse a changed one)."""
        return {p.key: {f.name: to_plain(getattr(p, f.name)) for f in dataclasses.fields(p)
                        if f.name != "key"} for p in self.params}


def declared_space(agent_name: str) -> tuple[str, dict] | None:
    """``(label, entries)`` of the space the algorithm's declaration carries
    (``Algorithm.search_space``), or None: it has none (its space is the shipped file)."""
    from agents.catalog import registry

    try:
        declaration = registry.declaration(agent_name)
    except ValueError:
        return None
    if declaration.search_space is None:
        return None
    return (f"{declaration.config.__module__} (the search_space of {declaration.name!r})",
            dict(declaration.search_space))


def path_for(agent_name: str) -> Path:
    """The shipped space of ``agent_name`` (it may not exist)."""
    return SPACE_DIR / f"{agent_name.lower()}.yaml"


def load(agent_name: str, config_cls: type, path: str | Path | None = None) -> Space:
    """Reads and checks the space of ``agent_name``: ``path``, else the one its declaration
    carries, else the shipped file.

    Raises:
      UserError: no such file, malformed YAML, or an entry that is not a valid sampling rule for
        its ``Config`` field; the message names the file and the key.
    """
    if path is None:
        declared = declared_space(agent_name)
        if declared is not None:
            label, raw = declared
        else:
            path = path_for(agent_name)
            if not path.is_file():
                raise UserError(f"no search space ships for agent {agent_name!r} ({path}); "
                                "give one with --space FILE (docs/tuning.md).")
            label, raw = str(path), yamlfile.load_yaml(path)
    else:
        label, raw = str(path), yamlfile.load_yaml(path)
    if not raw:
        raise UserError(f"{label}: the search space is empty; give at least one hyperparameter.")
    types = field_types(config_cls)
    params = []
    for key, spec in raw.items():
        key = str(key)
        where = f"{label}: {key}"
        if key not in types:
            if key in config_lib.RUN_KEYS:
                raise UserError(f"{where}: a run setting, not a hyperparameter (pgrad-tune sets "
                                "the run itself: --steps, --seed).")
            hint = suggest(key, types) or f" Known: {', '.join(types)}."
            raise UserError(f"{where}: unknown hyperparameter of {agent_name}.{hint}")
        params.append(_param(key, spec, types[key], where))
    return Space(tuple(params), label)


def _number(value: Any, tp: type, where: str) -> float | int:
    typed = coerce(value, tp, where)
    if not math.isfinite(typed):
        raise UserError(f"{where}: must be a finite number; got {value!r}.")
    return typed


def _holds(field_type: Any, want: type) -> bool:
    """Whether a field takes numbers of type ``want``: ``float``, or a union with it (a field
    that also takes a schedule is ``float | str``)."""
    return field_type is want or want in typing.get_args(field_type)


def _param(key: str, spec: Any, field_type: Any, where: str) -> Param:
    """One checked entry (see the module docstring for the schema)."""
    if not isinstance(spec, dict) or "type" not in spec:
        raise UserError(f"{where}: expected a mapping with a type, e.g. {{type: log_float, "
                        f"low: 1.0e-5, high: 1.0e-2}}; got {spec!r}.")
    kind = spec["type"]
    if kind not in KINDS:
        raise UserError(f"{where}: type must be one of {', '.join(KINDS)}; got {kind!r}."
                        f"{suggest(str(kind), KINDS)}")
    for name in spec:
        if name != "type" and name not in KINDS[kind]:
            raise UserError(f"{where}: {kind} takes {', '.join(KINDS[kind])}; got {name!r}.")
    for name in REQUIRED[kind]:
        if name not in spec:
            raise UserError(f"{where}: {kind} needs {' and '.join(REQUIRED[kind])}.")
    if kind == "categorical":
        choices = spec["choices"]
        if not isinstance(choices, list) or not choices:
            raise UserError(f"{where}: choices must be a non-empty list; got {choices!r}.")
        typed = tuple(coerce(c, field_type, f"{where}: choice {c!r}") for c in choices)
        labels = [_label(c) for c in typed]
        if len(set(map(repr, labels))) != len(labels):
            raise UserError(f"{where}: choices hold a value twice: {choices!r}.")
        return Param(key, kind, choices=typed)
    want = float if kind.endswith("float") else int
    if not _holds(field_type, want):
        fits = "float, log_float" if _holds(field_type, float) else (
            "int, log_int" if _holds(field_type, int) else "")
        raise UserError(f"{where}: type {kind} samples {want.__name__}s, but {key} is "
                        f"{getattr(field_type, '__name__', field_type)}; use "
                        f"{fits + ' or ' if fits else ''}categorical.")
    low, high = (_number(spec[b], want, f"{where}: {b}") for b in ("low", "high"))
    if not low < high:
        raise UserError(f"{where}: low must be < high; got low {low}, high {high}.")
    if kind.startswith("log") and low <= 0:
        raise UserError(f"{where}: {kind} needs low > 0; got {low}.")
    step = spec.get("step")
    if step is not None:
        step = int(_number(step, int, f"{where}: step"))
        if step < 1 or (high - low) % step:
            raise UserError(f"{where}: step must be >= 1 and divide high - low; got {step}.")
    one_minus = spec.get("one_minus", False)
    if not isinstance(one_minus, bool):
        raise UserError(f"{where}: one_minus must be true or false; got {one_minus!r}.")
    return Param(key, kind, low, high, step, one_minus=one_minus)


def extremes(param: Param) -> list[tuple[str, Any]]:
    """``(what, value)`` for every extreme value ``param`` samples, as the ``Config`` gets it:
    each categorical choice, else both ends of the range (``1 - end`` with ``one_minus``; for an
    int range, the last value its step reaches)."""
    if param.kind == "categorical":
        return [("choice", c) for c in param.choices]
    low, high = param.low, param.high
    assert low is not None and high is not None  # a range: checked by _param
    if param.kind in ("int", "log_int"):
        step = param.step or 1
        high = low + (high - low) // step * step
    ends = [("low end", low), ("high end", high)]
    if param.one_minus:
        return [(f"{what} (1 - {value:g})", 1.0 - value) for what, value in ends]
    return ends


def _refusal(config_cls: type, values: dict[str, Any]) -> str | None:
    """Why ``config_cls(**values).validate()`` refuses ``values``, or None if it accepts."""
    types = field_types(config_cls)
    try:
        typed = {k: coerce(v, types[k], k) for k, v in values.items()}
        obj = config_cls(**typed)
        if hasattr(obj, "validate"):
            obj.validate()
    except (ValueError, TypeError, UserError) as err:
        return str(err).rstrip(".")
    return None


def check_values(space: Space, config_cls: type, base: dict[str, Any], agent_name: str) -> None:
    """Checks, before any trial, that every extreme value of each parameter (:func:`extremes`)
    is one the agent's ``Config`` accepts with the study's other settings (``base``).

    A value that fails with ``base`` alone is tried once more beside each extreme value of
    every other searched parameter: if one of them makes it valid, the failure is a
    combination's (the trial that samples it is pruned); if none does, the range itself is
    wrong.

    Raises:
      UserError: ``FILE: KEY: the low end VALUE is refused by AGENT: REASON`` for the first
        such value.
    """
    ends = {p.key: extremes(p) for p in space.params}
    for param in space.params:
        for what, value in ends[param.key]:
            why = _refusal(config_cls, {**base, param.key: value})
            if why is None:
                continue
            rescued = any(
                _refusal(config_cls, {**base, other.key: w, param.key: value}) is None
                for other in space.params if other.key != param.key
                for _, w in ends[other.key])
            if not rescued:
                shown = yaml.safe_dump(to_plain(value), default_flow_style=True).strip()
                shown = shown.removesuffix("\n...").strip()
                raise UserError(f"{space.path}: {param.key}: the {what} {shown} is refused by "
                                f"{agent_name}: {why}; every value a trial may sample must be "
                                "valid (narrow the range or drop the choice).")
