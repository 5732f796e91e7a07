"""The registry of agents by name, found from their declarations (:mod:`agents.catalog.declare`).

Every module of ``agents/algorithms/`` (its ``ALGORITHMS``), every module a package names under
the "pgrad.algorithms" entry-point group, and every :func:`register` call add algorithms; no
table lists them. ``agents.names()`` and ``agents.config_class`` are these functions; the
command line, the tuner and the docs read them too. Finding the declarations imports no
TensorFlow. The agent classes are built from them by :func:`agents.base.agent_class`
(``agents.get``), on first use.
"""

from __future__ import annotations

import importlib
import pkgutil
import warnings
from importlib import metadata
from types import ModuleType
from typing import TYPE_CHECKING

from agents.catalog.declare import Algorithm

if TYPE_CHECKING:
    from agents.config import ActorCriticConfig

#: The package whose modules declare the algorithms pgrad ships.
PACKAGE = "agents.algorithms"
#: Third-party packages' declaration modules: ``[project.entry-points."pgrad.algorithms"]``.
ENTRY_POINTS = "pgrad.algorithms"

_found: dict[str, Algorithm] | None = None  # scanned once
_registered: dict[str, Algorithm] = {}  # register(): after the scan, may replace


def _declared(module: ModuleType) -> list[Algorithm]:
    """A module's ``ALGORITHMS`` (checked: each an :class:`Algorithm`)."""
    found = getattr(module, "ALGORITHMS", ())
    if isinstance(found, Algorithm):
        found = (found,)
    for alg in found:
        if not isinstance(alg, Algorithm):
            raise TypeError(f"{module.__name__}.ALGORITHMS holds {type(alg).__name__}, not "
                            "agents.catalog.declare.Algorithm.")
    return list(found)


def _add(into: dict[str, Algorithm], alg: Algorithm, where: str, seen: dict[str, str]) -> None:
    if alg.name in into:
        raise ValueError(f"two algorithms are named {alg.name!r}: in {seen[alg.name]} and in "
                         f"{where}.")
    into[alg.name], seen[alg.name] = alg, where


def _scan() -> dict[str, Algorithm]:
    found: dict[str, Algorithm] = {}
    seen: dict[str, str] = {}
    package = importlib.import_module(PACKAGE)
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.ispkg or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{PACKAGE}.{info.name}")
        for alg in _declared(module):
            _add(found, alg, module.__name__, seen)
    for point in metadata.entry_points(group=ENTRY_POINTS):
        try:  # an installed package's module: a broken one must not stop the others
            loaded = point.load()
            algs = ([loaded] if isinstance(loaded, Algorithm)
                    else _declared(loaded) if isinstance(loaded, ModuleType) else list(loaded))
            for alg in algs:
                _add(found, alg, f"entry point {point.value}", seen)
        except Exception as e:  # noqa: BLE001 - reported in one line, the rest still load
            warnings.warn(f"pgrad: the algorithms of entry point {point.name!r} "
                          f"({point.value}) were not loaded: {type(e).__name__}: {e}",
                          stacklevel=2)
    return found


def declarations() -> dict[str, Algorithm]:
    """Every algorithm by name: the shipped ones, the entry points', the registered ones."""
    global _found
    if _found is None:
        _found = _scan()
    return {**_found, **_registered}


def register(algorithm: Algorithm) -> Algorithm:
    """Adds (or replaces) ``algorithm`` for this process: ``agents.get``, ``agents.make`` and
    ``agents.load`` find it by its name. Returns it."""
    if not isinstance(algorithm, Algorithm):
        raise TypeError(f"register takes an agents.catalog.declare.Algorithm; got "
                        f"{type(algorithm).__name__}.")
    _registered[algorithm.name] = algorithm
    return algorithm


def names() -> list[str]:
    """Registered agent names."""
    return sorted(declarations())


def declaration(name: str) -> Algorithm:
    """The :class:`Algorithm` registered as ``name`` (case-insensitive)."""
    try:
        return declarations()[name.lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"unknown agent {name!r}; known agents: {', '.join(names())}.") from None


def config_class(name: str) -> type[ActorCriticConfig]:
    """The hyperparameter dataclass of the agent registered as ``name`` (case-insensitive),
    without importing the agent (nor TensorFlow)."""
    return declaration(name).config


def configs() -> dict[str, type[ActorCriticConfig]]:
    """Registered name -> its hyperparameter dataclass."""
    return {name: alg.config for name, alg in sorted(declarations().items())}


def class_names() -> dict[str, str]:
    """Agent class name (``"PPO"``) -> registered name (``"ppo"``)."""
    return {alg.class_name: name for name, alg in declarations().items()}
