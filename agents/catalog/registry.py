"""The registry of agents by name: their config classes (no TensorFlow) and, on first use, their
classes. ``agents.names()``, ``agents.get`` and ``agents.config_class`` are these functions;
persistence reads agents back through them without climbing up to the ``agents`` package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agents.catalog.configs import CONFIGS

if TYPE_CHECKING:
    from agents.config import ActorCriticConfig

#: name -> (module, class) of each agent; the module is imported (with TensorFlow) on first use.
CLASSES = {"a2c": ("agents.algorithms.a2c", "A2C"), "appo": ("agents.algorithms.impala", "APPO"),
           "impala": ("agents.algorithms.impala", "IMPALA"), "npg": ("agents.algorithms.npg",
           "NPG"),
           "ppo": ("agents.algorithms.ppo", "PPO"),
           "reinforce": ("agents.algorithms.reinforce", "Reinforce")}


def names() -> list[str]:
    """Registered agent names."""
    return sorted(CONFIGS)


def config_class(name: str) -> type[ActorCriticConfig]:
    """The hyperparameter dataclass of the agent registered as ``name`` (case-insensitive),
    without importing the agent (nor TensorFlow)."""
    try:
        return CONFIGS[name.lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"unknown agent {name!r}; known agents: {', '.join(names())}.") from None


def get(name: str) -> Any:
    """The agent class registered as ``name`` (case-insensitive): an
    :class:`agents.base.ActorCriticAgent` subclass (typed ``Any``: the registry sits below it)."""
    config_class(name)  # an unknown name: one line listing the known ones
    module, attr = CLASSES[name.lower()]
    return getattr(importlib.import_module(module), attr)
