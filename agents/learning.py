"""The training loop and its callbacks: what ``agent.learn`` and ``pgrad-train`` both run.

``Loop(agent, until, callbacks, progress).run()`` repeats ``agent.step()`` (one rollout + one
update) until the agent's env-step counter reaches ``until`` or a callback stops it. After each
update every callback's ``on_update(loop)`` sees ``loop.metrics`` (the update's metrics),
``loop.new_episodes`` (``[(env_step, return, length), ...]`` finished in it), ``loop.env_steps``
and the rolling return; returning ``False`` or calling ``loop.stop(reason)`` ends the run after
that update (every callback still sees it). ``on_start`` runs before the first update, ``on_end``
after the last one of a run that finished (by its length or a stop; not after an error), and
``close`` always, last. The command line adds its run-directory callbacks (logs, checkpoints,
export: ``pgrad_app.run.trainer``) to the same loop.

Callbacks are given as one :class:`Callback`, a list of them, or a plain function
``fn(loop) -> bool | None`` (called after every update; ``False`` stops). Ready-made ones are in
:mod:`agents.callbacks`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from agents.learn_stats import HISTORY as HISTORY  # re-exported: its home before learn_stats
from agents.learn_stats import ROLLING, LearnStats

if TYPE_CHECKING:
    from agents.protocol import Agent


def progress_meta(agent: Agent) -> dict[str, Any]:
    """The agent's counters and :class:`LearnStats` as a checkpoint's meta.json records them."""
    return {"env_steps": int(agent.env_steps), "updates": int(agent.updates_var.numpy()),
            **agent.learn_stats.meta()}


class Callback:
    """Base of the training callbacks (every method optional; see the module docstring)."""

    def on_start(self, loop: Loop) -> None:
        """Before the first update."""

    def on_update(self, loop: Loop) -> bool | None:
        """After each update; ``False`` stops the run (as ``loop.stop``)."""

    def on_end(self, loop: Loop) -> None:
        """After the last update of a run that finished or was stopped (not after an error)."""

    def close(self) -> None:
        """Always, last (files, locks, signal handlers)."""


class FunctionCallback(Callback):
    """A plain ``fn(loop) -> bool | None`` called after every update (``False`` stops)."""

    def __init__(self, fn: Callable[[Loop], bool | None]):
        self.fn = fn
        self.name = getattr(fn, "__name__", type(fn).__name__)

    def on_update(self, loop: Loop) -> bool | None:
        return self.fn(loop)


def as_callbacks(callbacks: Any) -> list[Callback]:
    """``None``, one callback, a plain function or a list of them -> a list of callbacks."""
    if callbacks is None:
        return []
    if isinstance(callbacks, Callback):
        return [callbacks]
    if callable(callbacks):
        return [FunctionCallback(callbacks)]
    if isinstance(callbacks, Iterable) and not isinstance(callbacks, (str, bytes)):
        return [c for item in callbacks for c in as_callbacks(item)]
    raise TypeError(f"callbacks must be a Callback, a function fn(loop) or a list of them; got "
                    f"{type(callbacks).__name__}.")


class ProgressBar(Callback):
    """A rich progress bar (steps, steps/s, rolling return, ETA) on a terminal; one log line per
    10% of the run when stderr is not a terminal (CI logs). ``loop.say`` prints above it."""

    def __init__(self):
        self.bar = None
        self.lines = False

    def on_start(self, loop: Loop) -> None:
        self.total, start = loop.until, loop.env_steps
        self._t0, self._s0 = time.monotonic(), start
        self._next_line = start + max(1, self.total // 10)
        loop.printer = self.log
        self.lines = not sys.stderr.isatty()
        if self.lines:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        # Fits an 80-column terminal: bar, steps, steps/s, rolling return, elapsed, ETA.
        self.bar = Progress(
            BarColumn(bar_width=16),
            TextColumn("{task.completed:,.0f}/{task.total:,.0f}"),
            TextColumn("{task.fields[rate]} steps/s  return {task.fields[ret]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self.task = self.bar.add_task("train", total=self.total, completed=start, rate="-",
                                      ret="-")
        self.bar.start()

    def on_update(self, loop: Loop) -> None:
        steps, rolling = min(loop.env_steps, self.total), loop.rolling_return()
        dt = time.monotonic() - self._t0
        rate = f"{(steps - self._s0) / dt:,.0f}" if dt > 0 else "-"
        ret = "-" if rolling is None else f"{rolling:.1f}"
        if self.bar is not None:
            self.bar.update(self.task, completed=steps, rate=rate, ret=ret)
        elif self.lines and steps >= self._next_line:
            self._next_line = steps + max(1, self.total // 10)
            eta = (self.total - steps) * dt / max(1, steps - self._s0)
            print(f"step {steps:,}/{self.total:,}  {rate} steps/s  return {ret}  eta {eta:.0f} s",
                  file=sys.stderr, flush=True)

    def log(self, text: str) -> None:
        if self.bar is not None:
            self.bar.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=sys.stderr, flush=True)

    def on_end(self, loop: Loop) -> None:
        self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None



def says_stop(result: bool | None) -> bool:
    """Whether a callback's result asks to stop: ``False`` (Python's, NumPy's or a 0-d boolean
    array's; ``None`` and anything else carry on)."""
    import numpy as np

    return isinstance(result, (bool, np.bool_)) and not result or (
        isinstance(result, np.ndarray) and result.shape == () and result.dtype == bool
        and not result)

class Loop:
    """One training run of ``agent`` up to ``until`` env steps; what callbacks see.

    Attributes:
      agent: the agent.
      until: the env-step count the run trains to.
      updates: updates of the agent so far (over every run; its checkpointed counter).
      metrics: the last update's metrics (``{name: float}``; array-valued diagnostics too).
      new_episodes: ``[(env_step, return, length), ...]`` that finished in the last update.
      evaluation: an evaluation made after the last update (set by ``EvalCallback``), or None.
      reason: why the run ended: ``"total_steps"``, or what ``stop`` was given (None while
        running).
      in_step: true while ``agent.step()`` runs (an error then came from the agent or its env).
    """

    def __init__(self, agent: Agent, until: int, callbacks: Any = None,
                 progress: bool = True):
        self.agent, self.until = agent, int(until)
        self.callbacks = ([ProgressBar()] if progress else []) + as_callbacks(callbacks)
        self.stats: LearnStats = agent.learn_stats
        self.updates = int(agent.updates_var.numpy())
        self.metrics: dict[str, Any] = {}
        self.new_episodes: list[tuple[int, float, int]] = []
        self.evaluation: dict[str, Any] | None = None
        self.reason: str | None = None
        self.in_step = False
        self.printer: Callable[[str], None] | None = None
        self._t0 = time.monotonic()
        self._wall0 = self.stats.wall_s

    @property
    def env_steps(self) -> int:
        return int(self.agent.env_steps)

    def wall_s(self) -> float:
        """Training wall time over every run of this agent, now."""
        return self._wall0 + time.monotonic() - self._t0

    def rolling_return(self, window: int = ROLLING) -> float | None:
        return self.stats.rolling_return(window)

    def stop(self, reason: str = "callback") -> None:
        """Ends the run after the current update (the first reason given is kept)."""
        if self.reason is None:
            self.reason = reason

    def say(self, text: str) -> None:
        """Prints one line on stderr (above the progress bar, if there is one)."""
        if self.printer is not None:
            self.printer(text)
        else:
            print(text, file=sys.stderr, flush=True)

    def run(self) -> Loop:
        """Trains until ``until`` env steps or a stop; returns itself (``reason`` says why)."""
        started: list[Callback] = []
        self.agent.budget = self.until  # the run the schedules follow (agents/schedules.py)
        try:
            for cb in self.callbacks:
                cb.on_start(self)
                started.append(cb)
            self._warn_about_decays()
            while self.reason is None:
                if self.env_steps >= self.until:
                    self.reason = "total_steps"
                    break
                self.in_step = True
                info = self.agent.step()
                self.in_step = False
                self._record(info)
                for cb in self.callbacks:
                    if says_stop(cb.on_update(self)):
                        self.stop(getattr(cb, "name", type(cb).__name__))
            self.stats.wall_s = self.wall_s()
            for cb in self.callbacks:
                cb.on_end(self)
        finally:
            self.stats.wall_s = self.wall_s()
            errors = []
            for cb in reversed(started):
                try:
                    cb.close()
                except Exception as err:  # every callback is closed; the first error is raised
                    errors.append(err)
            if errors and sys.exc_info()[0] is None:
                raise errors[0]
        return self

    def _warn_about_decays(self) -> None:
        """One line per legacy decay (absolute env steps) that ends before this run does: past
        its end the value is 0 (a learning rate of 0 trains nothing)."""
        decays: dict[str, int] = getattr(self.agent.cfg, "absolute_decays", dict)()
        for name, steps in sorted(decays.items()):
            if steps and steps < self.until:
                flag = "clip_decay_steps" if name == "clip_range" else "lr_decay_steps"
                self.say(f"warning: {flag}={steps:,} ends before this run does (env step "
                         f"{self.until:,}): {name} is 0 from env step {steps:,} on; "
                         f"'{name}: lin_X' decays over the run instead.")

    def _record(self, info: dict[str, Any]) -> None:
        self.updates += 1
        self.metrics = dict(info.get("metrics", {}))
        self.new_episodes = [(int(s), float(r), int(n)) for s, r, n in info.get("episodes", ())]
        self.evaluation = None
        self.stats.wall_s = self.wall_s()  # current in every checkpoint's meta
        for _, ret, length in self.new_episodes:
            self.stats.episodes += 1
            self.stats.recent_returns.append(ret)
            self.stats.recent_lengths.append(length)
        # the env's info["is_success"] at the episodes' ends, where it reports one (recorded by
        # the in-process collector, or carried back from Ray workers and actors with their
        # trajectories)
        take = getattr(getattr(self.agent, "collector", None), "take_successes", None)
        if take is not None:
            self.stats.recent_successes.extend(take())
