"""Atomic, verified checkpoints: a checkpoint is either complete and checked, or invisible.

Layout under ``checkpoints/``::

    step-000000010000/        one directory per checkpoint, named by env step
        ckpt.index, ckpt.data-00000-of-00001   tf.train.Checkpoint of the agent's trackables
        meta.json             trainer counters + sha256 of every file above and of itself
                              (written last)

A checkpoint is written into a hidden ``.step-*.tmp-PID`` directory (:mod:`pgrad.rl.storage.files`'
one temporary spelling), flushed to disk, and only then renamed to ``step-*`` (a rename is
atomic on POSIX file systems). A process killed at any moment (SIGKILL, power loss) therefore
leaves at worst a stale temporary directory, which is ignored and cleaned up, and the previous
checkpoint untouched.

A *good* checkpoint is one whose checksums match, that TensorFlow reads without error, and whose
floating-point tensors are all finite. ``save`` reads what it wrote back and refuses (raises
:class:`NonFiniteCheckpoint`, nothing committed) to save NaN/Inf weights, so a poisoned state never
replaces the last good checkpoint; a step directory that already exists (a resumed run replaying
the same steps, possibly over a damaged checkpoint) is always rewritten, never trusted as it is. A
write that fails (disk full) raises :class:`CheckpointWriteError` and leaves the earlier
checkpoints as they were. On restore the newest good checkpoint wins; a damaged or non-finite one
is skipped with a warning and the previous one is used. Nothing here unpickles anything: the
checkpoint is TensorFlow's tensor format and ``meta.json`` is JSON.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from pgrad.rl.storage.files import fsync_dir, is_temp, temp_glob, temp_path

PREFIX = "ckpt"
META = "meta.json"
_STEP_DIR = "step-"
_LEGACY_TMP = ".tmp-"  # pgrad 0.2's temporary directories, still recognised and cleaned up
#: What a checkpoint directory holds, by name (``fnmatch`` patterns; see pgrad_app's run layout).
FILES = (f"{PREFIX}.index", f"{PREFIX}.data-*", META)
#: The names of checkpoint directories in a store (complete ones, then temporary ones).
DIRS = (f"{_STEP_DIR}*", temp_glob(f"{_STEP_DIR}*"), f"{_LEGACY_TMP}*")


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (disk full, I/O error); the earlier ones are intact."""


#: The OS errors a checkpoint write meets, by errno: TensorFlow's writers report them inside
#: their own text (``{{function_node __wrapped__SaveV2...}} PATH; File too large [Op:SaveV2]``).
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM,
                 errno.EIO, errno.ENAMETOOLONG, errno.ENOENT)


def write_reason(err: BaseException) -> str:
    """The OS's words for why a write failed (``No space left on device``), from an ``OSError``
    or from the text of a TensorFlow error that wraps one; else that text's first line without
    TensorFlow's internal op names."""
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    text = str(getattr(err, "message", None) or err)
    for code in _WRITE_ERRNOS:
        if os.strerror(code).lower() in text.lower():
            return os.strerror(code)
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\]", "", text).strip()
    first = text.splitlines()[0].strip() if text else ""
    return first or type(err).__name__


class NonFiniteCheckpoint(ValueError):
    """The state to be saved holds NaN/Inf values; it was not saved."""


def nonfinite_tensors(prefix: str | Path) -> list[str]:
    """Names of the floating-point tensors in checkpoint ``prefix`` that hold NaN or Inf."""
    reader = tf.train.load_checkpoint(str(prefix))
    bad = []
    for name, dtype in sorted(reader.get_variable_to_dtype_map().items()):
        if dtype.is_floating or dtype.is_complex:
            if not np.isfinite(reader.get_tensor(name)).all():
                bad.append(name.replace("/.ATTRIBUTES/VARIABLE_VALUE", ""))
    return bad


def file_sha256(path: Path) -> str:
    """The SHA-256 hex digest of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


#: The key of meta.json that holds the sha256 of the rest of meta.json (see :func:`_meta_digest`).
META_DIGEST = "meta_sha256"


def _meta_digest(record: Mapping[str, Any]) -> str:
    """sha256 of ``record`` without :data:`META_DIGEST`, as canonical JSON: meta.json is covered
    by the checksum it records, as the files it lists are."""
    body = {k: v for k, v in record.items() if k != META_DIGEST}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _write_json(path: Path, record: dict[str, Any]) -> None:
    with open(path, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())


class CheckpointStore:
    """Saves and restores ``tf.train.Checkpoint(**trackables)`` plus a JSON ``meta`` dict.

    Args:
      directory: the ``checkpoints/`` directory (created on first save).
      keep: how many complete checkpoints to keep (older ones are deleted after a save).
    """

    def __init__(self, directory: str | Path, keep: int = 3):
        self.directory = Path(directory)
        self.keep = max(1, int(keep))

    def checkpoints(self) -> list[Path]:
        """Complete (renamed) checkpoint directories, newest first."""
        if not self.directory.is_dir():
            return []
        found = [p for p in self.directory.iterdir() if p.is_dir() and p.name.startswith(_STEP_DIR)]
        return sorted(found, key=lambda p: p.name, reverse=True)

    def newest_good(self) -> Path | None:
        """The newest checkpoint that verifies and holds only finite values (reads its files,
        restores nothing)."""
        for path in self.checkpoints():
            try:
                self.verify(path)
                if not nonfinite_tensors(path / PREFIX):
                    return path
            except (ValueError, tf.errors.OpError):
                continue
        return None

    def _clean_tmp(self) -> None:
        if self.directory.is_dir():
            for p in self.directory.iterdir():
                if is_temp(p.name) or p.name.startswith(_LEGACY_TMP):
                    shutil.rmtree(p, ignore_errors=True)

    def save(self, trackables: Mapping[str, Any], meta: dict[str, Any], step: int) -> Path:
        """Writes a checkpoint for env step ``step`` atomically; returns its directory.

        An existing ``step-*`` directory for the same step is replaced (it may be damaged, or
        from an abandoned stretch of a resumed run): the new one is complete before the old one
        is moved away.

        Raises:
          NonFiniteCheckpoint: a floating-point value to save is NaN/Inf (nothing was changed).
          CheckpointWriteError: writing failed, e.g. the disk is full (nothing was changed).
        """
        final = self.directory / f"{_STEP_DIR}{int(step):012d}"
        tmp = temp_path(final)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._clean_tmp()
            tmp.mkdir()
            tf.train.Checkpoint(**trackables).write(str(tmp / PREFIX))
            bad = nonfinite_tensors(tmp / PREFIX)
            if bad:
                shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
                raise NonFiniteCheckpoint(
                    f"the state at env step {int(step)} holds NaN/Inf values ({shown}); "
                    "not saved, so it cannot replace a good checkpoint")
            files = {}
            for p in sorted(tmp.iterdir()):
                with open(p, "rb+") as f:
                    os.fsync(f.fileno())
                files[p.name] = file_sha256(p)
            record = dict(meta, step=int(step), files=files, finite=True)
            record[META_DIGEST] = _meta_digest(record)
            _write_json(tmp / META, record)
            fsync_dir(tmp)
            if final.exists():  # replaced, never trusted: see the docstring
                os.rename(final, temp_path(final, "old"))
            os.rename(tmp, final)  # the commit point
            fsync_dir(self.directory)
        except NonFiniteCheckpoint:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        except (OSError, tf.errors.OpError) as err:
            shutil.rmtree(tmp, ignore_errors=True)
            raise CheckpointWriteError(
                f"cannot write checkpoint {final.name} in {self.directory}: {write_reason(err)}"
            ) from err
        self._clean_tmp()
        for old in self.checkpoints()[self.keep:]:
            # Hide it first (atomic), then delete: a kill mid-delete must not leave a
            # half-deleted directory that still looks like a checkpoint.
            hidden = temp_path(old, "del")
            try:
                os.rename(old, hidden)
            except OSError:
                continue
            shutil.rmtree(hidden, ignore_errors=True)
        return final

    @staticmethod
    def verify(path: Path) -> dict[str, Any]:
        """Reads ``meta.json`` and checks its own checksum and every file's; raises
        ``ValueError`` if not ok. (A meta.json without :data:`META_DIGEST` is from a pgrad that
        did not write one, and is checked by its files' checksums only.)"""
        try:
            meta = json.loads((path / META).read_text())
        except (OSError, ValueError) as err:
            raise ValueError(f"unreadable {META}: {err}") from None
        if not isinstance(meta, dict):
            raise ValueError(f"{META} is not a JSON object")
        if META_DIGEST in meta and meta[META_DIGEST] != _meta_digest(meta):
            raise ValueError(f"checksum mismatch in {META} (it was edited or damaged)")
        files = meta.get("files")
        if not isinstance(files, dict) or not files:
            raise ValueError(f"{META} lists no files")
        for name, digest in files.items():
            p = path / name
            if not p.is_file():
                raise ValueError(f"missing file {name}")
            if file_sha256(p) != digest:
                raise ValueError(f"checksum mismatch in {name}")
        return meta

    def restore(
        self,
        trackables: Mapping[str, Any],
        warn: Callable[[str], None] | None = None,
        partial: bool = False,
    ) -> tuple[dict[str, Any], Path] | None:
        """Restores the newest good checkpoint into ``trackables``; ``None`` if there is none.

        A checkpoint that fails verification or reading is skipped with a warning (the previous
        one is tried next). With ``partial=True`` only ``trackables`` are restored and the
        checkpoint may hold more (e.g. evaluation needs the networks, not the optimizer).

        Raises:
          ValueError: checkpoints exist but none of them could be restored.
        """
        candidates = self.checkpoints()
        problems = []
        for path in candidates:
            try:
                meta = self.verify(path)
                bad = nonfinite_tensors(path / PREFIX)
                if bad:
                    raise ValueError(f"it holds NaN/Inf values ({bad[0]})")
                status = tf.train.Checkpoint(**trackables).read(str(path / PREFIX))
                status.assert_existing_objects_matched()
                if partial:
                    status.expect_partial()
            except (ValueError, AssertionError, tf.errors.OpError) as err:
                msg = str(err).splitlines()[0] if str(err) else type(err).__name__
                problems.append(f"{path.name}: {msg}")
                text = f"checkpoint {path} is unusable ({msg}); trying the previous one."
                if warn is None:
                    warnings.warn(text, stacklevel=2)
                else:
                    warn(text)
                continue
            return meta, path
        if candidates:
            raise ValueError("no checkpoint could be restored: " + "; ".join(problems))
        return None
