"""The command-line programs: parse the arguments, build settings, call the Python API below.

One module per program (``train``, ``evaluate``, ``benchmark``, ``sweep``, ``tune``, ``bench``,
``targets``), each a ``main(argv)``; :mod:`pgrad_app.cli.entry` holds the installed commands
and ``scripts/*.py`` the same programs as scripts. Nothing here quiets the terminal: the
entry points do (:func:`pgrad_app.quiet.silence`).
"""

from __future__ import annotations

import argparse

from pgrad_app.errors import UserError


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
