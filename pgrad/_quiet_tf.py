"""Imports TensorFlow without its start-up lines on stderr; importing this module does it.

``import pgrad`` (and the agents, which load pgrad first) imports TensorFlow through here, so a
user's script does not open with TensorFlow's start-up lines ("Could not find cuda drivers",
"oneDNN custom operations are on", the CPU-feature notice, "failed call to cuInit"). TensorFlow
writes them straight to file descriptor 2 while it loads, before it reads its own
``TF_CPP_MIN_LOG_LEVEL`` ("All log messages before absl::InitializeLog() is called are written
to STDERR"), so no setting made before the import hides them. Here fd 2 points at a temporary
file for the import only; afterwards every line that is not start-up noise is written to
stderr as TensorFlow wrote it: warnings, errors, Python's own output. An exception raised by
the import is raised as usual, after stderr is back.

Nothing global changes: ``TF_CPP_MIN_LOG_LEVEL=1`` is set while TensorFlow loads (it reads the
level once, then; later INFO lines such as XLA's "Compiled cluster" stay off, warnings and
errors stay on) and removed again; warning filters, ``os.environ`` and fd 2 end as they were.

The switches: ``PGRAD_TF_LOGS=1`` imports TensorFlow untouched (everything it says); a
``TF_CPP_MIN_LOG_LEVEL`` of the user's own wins: the start-up lines are then filtered at that
level (0 keeps them all), which TensorFlow itself fails to do for them. Nothing happens when
TensorFlow is already imported (the commands import it first: ``pgrad_app.quiet``).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile

#: Severity of an absl log line (``I1205 12:00:00.000000  123 file.cc:45] ...``): I, W, E, F.
_SEVERITY = {"I": 0, "W": 1, "E": 2, "F": 3}
_ABSL_LINE = re.compile(r"^([IWEF])\d{4} ")
#: absl's notice before its first lines; it announces the INFO lines below it.
_BANNER = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
#: The second line of the CPU-feature notice (an INFO line).
_CONTINUED = "To enable the following instructions:"
#: The CUDA probe's error on a machine without a GPU driver: start-up noise, not an error.
_NO_GPU = re.compile(r"cuda\w*\.cc:\d+\] failed call to cuInit")
#: The level while TensorFlow loads when the user set none: INFO off, warnings and errors on.
DEFAULT_LEVEL = 1


def keep(text: str, level: int, user_level: bool) -> str:
    """The lines of ``text`` (what TensorFlow wrote to fd 2 while loading) worth showing.

    Lines of TensorFlow's logger below ``level`` go, with the banner that announces them and
    the second line of the CPU-feature notice; without a level of the user's own
    (``user_level=False``) the CUDA probe's "failed call to cuInit" goes too. Any other line
    (a Python warning, a traceback, text of unknown form) stays.
    """
    kept, dropped_previous = [], False
    for line in text.splitlines(keepends=True):
        stripped = line.rstrip("\n")
        match = _ABSL_LINE.match(stripped)
        if match:
            dropped_previous = (_SEVERITY[match.group(1)] < level
                                or (not user_level and _NO_GPU.search(stripped) is not None))
            drop = dropped_previous
        elif stripped == _BANNER:
            drop = level > 0
        elif stripped.startswith(_CONTINUED):
            drop = dropped_previous
        else:
            drop = dropped_previous = False
        if not drop:
            kept.append(line)
    return "".join(kept)


def _user_level() -> int | None:
    """The user's own ``TF_CPP_MIN_LOG_LEVEL`` (None: not set; unreadable: 0, as TensorFlow)."""
    if "TF_CPP_MIN_LOG_LEVEL" not in os.environ:
        return None
    try:
        return int(os.environ["TF_CPP_MIN_LOG_LEVEL"])
    except ValueError:
        return 0


def import_tensorflow() -> None:
    """Imports TensorFlow (and queries its devices) with its start-up lines filtered out."""
    if "tensorflow" in sys.modules or os.environ.get("PGRAD_TF_LOGS", "") not in ("", "0"):
        import tensorflow  # noqa: F401

        return
    user = _user_level()
    try:
        sys.stderr.flush()
        saved = os.dup(2)
        capture = tempfile.TemporaryFile()
    except (OSError, ValueError, AttributeError):  # no fd 2 or no temporary file: plain import
        import tensorflow  # noqa: F401

        return
    if user is None:
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = str(DEFAULT_LEVEL)
    try:
        os.dup2(capture.fileno(), 2)
        import tensorflow as tf

        tf.config.list_physical_devices("GPU")  # the CUDA probe logs at the first device query
    finally:
        if user is None and os.environ.get("TF_CPP_MIN_LOG_LEVEL") == str(DEFAULT_LEVEL):
            del os.environ["TF_CPP_MIN_LOG_LEVEL"]
        try:
            sys.stderr.flush()  # what Python printed during the import, into the capture too
        except (OSError, ValueError, AttributeError):
            pass
        os.dup2(saved, 2)
        os.close(saved)
        capture.seek(0)
        said = capture.read().decode("utf-8", "replace")
        capture.close()
        shown = keep(said, DEFAULT_LEVEL if user is None else user, user is not None)
        if shown:
            os.write(2, shown.encode())


import_tensorflow()
