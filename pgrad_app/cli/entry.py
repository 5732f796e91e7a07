"""The installed commands (``[project.scripts]``) and the scripts' one line: quiet the terminal,
then run one program's ``main(argv)`` with one-line errors and exit codes."""

from __future__ import annotations

import importlib

PROGRAMS = {
    "train": "pgrad_app.cli.train", "evaluate": "pgrad_app.cli.evaluate",
    "benchmark": "pgrad_app.cli.benchmark", "sweep": "pgrad_app.cli.sweep",
    "bench": "pgrad_app.cli.bench", "learning_targets": "pgrad_app.cli.targets",
    "tune": "pgrad_app.cli.tune", "export": "pgrad_app.cli.export",
}


def run(program: str, argv: list[str] | None = None) -> int:
    """Silences TensorFlow's start-up noise, then runs ``program`` (a key of :data:`PROGRAMS`)."""
    from pgrad_app.quiet import silence

    silence()
    from pgrad_app.errors import run_cli

    return run_cli(importlib.import_module(PROGRAMS[program]).main, argv)


def train() -> int:
    return run("train")


def evaluate() -> int:
    return run("evaluate")


def benchmark() -> int:
    return run("benchmark")


def sweep() -> int:
    return run("sweep")


def bench() -> int:
    return run("bench")


def tune() -> int:
    return run("tune")


def export() -> int:
    return run("export")
