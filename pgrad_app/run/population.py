"""Training a population into one run directory per seed: what ``pgrad-train --seeds`` runs.

``PopulationRun(members, settings, dirs).run()`` trains the agents of an
:class:`agents.population.Population` together (one rollout each, then one traced update of
all, per round) and records each into its own run directory with the callbacks a single run has
(:class:`pgrad_app.run.trainer.Trainer`'s: logs, checkpoints, ``stop_at_return``, evaluations,
the export), so each directory is what ``pgrad-train --seed S --out DIR`` writes: evaluate,
``--resume``, export and the tuner read it unchanged. The population's folder holds
:data:`POPULATION_FILE` (its seeds and their directories) beside them.

* A seed whose env fails (or that stops on an error of its own: a NaN return, a failed
  checkpoint) stops alone: one line on stderr and in its directory's :data:`FAILURE_FILE`; its
  checkpoints stay as they were, the others go on, the command exits 1 at the end.
* SIGINT/SIGTERM finish the current round, every seed writes a checkpoint, and the command
  exits 130/143 naming ``--resume OUT``, which continues each seed from its own checkpoint; a
  second signal aborts at once (the previous checkpoints are intact).
"""

from __future__ import annotations

import functools
import json
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.learning import Callback, Loop
from agents.population import Population
from agents.population.loop import run_loops
from pgrad.rl.storage.files import write_atomic
from pgrad_app.errors import EXIT_SIGINT, EXIT_SIGTERM, Interrupted, RunError, command, one_line
from pgrad_app.run.layout import RunLayout
from pgrad_app.run.trainer import Trainer, _transform_error

#: In the population's folder: ``{"seeds": [...], "runs": {"SEED": "DIR name"}, ...}``.
POPULATION_FILE = "population.json"
#: In a seed's run directory: the one line that stopped that seed (removed when it resumes).
FAILURE_FILE = RunLayout.FAILURE


def seed_dir_name(seed: int) -> str:
    """The name of seed ``seed``'s run directory inside the population's folder."""
    return f"seed{int(seed)}"


def is_population(path: str | Path | None) -> bool:
    """Whether ``path`` is a population's folder (it holds :data:`POPULATION_FILE`)."""
    return path is not None and (Path(path) / POPULATION_FILE).is_file()


def read_population(out: Path) -> dict[str, Any]:
    """The population record of folder ``out``; a bad one is a RunError naming the file."""
    path = out / POPULATION_FILE
    try:
        record = json.loads(path.read_text())
        runs = {int(k): str(v) for k, v in record["runs"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise RunError(f"cannot read {path}: {one_line(err)}") from err
    return {**record, "runs": runs}


def write_population(out: Path, seeds: list[int], agent: str, env: str) -> None:
    """Writes the population's record into ``out`` (atomically)."""
    record = {"agent": agent, "env": env, "seeds": list(seeds),
              "runs": {str(s): seed_dir_name(s) for s in seeds}}
    write_atomic(out / POPULATION_FILE, json.dumps(record, indent=1) + "\n")


class _Signals(Callback):
    """Shared by every seed's loop: SIGINT/SIGTERM stop each after the current round (reason
    ``interrupted``: its recorder writes a checkpoint); a second signal aborts at once."""

    name = "interrupted"

    def __init__(self):
        self.signum: int | None = None
        self._old: dict = {}

    def install(self) -> None:
        self._old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT,
                                                                     signal.SIGTERM)}

    def restore(self) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        self._old = {}

    def _on_signal(self, signum, frame) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum

    def on_update(self, loop: Loop) -> bool:
        return self.signum is None


@dataclass
class SeedResult:
    """How one seed's training ended."""

    seed: int
    out: Path
    env_steps: int
    rolling_return: float | None
    reason: str | None  # as TrainResult's; None: it failed (``failure`` says why)
    failure: str | None = None


class PopulationRun:
    """Trains ``members`` (agents, one per seed) into ``dirs`` (one run directory each).

    Args:
      members: the agents, built (and restored, if ``resume``) by the caller's order.
      settings: each seed's :class:`pgrad_app.config.settings.RunSettings` (its own seed).
      dirs: each seed's run directory (holding its ``config.yaml`` already).
      resume: restore each seed's newest good checkpoint first.
      quiet: no progress lines (warnings, errors and the summary are printed).
    """

    def __init__(self, members: list, settings: list, dirs: list[Path], *, resume: bool = False,
                 quiet: bool = False):
        self.population = Population.of(members)
        self.settings, self.dirs, self.quiet = settings, [Path(d) for d in dirs], quiet
        self.trainers = [Trainer(a, s, d, resume=resume, quiet=True)
                         for a, s, d in zip(members, settings, self.dirs)]
        self.failures: dict[int, str] = {}
        self.signals = _Signals()
        self._next_line = 0.0

    def _failed(self, row: int, err: BaseException) -> None:
        """One line for the seed of ``row``: on stderr and in its directory's FAILURE_FILE."""
        trainer, seed = self.trainers[row], self.population.seeds[row]
        found = _transform_error(err)
        text = one_line(found or (err.args[0] if isinstance(err, RunError) and err.args
                                  else str(err)) or type(err).__name__)
        where = trainer.recorder.where()
        if where not in text:
            text = f"{text} ({where})"
        self.failures[seed] = text
        try:
            write_atomic(self.dirs[row] / FAILURE_FILE, f"seed {seed} stopped: {text}\n")
        except OSError:
            pass
        print(f"error: seed {seed} stopped: {text}; the other seeds go on.", file=sys.stderr,
              flush=True)

    def _progress(self, loops: dict[int, Loop]) -> None:
        if self.quiet or time.monotonic() < self._next_line:
            return
        self._next_line = time.monotonic() + 10.0
        steps = [loop.env_steps for loop in loops.values()]
        returns = [r for r in (loop.rolling_return() for loop in loops.values()) if r is not None]
        ret = (f"rolling return mean {sum(returns) / len(returns):.1f} (min {min(returns):.1f}, "
               f"max {max(returns):.1f})" if returns else "no episode yet")
        until = max(loop.until for loop in loops.values())
        print(f"{len(loops)} seeds: env step {min(steps):,}/{until:,}; {ret}", file=sys.stderr,
              flush=True)

    def run(self) -> list[SeedResult]:
        """Trains until every seed is done, stopped or failed; returns each one's result.

        Raises:
          Interrupted: SIGINT/SIGTERM (after every seed wrote a checkpoint).
        """
        loops = {}
        for i, (trainer, s) in enumerate(zip(self.trainers, self.settings)):
            stale = self.dirs[i] / FAILURE_FILE
            if stale.is_file():  # resumed: the line was about the run this one continues
                stale.unlink()
            loops[i] = Loop(trainer.agent, s.total_steps, [*trainer.callbacks(), self.signals],
                            progress=False)
        from agents.population.exports import SharedExport

        shared = SharedExport()  # the members' exports: one trace, each member's variables
        for member in self.population.agents:
            member.export_policy = functools.partial(shared.export, member)
        self.signals.install()
        try:
            run_loops(self.population, loops, self._failed, self._progress)
        finally:
            self.signals.restore()
            for member in self.population.agents:
                del member.export_policy  # the agent's own method again
            shared.close()
        results = []
        for i, loop in loops.items():
            seed = self.population.seeds[i]
            failed = seed in self.failures
            results.append(SeedResult(seed, self.dirs[i], loop.env_steps, loop.rolling_return(),
                                      None if failed else loop.reason, self.failures.get(seed)))
        if self.signals.signum is not None:
            name = signal.Signals(self.signals.signum).name
            code = EXIT_SIGTERM if self.signals.signum == signal.SIGTERM else EXIT_SIGINT
            out = self.dirs[0].parent
            raise Interrupted(f"{name}: every seed saved a checkpoint in its run directory under "
                              f"{out}; continue with: {command('train')} --resume {out}", code)
        return results


def summary(results: list[SeedResult], wall_s: float) -> str:
    """A line per seed and one for the population."""
    lines = []
    for r in results:
        ret = "-" if r.rolling_return is None else f"{r.rolling_return:.1f}"
        state = f"stopped: {r.failure}" if r.failure else f"done ({r.reason})"
        lines.append(f"seed {r.seed}: {r.env_steps:,} env steps, rolling return {ret}, {state}"
                     f"  [{r.out}]")
    done = [r for r in results if r.failure is None]
    lines.append(f"{len(done)} of {len(results)} seeds trained in {wall_s:.1f} s (one process)")
    return "\n".join(lines)
