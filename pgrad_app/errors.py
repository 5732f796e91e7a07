"""User-facing errors: one clear sentence, an exit code, no traceback unless asked for.

Scripts raise :class:`UserError` for anything the user can fix (a bad flag, config key, env id,
output directory) and :class:`RunError` when a started run has to stop (a transform that fails,
too many non-finite updates, an env that emits NaN). :func:`run_cli` turns either into one line on
stderr and an exit code; ``--debug`` re-raises so the full traceback shows.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable

#: Exit codes used by the scripts (documented in docs/troubleshooting.md).
EXIT_BAD_INPUT = 2
EXIT_RUN_FAILED = 1
EXIT_SIGINT = 130
EXIT_SIGTERM = 143


class PgradError(Exception):
    """An error whose message is written for the user; ``exit_code`` is what the script returns."""

    exit_code = EXIT_RUN_FAILED


class UserError(PgradError):
    """Bad input, found before anything is written: a flag, config key, env id, path."""

    exit_code = EXIT_BAD_INPUT


class RunError(PgradError):
    """A started run had to stop; the last good checkpoint is kept."""

    exit_code = EXIT_RUN_FAILED


class Interrupted(PgradError):
    """SIGINT / SIGTERM: the run saved a checkpoint and stops with 130 / 143."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def command(name: str) -> str:
    """How the user runs command ``name`` ("train", "evaluate") in this process, for messages:
    ``python scripts/train.py`` when started as the script, else the installed ``pgrad-train``."""
    if os.path.basename(sys.argv[0] if sys.argv else "") == f"{name}.py":
        return f"python scripts/{name}.py"
    return f"pgrad-{name}"


def one_line(text: str) -> str:
    """Collapses a multi-line message into one line (errors from libraries can be long).

    Bytes a path held that are not UTF-8 (``os.fsdecode``'s surrogates) are written escaped, so
    printing the line cannot fail in its turn.
    """
    line = " ".join(part.strip() for part in str(text).splitlines() if part.strip())
    return line.encode("utf-8", "backslashreplace").decode("utf-8")


def suggest(word: str, candidates: Iterable[str], n: int = 3) -> str:
    """`` Did you mean 'x'?`` for the closest candidates, or ``""`` if none is close."""
    import difflib

    close = difflib.get_close_matches(word, list(candidates), n=n, cutoff=0.6)
    if not close:
        return ""
    if len(close) == 1:
        return f" Did you mean {close[0]!r}?"
    return " Did you mean one of " + ", ".join(repr(c) for c in close) + "?"


def run_cli(main: Callable[[list[str] | None], int | None], argv: list[str] | None = None) -> int:
    """Runs a script's ``main(argv)``; a :class:`PgradError` becomes one line and its exit code.

    ``--debug`` anywhere in ``argv`` re-raises instead, so the traceback is shown.
    """
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    try:
        return int(main(args) or 0)
    except PgradError as err:
        if debug:
            raise
        prefix = "" if isinstance(err, Interrupted) else "error: "
        print(f"{prefix}{one_line(err)}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:  # outside the training loop (e.g. during start-up)
        if debug:
            raise
        print("interrupted", file=sys.stderr)
        return EXIT_SIGINT
