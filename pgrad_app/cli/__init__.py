"""The command-line programs: ``pgrad-train`` / ``scripts/train.py`` and ``pgrad-evaluate`` /
``scripts/evaluate.py`` (one ``main(argv)`` each; parse, build settings, call the Python API)."""

from __future__ import annotations

import argparse
import os
import sys

import pgrad_app.quiet  # noqa: F401,I001  (before pgrad: the commands import this package first)
from pgrad.core.errors import UserError


def command(name: str) -> str:
    """How the user runs command ``name`` ("train", "evaluate") in this process, for messages:
    ``python scripts/train.py`` when started as the script, else the installed ``pgrad-train``."""
    if os.path.basename(sys.argv[0] if sys.argv else "") == f"{name}.py":
        return f"python scripts/{name}.py"
    return f"pgrad-{name}"


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line and exit 2 (argparse's code) through
    :class:`UserError`, without argparse's usage block."""

    def error(self, message):
        raise UserError(f"{message} (see {self.prog} --help)")


def add_grid_args(p: argparse.ArgumentParser, example_agents: str) -> None:
    """``--agents``, ``--envs``, ``--seeds``: the axes shared by the benchmark and the sweep."""
    p.add_argument("--agents", nargs="+", metavar="AGENT",
                   help=f"agents to run (e.g. {example_agents})")
    p.add_argument("--envs", nargs="+", metavar="ENV",
                   help="Gymnasium env ids (or module:EnvId)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], metavar="S",
                   help="seeds (default: 0 1 2)")
