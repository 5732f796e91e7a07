"""One-file saves: ``agent.save("x.zip")`` and ``agents.load("x.zip")`` / ``agents.load("x")``.

A ``.zip`` save is the saved directory (:mod:`agents.persistence.save_load`: ``agent.json``,
``checkpoints/``, ``policy/``) zipped, its entries relative to that directory. It is written
aside (a temporary directory and a temporary file beside ``x.zip``) and renamed over ``x.zip``
only once complete, so a save that fails midway leaves the previous ``x.zip`` as it was.
Loading extracts it into a temporary directory, restores from there and removes it. As
Stable-Baselines3's ``load("x")``, a missing ``x`` whose ``x.zip`` exists reads ``x.zip``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pgrad.rl.storage.dirlock import LOCK
from pgrad.rl.storage.files import fsync_dir, temp_path

SUFFIX = ".zip"


def is_zip_name(path: str | os.PathLike) -> bool:
    """Whether ``save(path)`` writes one zip file: the name ends in ``.zip`` and no directory
    (an earlier directory save of that name) is there."""
    p = Path(path)
    return p.suffix.lower() == SUFFIX and not p.is_dir()


def save_zip(agent: Any, path: str | os.PathLike,
             save_directory: Callable[[Any, Path], Any]) -> Path:
    """Saves ``agent`` as the one file ``path`` (``save_directory(agent, dir)`` writes the
    directory that is zipped); returns ``path``.

    Raises:
      ValueError: the parent directory does not exist.
      OSError: the file could not be written (the previous ``path``, if any, is kept).
    """
    final = Path(path).absolute()
    if not final.parent.is_dir():
        raise ValueError(f"agent.save({str(path)!r}): the folder {str(final.parent)!r} does not "
                         "exist; nothing saved.")
    part = temp_path(final)
    with tempfile.TemporaryDirectory(prefix=f".{final.name}.", dir=final.parent) as stage:
        directory = Path(stage) / "agent"
        save_directory(agent, directory)
        try:
            with open(part, "wb") as handle:
                write_zip(directory, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(part, final)
        except BaseException:
            part.unlink(missing_ok=True)
            raise
    fsync_dir(final.parent)
    return Path(path)


def write_zip(directory: Path, handle: Any) -> None:
    """Every file under ``directory`` (but its lock) into a zip written to ``handle``, named
    relative to ``directory`` and in sorted order."""
    with zipfile.ZipFile(handle, "w", zipfile.ZIP_DEFLATED) as zf:
        for file in sorted(p for p in directory.rglob("*") if p.is_file()):
            if file.name != LOCK:
                zf.write(file, file.relative_to(directory).as_posix())


def zip_file(path: str | os.PathLike) -> Path | None:
    """The zip that ``path`` names: itself if it is a zip file, else ``path.zip`` when ``path``
    does not exist and that does; None for a directory or anything else."""
    p = Path(path)
    if not p.exists() and p.suffix.lower() != SUFFIX:
        p = p.with_name(p.name + SUFFIX)
    return p if p.is_file() and zipfile.is_zipfile(p) else None


@contextlib.contextmanager
def readable(path: str | os.PathLike) -> Iterator[Path]:
    """The directory to read a save at ``path`` from: ``path`` itself, or a zip save extracted
    into a temporary directory (removed on leaving the block).

    Raises:
      ValueError: the zip holds a name outside its own folder or cannot be read.
    """
    archive = zip_file(path)
    if archive is None:
        yield Path(path)
        return
    with tempfile.TemporaryDirectory(prefix="pgrad-load-") as stage:
        try:
            with zipfile.ZipFile(archive) as zf:
                for name in zf.namelist():
                    if name.startswith("/") or ".." in Path(name).parts:
                        raise ValueError(f"{archive}: the entry {name!r} points outside the "
                                         "saved agent; not loaded.")
                zf.extractall(stage)
        except (zipfile.BadZipFile, OSError) as err:
            raise ValueError(f"cannot read {archive}: {err}") from None
        yield Path(stage)
