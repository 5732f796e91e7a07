"""The installed commands (``[project.scripts]``) and the scripts' one line: quiet the terminal,
then run one program's ``main(argv)`` with one-line errors and exit codes, then end the process
(:func:`finish`)."""

from __future__ import annotations

import atexit
import importlib
import os
import sys
from typing import NoReturn

PROGRAMS = {
    "train": "pgrad_app.cli.train", "evaluate": "pgrad_app.cli.evaluate",
    "benchmark": "pgrad_app.cli.benchmark", "sweep": "pgrad_app.cli.sweep",
    "bench": "pgrad_app.cli.bench", "learning_targets": "pgrad_app.cli.targets",
    "tune": "pgrad_app.cli.tune", "export": "pgrad_app.cli.export",
    "compare": "pgrad_app.cli.compare",
}


#: Programs whose modules import no TensorFlow before main runs: parsed before silence().
PARSE_FIRST = ("train", "evaluate", "benchmark", "sweep", "learning_targets", "tune", "export",
               "compare")


def run(program: str, argv: list[str] | None = None) -> int:
    """Silences TensorFlow's start-up noise, then runs ``program`` (a key of :data:`PROGRAMS`).

    The arguments are parsed first, before TensorFlow is imported (silence() imports it): a
    mistyped flag or ``--help`` is answered at once, not after TensorFlow's seconds of start-up
    (``pgrad-train --help`` lists every agent's hyperparameters from their config dataclasses,
    which are data: the algorithms' declarations, :mod:`agents.catalog.declare`).
    """
    from pgrad_app.errors import run_cli

    args = sys.argv[1:] if argv is None else list(argv)
    if "--reproducible" in args:  # before TensorFlow's import (silence), and for child processes
        from pgrad_app.quiet import REPRODUCIBLE

        os.environ[REPRODUCIBLE] = "1"
    if program not in PARSE_FIRST:  # its module imports TensorFlow itself: quiet it first
        from pgrad_app.quiet import silence

        silence(keras_extras=False)
    module = importlib.import_module(PROGRAMS[program])
    parser = getattr(module, "build_parser", None)
    wants_help = any(a in ("-h", "--help") for a in args)
    if parser is not None:
        code = run_cli(lambda a: _parse_only(parser, a), args)
        if code != 0 or wants_help:
            return code
    from pgrad_app.quiet import silence

    silence(keras_extras=False)  # the command's own process: Keras's pandas and IPython skipped
    return run_cli(module.main, argv)


def _parse_only(build_parser, args: list[str] | None) -> int:
    try:
        build_parser().parse_args(args)
    except SystemExit as done:  # --help printed: argparse exits 0
        return int(done.code or 0)
    return 0


def finish(code: int) -> NoReturn:
    """Ends a command's process with exit code ``code``, skipping the interpreter's teardown.

    A normal exit first finalises every module: with TensorFlow, Keras and TFP loaded (~5,000
    modules) that alone took ~1.5 s of CPU (measured: docs/performance.md), a tenth of a
    whole CartPole run through ``pgrad-train``. Everything else a normal exit does that a
    process can observe is done as usual: the ``atexit`` handlers run (which also run
    ``weakref.finalize`` objects, logging's shutdown, multiprocessing's clean-up, Ray's and
    W&B's), then ``stdout`` and ``stderr`` are flushed. The commands close their own files
    (run directory, logs, checkpoints) before they return. A normal exit is kept where the
    shortcut could lose something: under a profiler or tracer (cProfile writes its stats after
    the program returns), or while a non-daemon thread is still running (it is waited for).
    """
    import threading

    main = threading.main_thread()
    others = [t for t in threading.enumerate() if t is not main and not t.daemon]
    if others or sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)
    try:
        atexit._run_exitfuncs()  # what the interpreter runs first at exit
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # closed, or a broken pipe: as a normal exit
                pass
        os._exit(code)


def train() -> NoReturn:
    finish(run("train"))


def evaluate() -> NoReturn:
    finish(run("evaluate"))


def benchmark() -> NoReturn:
    finish(run("benchmark"))


def sweep() -> NoReturn:
    finish(run("sweep"))


def bench() -> NoReturn:
    finish(run("bench"))


def tune() -> NoReturn:
    finish(run("tune"))


def export() -> NoReturn:
    finish(run("export"))


def compare() -> NoReturn:
    finish(run("compare"))
