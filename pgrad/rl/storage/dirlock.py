"""One lock for every writer of a pgrad directory (a training's run directory, ``agent.save``).

``.pgrad-lock`` in the directory: a writer holds an exclusive ``fcntl.flock`` on it while it
writes. The kernel drops the lock when the process ends, however it ends (SIGKILL too), so a
lock is never stale; the file itself stays. The file holds the holder's pid (for the message).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

LOCK = ".pgrad-lock"
#: What marks a directory that ``pgrad-train`` created (see ``pgrad_app.run.directory``).
RUN_MARKER = ".pgrad-run"


class DirectoryInUse(RuntimeError):
    """Another process holds the directory's lock (the message names its pid)."""


class DirectoryLock:
    """An exclusive, non-blocking lock on ``directory`` (which must exist).

    Raises:
      DirectoryInUse: another process holds it.
      OSError: the lock file cannot be created or locked.
    """

    def __init__(self, directory: str | os.PathLike):
        import fcntl

        self.path = Path(directory) / LOCK
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            holder = os.pread(self._fd, 32, 0).decode(errors="replace").strip()
            os.close(self._fd)
            self._fd = None
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            who = f" (pid {holder})" if holder.isdigit() else ""
            raise DirectoryInUse(f"{directory} is in use by another writer{who}") from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        """Releases the lock (the process ending releases it too)."""
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None

    def __enter__(self) -> DirectoryLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()
