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


#: Programs whose modules import no TensorFlow before main runs: parsed before silence().
PARSE_FIRST = ("train", "evaluate", "benchmark", "sweep", "learning_targets", "tune", "export")


def run(program: str, argv: list[str] | None = None) -> int:
    """Silences TensorFlow's start-up noise, then runs ``program`` (a key of :data:`PROGRAMS`).

    The arguments are parsed first, before TensorFlow is imported (silence() imports it): a
    mistyped flag or ``--help`` is answered at once, not after TensorFlow's seconds of start-up
    (``pgrad-train --help`` lists every agent's hyperparameters from their config dataclasses,
    which are data: :mod:`agents.preset_configs`).
    """
    import sys

    from pgrad_app.errors import run_cli

    args = sys.argv[1:] if argv is None else list(argv)
    if program not in PARSE_FIRST:  # its module imports TensorFlow itself: quiet it first
        from pgrad_app.quiet import silence

        silence()
    module = importlib.import_module(PROGRAMS[program])
    parser = getattr(module, "build_parser", None)
    wants_help = any(a in ("-h", "--help") for a in args)
    if parser is not None:
        code = run_cli(lambda a: _parse_only(parser, a), args)
        if code != 0 or wants_help:
            return code
    from pgrad_app.quiet import silence

    silence()
    return run_cli(module.main, argv)


def _parse_only(build_parser, args: list[str]) -> int:
    try:
        build_parser().parse_args(args)
    except SystemExit as done:  # --help printed: argparse exits 0
        return int(done.code or 0)
    return 0


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
