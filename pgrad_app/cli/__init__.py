"""The command-line programs: ``pgrad-train`` / ``scripts/train.py`` and ``pgrad-evaluate`` /
``scripts/evaluate.py`` (one ``main(argv)`` each; parse, build settings, call the Python API)."""

from __future__ import annotations

import os
import sys


def command(name: str) -> str:
    """How the user runs command ``name`` ("train", "evaluate") in this process, for messages:
    ``python scripts/train.py`` when started as the script, else the installed ``pgrad-train``."""
    if os.path.basename(sys.argv[0] if sys.argv else "") == f"{name}.py":
        return f"python scripts/{name}.py"
    return f"pgrad-{name}"
