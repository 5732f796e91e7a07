"""Lazy public names of a package: ``module.NAME`` imports the module that defines it on first
use (a room's ``__init__`` lists its names, not its imports, so importing the room is cheap)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, home: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that resolves ``home[name]`` (the defining
    module's dotted name) on first use and keeps the value as a plain attribute."""

    def __getattr__(name: str) -> Any:
        if name not in home:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
