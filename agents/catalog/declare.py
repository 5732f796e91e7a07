"""An algorithm is one declaration: its config, its chain and its optional parts, in one module.

A module in ``agents/algorithms/`` (or any module registered with :func:`register`, or named by a
package's "pgrad.algorithms" entry point) declares its algorithms in a module attribute
``ALGORITHMS``::

    @dataclass
    class TRPOConfig(NPGConfig):
        backtrack_steps: int = field(default=10, metadata=doc("line-search halvings at most"))

    def trpo_chain(cfg):
        import pgrad  # inside: declarations load without TensorFlow
        return pgrad.chain(pgrad.natural_gradient(cfg.damping, max_kl=cfg.max_kl), name="trpo")

    ALGORITHMS = (Algorithm("trpo", "TRPO", TRPOConfig, chain=trpo_chain,
                            summary="NPG with TRPO's line search"),)

and nothing else changes: ``agents.names()``, ``agents.get("trpo")`` / agents.TRPO,
``pgrad-train --algo trpo`` (its ``--help`` lists the config's fields), ``pgrad-tune`` and the
docs' algorithm table find it (:mod:`agents.catalog.registry` scans the modules). The agent class
is the actor-critic agent with the declaration's config, chain and parts; an algorithm with a step
of its own (IMPALA's actor-learner) names its class instead (``agent="module:Class"``).

Declaration modules import no TensorFlow at the top (``pgrad-train --help`` lists every config
before TensorFlow loads): chains and parts import ``pgrad`` inside their functions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class Algorithm:
    """One algorithm, as the registry finds it.

    Attributes:
      name: the registry name (lower case: ``pgrad-train --algo NAME``, saved agents' ``agent``).
      class_name: the agent class's name (``agents.<class_name>``, e.g. ``"PPO"``).
      config: its hyperparameter dataclass (an ``agents.config.ActorCriticConfig`` subclass).
      chain: ``config -> pgrad.GradientTransform``, the default policy-gradient chain; None:
        the actor-critic agent's ``chain(weight_by("advantages"), mean_steps())``.
      targets: ``config -> targets part`` (:mod:`agents.update.targets`); None: GAE(lambda).
      policy_step: ``config -> part`` called after each applied policy step (TRPO's line
        search, :mod:`agents.update.line_search`); None: the optimizer's step stands.
      agent: ``"module:Class"`` of an agent class with code of its own (imported on first use);
        None: the actor-critic agent with the parts above.
      summary: one line for the docs' table and ``--help``.
      search_space: ``pgrad-tune``'s search space, as the entries of a space file
        (:mod:`pgrad_app.experiments.tuning.search_spaces`); None: the shipped
        ``<name>.yaml`` there, if any.
    """

    name: str
    class_name: str
    config: type
    chain: Callable[[Any], Any] | None = None
    targets: Callable[[Any], Any] | None = None
    policy_step: Callable[[Any], Any] | None = None
    agent: str | None = None
    summary: str = ""
    search_space: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        where = f"algorithm {self.name!r}"
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ValueError(f"{where}: the name must be lower case letters, digits and '_', "
                             "starting with a letter.")
        if not self.class_name.isidentifier():
            raise ValueError(f"{where}: class_name {self.class_name!r} is not a Python name.")
        if not isinstance(self.config, type) or not hasattr(self.config, "validate"):
            raise TypeError(f"{where}: config must be an ActorCriticConfig subclass; got "
                            f"{self.config!r}.")
        for part in ("chain", "targets", "policy_step"):
            value = getattr(self, part)
            if value is not None and not callable(value):
                raise TypeError(f"{where}: {part} must be a function of the config; got "
                                f"{type(value).__name__}.")
        if self.search_space is not None and not isinstance(self.search_space, Mapping):
            raise TypeError(f"{where}: search_space must be a mapping of hyperparameters to "
                            f"sampling rules; got {type(self.search_space).__name__}.")
        if self.agent is not None and (":" not in self.agent or self.agent.count(":") != 1):
            raise ValueError(f"{where}: agent must be 'module:Class'; got {self.agent!r}.")
