"""Schedules: a float hyperparameter as data, evaluated once per update from the run's progress.

A schedulable field of a config (its metadata says ``schedule``: the learning rates, the entropy
and value coefficients, PPO's clip ranges) takes

* a number: constant;
* ``"lin_X"`` (rl-zoo's spelling) or ``"lin_X_Y"``: linear from ``X`` at the start of the run to
  0 (or ``Y``) at its end;
* from Python, a function of the progress remaining, ``1`` at the start and ``0`` at the end
  (Stable-Baselines3's convention), or a Keras ``LearningRateSchedule`` (called with the update
  count, as the optimizer would call it).

"The run" is the env-step budget the training loop trains to (``agent.learn(N)``: the counter
it reaches, ``pgrad-train``: ``--total-steps``; :attr:`agents.base.ActorCriticAgent.budget`):
``progress_remaining = 1 - env_steps / budget`` after the update's rollout. An agent stepped by
hand without a budget stays at its start values. The legacy ``lr_decay_steps`` /
``clip_decay_steps`` decay over an absolute number of env steps instead.

:class:`Schedules` evaluates every scheduled field of a config in Python (a few float
operations) and hands the values to the compiled update as one input, which assigns the
optimizers' learning rates and puts every value into the transform context by its field name
(``context["clip_range"]``, ``context["ent_coef"]``, ...): nothing is re-traced when a value
changes and nothing is computed twice.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

_LINEAR = re.compile(r"^lin_([^_]+)(?:_([^_]+))?$")
FORMS = ("a number", "'lin_X' or 'lin_X_Y' (linear from X to 0 or Y over the run)",
         "a Python function of the progress remaining (1 -> 0)", "a Keras LearningRateSchedule")


@dataclass(frozen=True)
class Linear:
    """``start`` at the start of the run (progress remaining 1), ``end`` at its end (0)."""

    start: float
    end: float = 0.0

    def __call__(self, progress_remaining: float) -> float:
        return self.end + (self.start - self.end) * progress_remaining


@dataclass(frozen=True)
class Constant:
    value: float

    def __call__(self, progress_remaining: float) -> float:
        del progress_remaining
        return self.value


class _Keras:
    """A Keras ``LearningRateSchedule``, called with the update count (the optimizer's step)."""

    by_updates = True

    def __init__(self, schedule):
        self.schedule = schedule

    def __call__(self, updates: int) -> float:
        return float(self.schedule(updates))


def is_keras_schedule(value: Any) -> bool:
    try:
        import keras

        return isinstance(value, keras.optimizers.schedules.LearningRateSchedule)
    except ImportError:  # pragma: no cover
        return False


def parse(value: Any, name: str) -> Callable:
    """``value`` (see the module docstring) as a schedule; a clear ValueError naming ``name``."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be {', '.join(FORMS)}; got {value!r}")
    if isinstance(value, (int, float)):
        return Constant(float(value))
    if isinstance(value, str):
        text = value.strip()
        try:
            return Constant(float(text))
        except ValueError:
            pass
        match = _LINEAR.match(text)
        if match:
            try:
                start, end = float(match.group(1)), float(match.group(2) or 0.0)
            except ValueError:
                match = None
            else:
                return Linear(start, end)
        raise ValueError(f"{name} must be {', '.join(FORMS)}; got {value!r}")
    if is_keras_schedule(value):
        return _Keras(value)
    if callable(value):
        return value
    raise ValueError(f"{name} must be {', '.join(FORMS)}; got {type(value).__name__}")


def is_data(value: Any) -> bool:
    """Whether ``value`` is a number or a string schedule (what config.yaml can hold)."""
    return isinstance(value, (int, float, str)) and not isinstance(value, bool)


def scheduled_fields(cfg: Any) -> list[str]:
    """The names of the schedulable fields of a config, in field order."""
    return [f.name for f in fields(cfg) if f.metadata.get("schedule")]


def bounds(value: Any, name: str) -> list[float]:
    """The values a schedule takes that can be checked before the run: both ends of a linear
    one, a constant's value; a Python function is called at the start and the end (a Keras
    schedule at update 0)."""
    schedule = parse(value, name)
    if isinstance(schedule, Linear):
        points = [schedule.start, schedule.end]
    elif isinstance(schedule, _Keras):
        points = [schedule(0)]
    else:
        try:
            points = [float(schedule(1.0)), float(schedule(0.0))]
        except Exception as err:  # the user's function: say which and why, in one line
            raise ValueError(f"{name}: the schedule function raised {type(err).__name__} at "
                             f"progress 1 or 0: {err}") from None
    for p in points:
        if not math.isfinite(p):
            raise ValueError(f"{name} must stay finite; its schedule gives {p}")
    return points


def may_be_positive(value: Any, name: str) -> bool:
    """Whether the schedule of ``name`` can be > 0 (a constant 0 leaves its term out)."""
    schedule = parse(value, name)
    if isinstance(schedule, Constant):
        return schedule.value > 0
    if isinstance(schedule, Linear):
        return schedule.start > 0 or schedule.end > 0
    return True


class Schedules:
    """Every scheduled field of ``cfg``, evaluated per update (see the module docstring).

    Args:
      cfg: an agent's config (validated). Its ``absolute_decays()`` names the legacy decays over
        absolute env steps (``lr_decay_steps``, PPO's ``clip_decay_steps``); a field's metadata
        ``floor`` is the least value it takes (PPO's clip range: a ratio clip of exactly 0 would
        freeze the policy).
    """

    def __init__(self, cfg: Any):
        self.names = scheduled_fields(cfg)
        self._fns = {n: parse(getattr(cfg, n), n) for n in self.names}
        decays = cfg.absolute_decays() if hasattr(cfg, "absolute_decays") else {}
        self._absolute = {k: int(v) for k, v in decays.items() if v}
        self._floors = {f.name: f.metadata["floor"] for f in fields(cfg)
                        if f.metadata.get("schedule") and f.metadata.get("floor") is not None}

    def values(self, env_steps: int, budget: int | None, updates: int) -> list[float]:
        """The value of every scheduled field, in :attr:`names` order, after a rollout that
        brought the counter to ``env_steps`` (``budget``: what the run trains to, or None)."""
        out = []
        for name in self.names:
            fn = self._fns[name]
            decay = self._absolute.get(name)
            if decay:  # legacy: start * (1 - env_steps / decay_steps), relative to 0 env steps
                value = fn(1.0) * max(0.0, 1.0 - env_steps / decay)
            elif getattr(fn, "by_updates", False):
                value = fn(updates)
            else:
                value = fn(min(1.0, max(0.0, 1.0 - env_steps / budget)) if budget else 1.0)
            value = float(value)
            if name in self._floors:
                value = max(value, self._floors[name])
            out.append(value)
        return out

    def constant(self, name: str) -> bool:
        """Whether the value of ``name`` is the same at every update."""
        return isinstance(self._fns[name], Constant) and name not in self._absolute

    def start(self, name: str) -> float:
        """The value of ``name`` at the start of a run."""
        return self.values(0, None, 0)[self.names.index(name)]
