"""Files a reader never sees half of: the one temporary spelling and the atomic writers.

Everything pgrad writes where a crash must not leave a torn file -- checkpoints, exports,
``agent.json``, ``config.yaml``, repaired logs, evaluation and benchmark results -- is written
beside its final name as ``.NAME.tmp-PID[-WHAT]`` (:func:`temp_path`), flushed, and renamed
over it (a rename is atomic on POSIX file systems). A process killed at any moment leaves at
worst such a hidden file, which :func:`is_temp` recognises, so cleaning up (and the run
directory's ``--overwrite``) need only one pattern per name (:func:`temp_glob`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

TMP_MARK = ".tmp-"


def temp_path(path: str | os.PathLike, what: str = "") -> Path:
    """``.NAME.tmp-PID`` (``-WHAT`` appended if given) beside ``path``."""
    path = Path(path)
    suffix = f"-{what}" if what else ""
    return path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}{suffix}")


def temp_glob(name: str) -> str:
    """The ``fnmatch`` pattern of every temporary file of the final name ``name``."""
    return f".{name}{TMP_MARK}*"


def is_temp(name: str) -> bool:
    """Whether a file or folder name is one of :func:`temp_path`'s."""
    return name.startswith(".") and TMP_MARK in name


def fsync_dir(path: str | os.PathLike) -> None:
    """Flushes a directory's entries (a rename inside it) to disk, where the platform allows."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, data: str | bytes) -> Path:
    """Writes ``data`` to ``path`` through :func:`temp_path` and a rename; returns ``path``.

    On an error (disk full, ...) the temporary file is removed and ``path`` is as it was.
    """
    path = Path(path)
    tmp = temp_path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        with open(tmp, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    fsync_dir(path.parent)
    return path


def write_json_atomic(path: str | os.PathLike, data: Any) -> Path:
    """:func:`write_atomic` of ``data`` as indented JSON with a final newline."""
    return write_atomic(path, json.dumps(data, indent=1) + "\n")
