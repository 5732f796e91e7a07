"""The population's training loop: every member's own :class:`agents.learning.Loop`, driven in
rounds of one rollout each and one traced update per group of members.

Each member sees what ``agent.learn`` shows it -- ``on_start``, ``on_update`` after each of its
updates, ``on_end`` when it reached its length or was stopped, ``close`` always -- in the same
order relative to its own updates, so its run directory, checkpoints and evaluations are those of
a single run. Members are split into :data:`GROUPS` groups: while one group's update runs in the
update thread (TensorFlow, without Python's lock), this thread records the other group's last
update and collects its next rollouts, so the two cores of a small machine both work. A member's
own sequence (update k, its callbacks, rollout k + 1, update k + 1) is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents.learning import Callback, Loop, says_stop

# The population (agents.population.members.Population) and its rounds (Round) arrive as
# arguments, typed Any: this module imports nothing of members, which imports it.

#: Groups of members whose updates and collection overlap (1: every round in this thread, one
#: update of all members per round).
GROUPS = 2


def _close(callbacks: list[Callback]) -> list[Exception]:
    """Closes ``callbacks`` last to first; returns the errors (every one is closed)."""
    errors = []
    for cb in reversed(callbacks):
        try:
            cb.close()
        except Exception as err:
            errors.append(err)
    return errors


def run_loops(pop: Any, loops: dict[int, Loop],
              on_failure: Callable[[int, BaseException], None],
              after_round: Callable[[dict[int, Loop]], None] | None = None,
              groups: int | None = None) -> None:
    """Runs each member's loop (``{row: Loop}``) until every one ended.

    A member whose rollout, update or callbacks raise an ``Exception`` stops alone:
    ``on_failure(row, err)`` is told, its callbacks are closed (``on_end`` is not called, as
    after an error of a single run) and the others go on. Anything else (KeyboardInterrupt)
    ends every loop; every started callback is closed in any case. ``after_round(loops)`` is
    called after each group's turn (progress lines).
    """
    groups = GROUPS if groups is None else int(groups)
    started: dict[int, list[Callback]] = {i: [] for i in loops}
    live = dict(loops)
    rows = sorted(live)
    count = max(1, min(groups, len(rows)))
    split = [rows[g::count] for g in range(count)]
    rounds: dict[int, Any] = dict.fromkeys(range(count))

    def stop(i: int, err: BaseException | None) -> None:
        loop = live.pop(i)
        loop.stats.wall_s = loop.wall_s()
        if err is not None:
            on_failure(i, err)
        errors = _close(started.pop(i))
        if errors and err is None:
            on_failure(i, errors[0])

    def record(infos: dict[int, Any]) -> None:
        for i, info in infos.items():
            loop = live[i]
            loop.in_step = False
            if isinstance(info, BaseException):
                loop.in_step = True  # the error came from its agent or env
                stop(i, info)
                continue
            try:
                loop._record(info)
                for cb in loop.callbacks:
                    if says_stop(cb.on_update(loop)):
                        loop.stop(getattr(cb, "name", type(cb).__name__))
            except Exception as err:
                stop(i, err)

    def stepping(group: list[int]) -> list[int]:
        """The group's members that step again; the others end (their on_end)."""
        out = []
        for i in group:
            if i not in live:
                continue
            loop = live[i]
            if loop.reason is None and loop.env_steps >= loop.until:
                loop.reason = "total_steps"
            if loop.reason is None:
                out.append(i)
                continue
            try:
                loop.stats.wall_s = loop.wall_s()
                for cb in loop.callbacks:
                    cb.on_end(loop)
            except Exception as err:
                stop(i, err)
            else:
                stop(i, None)
        return out

    try:
        for i, loop in list(live.items()):
            loop.agent.budget = loop.until  # the run the schedules follow
            try:
                for cb in loop.callbacks:
                    cb.on_start(loop)
                    started[i].append(cb)
            except Exception as err:
                stop(i, err)
        while live or any(r is not None for r in rounds.values()):
            for g, group in enumerate(split):
                previous = rounds[g]
                if previous is not None:
                    rounds[g] = None
                    record(previous.finish())
                now = stepping(group)
                for i in now:
                    live[i].in_step = True
                if now:
                    rounds[g] = pop.start(now, background=count > 1)
                if after_round is not None and live:
                    after_round(live)
    finally:
        for pending in rounds.values():  # an update still running: wait, then nothing more
            if pending is not None:
                try:
                    pending.finish()
                except Exception:
                    pass
        for i in list(started):
            _close(started.pop(i))
