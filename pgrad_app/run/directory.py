"""The run directory: what marks it as pgrad's, who may write to it, what ``--overwrite`` deletes.

* ``.pgrad-run`` (a small JSON file) marks a directory that ``pgrad-train`` created. Only a
  directory with it is a run that ``--overwrite`` may replace. A folder without it is never
  emptied, and one that already holds files with a run's names (``config.yaml``,
  ``checkpoints/``, ...) is refused rather than written over.
* ``.pgrad-lock``: a training holds an exclusive ``fcntl.flock`` on it while it writes. A second
  training into the same directory (new, ``--overwrite`` or ``--resume``) gets one line and exit
  code 2. The kernel drops the lock when the process ends, however it ends (SIGKILL too), so a
  lock is never stale; the file itself stays.
* ``--overwrite`` deletes only what pgrad writes, matched by name
  (:meth:`pgrad_app.run.layout.RunLayout.owned`): any other file, in the run directory or its
  subfolders, stays, and folders go only once empty.
* ``--overwrite`` never loses the old run before the new one has one to show: the old run's
  files are moved into ``.pgrad-replaced/`` (same relative paths) and deleted only once the new
  run wrote its first checkpoint. A new run that stops before that (an error at its first
  update, a signal, ``kill -9``) gets the old run back: at once when it ends, or, after
  ``kill -9``, from the next writer of the directory (:func:`settle`), before it looks at it.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import sys
from pathlib import Path

from pgrad.rl.storage.dirlock import DirectoryInUse, DirectoryLock
from pgrad.rl.storage.files import write_atomic
from pgrad_app.errors import UserError
from pgrad_app.run.layout import RunLayout

MARKER, LOCK, REPLACED = RunLayout.MARKER, RunLayout.LOCK, RunLayout.REPLACED


# ---------------------------------------------------------------------------------------------
# Checks made before anything is written.
# ---------------------------------------------------------------------------------------------


def _existing_parent(path: Path) -> Path:
    probe = path.absolute()
    while True:
        try:
            if probe.exists() or probe.parent == probe:
                return probe
        except OSError:  # e.g. a component too long: keep climbing
            pass
        probe = probe.parent


#: Bytes of names pgrad writes below a run directory at most: TensorFlow's temporary checkpoint
#: shard (``checkpoints/.step-000000000000.tmp-PID-old/ckpt_temp/part-00000-of-00001.data-
#: 00000-of-00001.tempstateNNNNNNNNNNNNNNNNNNN``, ~150 bytes; ``best/`` adds 5), TensorBoard's
#: ``tb/events.out.tfevents.TIME.HOST.PID.N`` (a host name is at most 64 bytes).
RUN_NAMES_RESERVE = 200


def check_path(path: Path, flag: str, reserve: int = 0) -> None:
    """Refuses a path the file system cannot hold (a component or the whole too long, with
    ``reserve`` bytes of names still to go below it) or TensorFlow cannot name (not UTF-8: its
    file writers take the path as a UTF-8 string)."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(f"{flag}: the path is not valid UTF-8 (TensorFlow's file writers need "
                        "UTF-8 names); choose another name.") from None
    base = _existing_parent(path)
    try:
        name_max = os.pathconf(base if base.is_dir() else base.parent, "PC_NAME_MAX")
        path_max = os.pathconf(base if base.is_dir() else base.parent, "PC_PATH_MAX")
    except (OSError, ValueError):
        name_max, path_max = 255, 4096
    for part in path.parts:
        if len(os.fsencode(part)) > name_max:
            raise UserError(f"{flag}: the path component {part[:24]}... is "
                            f"{len(os.fsencode(part))} bytes long; the file system allows "
                            f"{name_max}.")
    size = len(os.fsencode(str(path.absolute())))
    if size + reserve >= path_max:
        below = (f" with the {reserve} bytes of names pgrad writes below it (checkpoints/...)"
                 if reserve else "")
        raise UserError(f"{flag}: the path is {size:,} bytes long{below}; the file system "
                        f"allows {path_max:,} in all; choose a shorter path.")


def _short(path: Path) -> str:
    """``path`` for a message: a path of thousands of characters shown by its ends."""
    text = str(path)
    return text if len(text) <= 120 else f"{text[:60]}...{text[-40:]}"


def is_run(path: Path) -> bool:
    """Whether ``path`` is a run directory written by pgrad-train (it holds the marker)."""
    try:
        return (path / MARKER).is_file()
    except OSError:
        return False


def is_stub(path: Path) -> bool:
    """Whether ``path`` is a run that stopped before its first checkpoint (SIGTERM or kill -9
    during start-up): nothing in it can be resumed, so starting the run again replaces it."""
    from pgrad.rl.storage.checkpoint import CheckpointStore

    layout = RunLayout(path)
    try:
        return (is_run(path) and not CheckpointStore(layout.checkpoints).checkpoints()
                and not layout.policy.exists() and not layout.best.exists()
                and not layout.replaced.exists())
    except OSError:
        return False


def run_names(path: Path) -> list[str]:
    """The names of a run's files and folders that ``path`` already holds."""
    try:
        return [n for n in RunLayout.RUN_NAMES if (path / n).exists()] if path.is_dir() else []
    except OSError:
        return []


def check_new(out: Path, overwrite: bool) -> None:
    """Checks ``--out`` for a new run before any work: a usable path, not a run (unless
    ``overwrite``), not a foreign folder holding a run's names, writable.

    Raises:
      UserError: saying which and what to do instead.
    """
    check_path(out, f"--out {_short(out)}", RUN_NAMES_RESERVE)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is not a directory.")
    if is_run(out):
        if not overwrite and not is_stub(out):
            raise UserError(f"--out {out} already holds a run; use --resume {out} to continue "
                            "it, --overwrite to replace it, or another --out.")
    else:
        found = run_names(out)
        if found:
            hint = (f"; if it is a run of an older pgrad, continue it with --resume {out}"
                    if RunLayout.CONFIG in found else "")
            raise UserError(f"--out {out} holds {', '.join(found)} but is not a pgrad run "
                            f"directory (no {MARKER} file), so pgrad will not write over or "
                            f"delete its files{hint}; choose another --out.")
    probe = _existing_parent(out)
    if not probe.is_dir():
        raise UserError(f"--out {out}: {probe} is not a directory.")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UserError(f"--out {out}: {probe} is not writable.")


# ---------------------------------------------------------------------------------------------
# The lock.
# ---------------------------------------------------------------------------------------------


class RunLock:
    """An exclusive lock on a run directory for one writer (see the module docstring): the one
    lock of every pgrad writer (:class:`pgrad.rl.storage.dirlock.DirectoryLock`; ``agent.save``
    too).

    Args:
      out: the run directory (must exist).

    Raises:
      UserError: another process holds the lock (it names that process's pid).
    """

    def __init__(self, out: Path):
        try:
            self._lock = DirectoryLock(out)
        except DirectoryInUse as err:
            raise UserError(f"{str(err).replace('another writer', 'another training')}; wait "
                            "for it to end or choose another --out.") from None
        except OSError as err:
            raise UserError(f"cannot lock {out}: {err.strerror or err}.") from None
        self.path = self._lock.path

    def release(self) -> None:
        """Releases the lock (the process ending releases it too)."""
        self._lock.release()

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


# ---------------------------------------------------------------------------------------------
# Creating, marking and clearing.
# ---------------------------------------------------------------------------------------------


def write_marker(out: Path) -> None:
    """Marks ``out`` as a pgrad run directory (atomically)."""
    write_atomic(RunLayout(out).marker, json.dumps(
        {"pgrad": "run directory written by pgrad-train", "format": 1}) + "\n")


def create(out: Path, overwrite: bool, config_text: str) -> tuple[RunLock, list[Path]]:
    """Creates (or, with ``overwrite``, clears) the run directory ``out``, locks it, marks it and
    writes its ``config.yaml`` (``config_text``): how the command line and
    :class:`pgrad_app.run.recorder.RunDirectory` both start a run.

    The checks of :func:`check_new` are repeated under the lock: two trainings started into the
    same ``--out`` at once both pass them before either wrote anything; only one gets here.

    Returns:
      ``(lock, kept)``: the held lock (release it when the training ends) and, with
      ``overwrite``, what was left in place because pgrad did not write it.

    Raises:
      UserError: the directory cannot be created or written, is in use, or became a run.
    """
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"--out {out}: cannot create it ({err.strerror or err}).") from None
    lock = RunLock(out)
    kept: list[Path] = []
    try:
        settle(out)  # a --overwrite killed before its first checkpoint: the old run first
        check_new(out, overwrite)
        if overwrite and is_run(out):
            kept = set_aside(out)
        elif is_stub(out):  # a start-up that was killed: nothing there to keep
            clear(out)
        write_marker(out)
        write_atomic(RunLayout(out).config, config_text)
    except OSError as err:
        lock.release()
        raise UserError(f"--out {out}: cannot write there ({err.strerror or err}).") from None
    except BaseException:
        lock.release()
        raise
    return lock, kept


def clear(out: Path) -> list[Path]:
    """Deletes what pgrad wrote in run directory ``out`` (``RunLayout.owned()``), nothing else.

    Returns the paths of what was left because pgrad did not write it (for a note to the user).
    """
    kept: list[Path] = []
    _clear(out, RunLayout.owned(), kept, top=True)
    return kept


#: Inside ``.pgrad-replaced/``: which step of moving files was under way (a kill -9 in the
#: middle of one is finished by the next :func:`settle`, never mistaken for a finished one).
_STATE = ".pgrad-state"


def _move_tree(source: Path, dest: Path, skip: str = "") -> None:
    """Moves every file under ``source`` to the same relative path under ``dest``; checkpoints
    last, so that a checkpoint in ``dest`` means every other file is there already."""
    files = [p for p in source.rglob("*") if (p.is_symlink() or p.is_file()) and p.name != skip]
    files.sort(key=lambda p: (p.relative_to(source).parts[0] == RunLayout.CHECKPOINTS, str(p)))
    for path in files:
        target = dest / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)


def set_aside(out: Path) -> list[Path]:
    """Moves what pgrad wrote in ``out`` into ``out/.pgrad-replaced/`` (same relative paths),
    nothing else: what ``--overwrite`` does until the new run's first checkpoint (:func:`settle`
    then deletes it). Returns what was left in place because pgrad did not write it."""
    aside = RunLayout(out).replaced
    aside.mkdir()
    state = aside / _STATE
    write_atomic(state, "aside")  # until every file moved: a kill here is undone by settle

    def move(entry: Path) -> None:
        target = aside / entry.relative_to(out)
        target.parent.mkdir(parents=True, exist_ok=True)
        entry.rename(target)

    kept: list[Path] = []
    _clear(out, RunLayout.owned(), kept, top=True, remove=move)
    write_atomic(state, "replaced")
    return kept


def settle(out: Path, say=None) -> str | None:
    """Ends what an ``--overwrite`` left in ``out/.pgrad-replaced/``: once the new run has a
    checkpoint, the old run is deleted; if it has none (it stopped, or was killed, first), the
    new run's files are deleted and the old run is moved back. Call it holding the lock.

    Returns ``"deleted"`` (the old run), ``"restored"`` or None (nothing was set aside); ``say``
    gets one line when the old run came back.
    """
    from pgrad.rl.storage.checkpoint import CheckpointStore

    layout = RunLayout(out)
    aside = layout.replaced
    if not aside.is_dir() or aside.is_symlink():
        return None
    state = aside / _STATE
    try:
        phase = state.read_text().strip()
    except OSError:
        phase = "aside"  # killed before the state was written: nothing new was written yet
    if phase == "replaced" and CheckpointStore(layout.checkpoints).checkpoints():
        shutil.rmtree(aside)
        return "deleted"
    if phase in ("replaced", "clearing"):  # the new run's files go: no checkpoint backs them
        write_atomic(state, "clearing")
        clear(out)
        write_atomic(state, "moving")  # from here on every owned file in out is the old run's
    _move_tree(aside, out, skip=_STATE)
    shutil.rmtree(aside)
    (say or _note)(f"note: {out}: the new run stopped before its first checkpoint, so the run "
                   "--overwrite replaced is back in place.")
    return "restored"


def settle_quietly(out: Path) -> None:
    """:func:`settle` at the end of a writer, whose own error (if any) is the one to show: a
    failure here is one warning line, and the next writer settles again."""
    try:
        settle(out)
    except OSError as err:
        _note(f"warning: {out}: could not settle {REPLACED}/ ({err.strerror or err}); the next "
              "pgrad-train into it will.")


def _note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _match(name: str, spec: dict):
    for pattern, sub in spec.items():
        if fnmatch.fnmatchcase(name, pattern):
            return True, sub
    return False, None


def _clear(directory: Path, spec: dict, kept: list[Path], top: bool = False,
           remove=Path.unlink) -> None:
    for entry in sorted(directory.iterdir()):
        if top and entry.name in (MARKER, LOCK, REPLACED):
            continue
        owned, sub = _match(entry.name, spec)
        if not owned:
            kept.append(entry)
        elif sub is None and (entry.is_symlink() or entry.is_file()):
            remove(entry)
        elif isinstance(sub, dict) and entry.is_dir() and not entry.is_symlink():
            _clear(entry, sub, kept, remove=remove)
            try:
                entry.rmdir()
            except OSError:  # something pgrad did not write is inside: it stays
                pass
        else:
            kept.append(entry)
