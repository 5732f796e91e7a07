"""``best/``: the best policy so far and the evaluation row that chose it, as one unit.

:class:`agents.callbacks.EvalCallback` keeps the best evaluated policy in ``best/`` (a saved
agent: ``agents.load`` / ``pgrad.evaluate`` read it). It is written whole, aside, with its row
in ``best/best.json`` (:data:`ROW_FILE`), then swapped in by renames (:func:`keep`): a reader or
a ``kill -9`` never sees a checkpoint and an export of different steps, nor a policy without the
row that chose it.

Resuming a run (:func:`settle`, before the first evaluation), ``best/`` is made to agree with
``eval.csv`` as it is kept up to the resumed step:

* a swap cut off by a kill is finished or undone (the previous ``best/`` comes back);
* a ``best/`` chosen after the resumed step (the stretch a kill abandoned, whose rows are cut
  from ``eval.csv``) is removed, with one warning line: the next evaluation fills it again;
* a ``best/`` chosen at or before it whose row did not reach ``eval.csv`` (a kill between the
  swap and the append) gets its row back from ``best.json``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pgrad.rl.storage.files import temp_path, write_json_atomic

#: The evaluation row that chose the policy in ``best/`` (``eval.csv``'s columns).
ROW_FILE = "best.json"


def keep(agent: Any, best_dir: Path, row: dict[str, Any]) -> None:
    """Saves ``agent`` with ``row`` as the new ``best_dir``, swapped in whole.

    Raises what ``agent.save`` raises (nothing is swapped then; the previous ``best/`` stays).
    """
    stage, old = temp_path(best_dir, "new"), temp_path(best_dir, "old")
    shutil.rmtree(stage, ignore_errors=True)
    try:
        agent.save(stage)
        write_json_atomic(stage / ROW_FILE, {k: getattr(v, "item", lambda v=v: v)()
                                             for k, v in row.items()})  # numpy scalars too
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
    if best_dir.exists():
        best_dir.rename(old)  # a kill from here to the next rename: settle() brings it back
    stage.rename(best_dir)
    shutil.rmtree(old, ignore_errors=True)


def _leftovers(best_dir: Path, what: str) -> list[Path]:
    return sorted(best_dir.parent.glob(f"{temp_path(best_dir).name.rsplit('-', 1)[0]}-*-{what}"))


def settle(best_dir: Path, step: int, rows: list[dict[str, Any]],
           warn: Callable[[str], None]) -> list[dict[str, Any]]:
    """Makes ``best_dir`` agree with ``rows`` (``eval.csv`` kept up to the resumed ``step``);
    returns ``rows`` with the row of ``best/`` added if a kill kept it from ``eval.csv``."""
    for stage in _leftovers(best_dir, "new"):  # never swapped in: not the best of record
        shutil.rmtree(stage, ignore_errors=True)
    for old in _leftovers(best_dir, "old"):
        if not best_dir.exists():
            old.rename(best_dir)  # the swap was cut between its two renames
        else:
            shutil.rmtree(old, ignore_errors=True)
    try:
        row = json.loads((best_dir / ROW_FILE).read_text())
        chosen = int(row["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return rows  # no best/ (or one of an older pgrad, without its row): nothing to match
    if chosen > step:
        shutil.rmtree(best_dir)
        warn(f"{best_dir} held the policy evaluated at env step {chosen:,}, after the checkpoint "
             f"resumed from (env step {step:,}), which eval.csv no longer records; removed it: "
             "the next evaluation's policy goes there.")
        return rows
    if not any(_step(r) == chosen for r in rows):
        rows = sorted([*rows, row], key=_step)
    return rows


def _step(row: dict[str, Any]) -> int:
    try:
        return int(row["step"])
    except (KeyError, TypeError, ValueError):
        return -1
