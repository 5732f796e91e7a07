"""Where a converted model goes: checked before any work, written atomically, never over a file
pgrad did not write.

The rule is the run directory's rule for files (:mod:`pgrad.rl.storage.files`): a converted
model (``.tflite``, ``.onnx``) is written to ``.NAME.tmp-PID`` in the destination's own folder,
flushed, and renamed over ``NAME`` (``os.replace``), so a reader sees the old file or the new
one, never half of one, and an error (a full disk, the file-size limit) leaves the old file as
it was.

How pgrad knows it wrote a file: beside every file it writes, it keeps a small hidden record,
``.NAME.pgrad-export`` (JSON: the SHA-256 digest and size of the bytes written, and what they
were converted from). An existing ``NAME`` is pgrad's own -- and so may be replaced -- only if
that record exists *and* the file's bytes still have the recorded digest. A file someone else
put there (or a pgrad file edited or copied over since) has no matching record, so it is
refused unless the caller passes ``overwrite=True`` (``pgrad-export --overwrite``). A record
without its file is ignored.

:func:`check` runs every test that needs no model (the name, the folder, a directory in the
way, a foreign file) so that a conversion never starts only to fail at the end; :func:`write`
writes and records; :func:`reason` turns an ``OSError`` into the few words a user acts on.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from pgrad.rl.storage.checkpoint import file_sha256
from pgrad.rl.storage.files import fsync_dir, temp_path, write_json_atomic

#: The suffix of the record beside each file pgrad writes: ``.NAME.pgrad-export``.
RECORD_SUFFIX = ".pgrad-export"
#: What a record says it is (a record of another kind is not pgrad's).
RECORD_KIND = "pgrad export record"


def record_path(path: str | os.PathLike) -> Path:
    """The record of ``path``: ``.NAME.pgrad-export`` in the same folder."""
    path = Path(path)
    return path.with_name(f".{path.name}{RECORD_SUFFIX}")


def written_by_pgrad(path: str | os.PathLike) -> bool:
    """Whether the file ``path`` is one pgrad wrote, unchanged since (its record matches)."""
    path = Path(path)
    try:
        record = json.loads(record_path(path).read_text(encoding="utf-8"))
        if not isinstance(record, dict) or record.get("kind") != RECORD_KIND:
            return False
        if path.stat().st_size != record.get("size"):
            return False
        return file_sha256(path) == record.get("sha256")
    except (OSError, ValueError):
        return False


def shown(path: str | os.PathLike) -> str:
    """``path`` as text that prints anywhere (bytes that are not UTF-8 written escaped)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def check(path: str | os.PathLike, overwrite: bool = False, flag: str = "") -> Path:
    """Checks a destination file before any work.

    Args:
      path: where the file is to be written.
      overwrite: replace a file there that pgrad did not write (see the module docstring).
      flag: how the caller names the destination in messages (``--tflite``); default ``out_file``.

    Returns:
      ``path`` as a Path.

    Raises:
      ValueError: one line naming the file: an empty name or a folder's name (``.``, ``..``,
        ``dir/``), a directory there, a missing or unwritable folder, a name longer than the
        file system allows, or a file pgrad did not write (without ``overwrite``).
    """
    text = os.fspath(path)
    name = shown(text) if len(text) <= 120 else f"{shown(text)[:60]}...{shown(text)[-20:]}"
    where = f"{flag or 'out_file'} {name if text else repr(text)}"
    if not text:
        raise ValueError(f"{where}: the file name is empty; give a file name such as "
                         "policy.tflite.")
    path = Path(text)
    if path.name in ("", ".", "..") or text.endswith(os.sep):
        raise ValueError(f"{where} names a folder, not a file; give a file name, e.g. "
                         f"{shown(path / 'policy')}{path.suffix or '.tflite'}.")
    folder = path.parent
    try:
        if not folder.is_dir():
            what = "is not a directory" if folder.exists() else "does not exist"
            raise ValueError(f"{where}: the folder {shown(folder)} {what}; create it first.")
        name_max = os.pathconf(folder, "PC_NAME_MAX")
        # The temporary name is the longest pgrad writes there: it must fit too.
        size = len(os.fsencode(path.name))
        extra = max(len(os.fsencode(p.name)) for p in (record_path(path), temp_path(path))) - size
        if size + extra > name_max:
            raise ValueError(f"{where}: the file name is {size} bytes; with pgrad's temporary "
                             f"and record names beside it, at most {name_max - extra} fit here.")
        if path.is_dir():
            raise ValueError(f"{where} is a directory; give a file name inside it, e.g. "
                             f"{shown(path / 'policy')}.")
    except OSError as err:
        raise ValueError(f"{where}: cannot use this path ({reason(err)}).") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{where}: the folder {shown(folder)} is not writable.")
    if (path.exists() or path.is_symlink()) and not overwrite and not written_by_pgrad(path):
        raise ValueError(f"{where} exists and pgrad did not write it (no matching "
                         f"{record_path(path).name}); pgrad-export replaces only its own "
                         "files: choose another name, or pass --overwrite to replace it.")
    return path


def write(path: str | os.PathLike, data: bytes, about: dict[str, Any] | None = None) -> Path:
    """Writes ``data`` to ``path`` atomically (``.NAME.tmp-PID`` + ``os.replace``) and records
    it as pgrad's (``.NAME.pgrad-export``). Call :func:`check` first.

    Args:
      path: the destination file.
      data: the bytes to write.
      about: what the bytes are (kept in the record; plain JSON values).

    Returns:
      ``path`` as a Path.

    Raises:
      OSError: the write failed (the destination and its record are as they were); its
        ``filename`` is ``path``.
    """
    path = Path(path)
    tmp = temp_path(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        # The record first: an interrupted write leaves a record that matches no file (refused
        # later, never a foreign file taken for pgrad's).
        write_json_atomic(record_path(path), {
            "kind": RECORD_KIND, "sha256": hashlib.sha256(data).hexdigest(),
            "size": len(data), **(about or {})})
        os.replace(tmp, path)
    except OSError as err:
        _remove(tmp)
        raise OSError(err.errno, err.strerror or str(err), os.fspath(path)) from None
    except BaseException:
        _remove(tmp)
        raise
    fsync_dir(path.parent)
    return path


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


#: The words for the errors a destination meets, by errno.
_REASONS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "file too large for the file-size limit (ulimit -f) or the file system",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOENT: "no such file or directory",
    errno.ENOTDIR: "a part of the path is not a directory",
    errno.ENAMETOOLONG: "file name too long",
    errno.EISDIR: "is a directory",
}


def reason(err: OSError) -> str:
    """The few words of an ``OSError`` a user acts on (``no space left on device``)."""
    if err.errno in _REASONS:
        return _REASONS[err.errno]
    return (err.strerror or type(err).__name__).lower()
