"""Ready-made training callbacks (see :mod:`agents.learning` for the protocol).

* :class:`StopAtReturn` -- stop once the mean return of the last ``window`` training episodes
  reaches a threshold;
* :class:`Checkpoint` -- an atomic checkpoint every ``every`` env steps and at the end;
* :class:`EvalCallback` -- evaluate on separate envs every ``every`` env steps (deterministic
  actions by default), one row per evaluation in ``eval.csv``, the best policy so far saved with
  ``agent.save`` in ``best/``, optionally stop once the evaluation reaches a target.

Usage::

    from agents.callbacks import EvalCallback, StopAtReturn
    agent.learn(200_000, callbacks=[EvalCallback(every=10_000, episodes=10, log_dir="runs/x",
                                                 target=500), StopAtReturn(475)])
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.learning import HISTORY, ROLLING, Callback, Loop, progress_meta
from agents.persistence import best_policy
from agents.persistence import save_load as persistence
from pgrad.rl.evaluation.evaluate_policy import eval_seed
from pgrad.rl.storage.files import write_atomic

#: What EvalCallback writes into its ``log_dir``: one row per evaluation, the best policy so far.
EVAL_LOG = "eval.csv"
BEST = "best"
EVAL_COLUMNS = ("step", "wall_s", "return_mean", "return_std", "length_mean", "episodes",
                "deterministic", "best", "score")


def row_score(row: dict[str, Any]) -> float:
    """What an evaluation row is ranked by (``best/``, ``target``): its ``score``, or its
    ``return_mean`` (a row of an older pgrad, without the column)."""
    score = row.get("score")
    return float(score if score not in (None, "") else row["return_mean"])


class EvaluationInterrupted(BaseException):
    """Raised inside an evaluation by a signal handler that must not wait for it to end (an
    env whose episodes run long): :class:`EvalCallback` drops that evaluation and the run
    stops as the signal asks. A BaseException, as KeyboardInterrupt: no handler of env errors
    inside the evaluation may take it for one."""


class StopAtReturn(Callback):
    """Stops once the mean return of the last ``window`` training episodes is ``>= threshold``
    (and at least ``window`` episodes have finished)."""

    name = "stop_at_return"

    def __init__(self, threshold: float, window: int = ROLLING):
        if not math.isfinite(float(threshold)):
            raise ValueError(f"threshold must be finite; got {threshold}.")
        if not 1 <= int(window) <= HISTORY:
            raise ValueError(f"window must be in [1, {HISTORY}]; got {window}.")
        self.threshold, self.window = float(threshold), int(window)

    def on_update(self, loop: Loop) -> bool:
        recent = loop.stats.recent_returns
        rolling = loop.rolling_return(self.window)
        return not (len(recent) >= self.window and rolling is not None
                    and rolling >= self.threshold)


class Checkpoint(Callback):
    """An atomic, verified checkpoint of the agent every ``every`` env steps (or every
    ``seconds`` of training) and at the end.

    Args:
      directory: where the checkpoints go (``step-N/`` each; :mod:`pgrad.rl.storage.checkpoint`).
      every: env steps between checkpoints; 0: one every ``seconds`` of training instead.
      keep: newest checkpoints kept.
      seconds: training seconds between checkpoints when ``every`` is 0 (checked after each
        update, so a checkpoint comes with the first update past the interval).
    """

    def __init__(self, directory: str | os.PathLike, every: int = 10_000, keep: int = 3,
                 seconds: float = 60.0):
        if int(every) < 0:
            raise ValueError(f"every must be >= 0 (0: every `seconds`); got {every}.")
        if not 0 < float(seconds) < float("inf"):
            raise ValueError(f"seconds must be > 0; got {seconds}.")
        self.directory, self.every, self.keep = Path(directory), int(every), int(keep)
        self.seconds = float(seconds)
        self.last: Path | None = None
        self._saved_step: int | None = None
        self._next = 0.0  # the env step (or, time-based, training second) of the next one

    def meta(self, loop: Loop) -> dict[str, Any]:
        """What the checkpoint's meta.json records besides the agent."""
        return progress_meta(loop.agent)

    def save(self, loop: Loop) -> Path:
        """Writes a checkpoint now (once per env step) and returns its directory."""
        step = loop.env_steps
        if self._saved_step == step and self.last is not None:
            return self.last
        self.last = persistence.save_checkpoint(loop.agent, self.directory, self.meta(loop),
                                                keep=self.keep)
        self._saved_step = step
        return self.last

    def on_start(self, loop: Loop) -> None:
        self._schedule(loop)

    def on_update(self, loop: Loop) -> None:
        if (loop.wall_s() if self.every == 0 else loop.env_steps) >= self._next:
            self.save(loop)
            self._schedule(loop)

    def _schedule(self, loop: Loop) -> None:
        if self.every == 0:
            self._next = loop.wall_s() + self.seconds
        else:
            self._next = (loop.env_steps // self.every + 1) * self.every

    def on_end(self, loop: Loop) -> None:
        self.save(loop)


class EvalCallback(Callback):
    """Evaluates the policy on separate envs every ``every`` env steps.

    Args:
      env_id: the evaluation env (an id, a factory or an
        :class:`pgrad.rl.envs.recipe.EnvRecipe`, built afresh each evaluation; or one
        ``gym.Env`` instance); default: the agent's.
      every: env steps between evaluations.
      episodes: episodes per evaluation (episode ``i`` reset with ``seed + i``, the same
        episodes every time, so evaluations compare).
      deterministic: the policy's mode (default) instead of sampled actions.
      seed: seed of the first evaluation episode; default: pgrad's evaluation protocol, the
        agent's seed + 10000 (:func:`pgrad.rl.evaluation.evaluate_policy.eval_seed`: the episodes
        ``pgrad-evaluate`` and the benchmark's final score use too).
      log_dir: write ``log_dir/eval.csv`` (one row per evaluation) and keep the best policy in
        ``log_dir/best`` (``agents.load`` / ``pgrad.evaluate`` read it).
      best_dir: where the best policy goes instead (``None`` with no ``log_dir``: not kept).
      target: stop once an evaluation's score is ``>= target``.
      verbose: print one line per evaluation (above the progress bar).

    An agent of a game of many agents (``ippo``, ``mappo``) is evaluated on its own game by
    ``agent.evaluate_team`` (``env_id`` must be left out): the team's return. The **score** that
    ranks the evaluations (``best/``, ``target``) is the mean return, except under self-play,
    where the team's return of a zero-sum game is 0: there it is the learner's win rate
    against the uniform random player in its worse seat (``min`` of first and second).

    After each evaluation ``loop.evaluation`` holds its row (``step, wall_s, return_mean, ...,
    score``) for the callbacks after this one; ``self.best`` is the best score so far.
    """

    name = "eval_target"

    def __init__(self, env_id: Any = None, every: int = 10_000, episodes: int = 10,
                 deterministic: bool = True, seed: int | None = None,
                 log_dir: str | os.PathLike | None = None,
                 best_dir: str | os.PathLike | None = None, target: float | None = None,
                 verbose: bool = True):
        if int(every) < 1:
            raise ValueError(f"every must be >= 1; got {every}.")
        if int(episodes) < 1:
            raise ValueError(f"episodes must be >= 1; got {episodes}.")
        self.env_id, self.every, self.episodes = env_id, int(every), int(episodes)
        self.deterministic, self.seed, self.target, self.verbose = (
            bool(deterministic), seed, target, verbose)
        self.log_path = Path(log_dir) / EVAL_LOG if log_dir is not None else None
        self.best_dir = (Path(best_dir) if best_dir is not None
                         else Path(log_dir) / BEST if log_dir is not None else None)
        self.best: float | None = None
        self.rows: list[dict[str, Any]] = []
        self._say: Callable[[str], None] = print
        self.running = False  # inside pgrad.evaluate (see EvaluationInterrupted)

    def on_start(self, loop: Loop) -> None:
        agent = loop.agent
        if hasattr(agent, "evaluate_team") and self.env_id not in (None, agent.env_id):
            raise ValueError(f"EvalCallback evaluates {agent.name} on its own game; leave "
                             f"env_id out (got {self.env_id!r}).")
        if self.env_id is None:
            if agent.env_unbuildable:
                raise ValueError(f"EvalCallback evaluates on envs of its own, and "
                                 f"{agent.env_unbuildable}; or pass EvalCallback(env_id=...).")
            self.env_id = agent.env_id
        if self.seed is None:
            self.seed = eval_seed(agent.seed)
        self._say = loop.say
        self._next = (loop.env_steps // self.every + 1) * self.every
        if self.log_path is not None:
            self._continue_log(self.log_path, loop.env_steps)

    def _continue_log(self, log_path: Path, step: int) -> None:
        """Keeps the rows of an earlier run up to ``step`` (a resumed run) and their best."""
        kept = []
        if log_path.exists():
            with open(log_path, newline="", errors="replace") as f:
                for row in csv.DictReader(f):
                    try:
                        if int(row["step"]) <= step:
                            row_score(row)
                            kept.append(row)
                    except (KeyError, TypeError, ValueError):
                        continue
        if self.best_dir is not None:  # best/ agrees with the rows kept (see best_policy)
            kept = best_policy.settle(self.best_dir, step, kept, self._warn)
        for row in kept:
            score = row_score(row)
            self.best = score if self.best is None else max(self.best, score)
        if self.best_dir is not None and not self.best_dir.exists():
            self.best = None  # no policy kept: the next evaluation's goes to best/
        log_path.parent.mkdir(parents=True, exist_ok=True)
        text = io.StringIO()
        writer = csv.DictWriter(text, EVAL_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(kept)
        write_atomic(log_path, text.getvalue())

    def _warn(self, text: str) -> None:
        self._say(f"warning: {text}")

    def evaluate(self, loop: Loop) -> dict[str, Any]:
        """Runs one evaluation now; logs it, keeps the best policy; returns its row."""
        import pgrad

        agent = loop.agent
        self.running = True  # a signal handler may interrupt it (EvaluationInterrupted)
        try:
            if hasattr(agent, "evaluate_team"):  # a game of many agents: on its own game
                r = agent.evaluate_team(self.episodes, self.deterministic, self.seed)
            else:
                r = pgrad.evaluate(agent, env_id=self.env_id, episodes=self.episodes,
                                   deterministic=self.deterministic, seed=self.seed)
        finally:
            self.running = False
        score = _score(r)
        improved = self.best is None or score > self.best
        row = {"step": loop.env_steps, "wall_s": round(loop.wall_s(), 3),
               "return_mean": r["return_mean"], "return_std": r["return_std"],
               "length_mean": r["length_mean"], "episodes": self.episodes,
               "deterministic": int(self.deterministic), "best": int(improved),
               "score": score}
        if improved:
            if self.best_dir is not None:  # the policy with its row, swapped in whole
                best_policy.keep(agent, self.best_dir, row)
            self.best = score
        self.rows.append(row)
        loop.evaluation = row
        if self.log_path is not None:
            with open(self.log_path, "a", newline="") as f:
                csv.DictWriter(f, EVAL_COLUMNS).writerow(row)
        if self.verbose:
            mode = "deterministic" if self.deterministic else "sampled"
            kept = f"; best so far, saved in {self.best_dir}" if improved and self.best_dir \
                else ""
            said = (f"return {r['return_mean']:.2f} ± {r['return_std']:.2f}" if "games" not in r
                    else f"win rate against random {r['win_rate_first']:.3f} first, "
                         f"{r['win_rate_second']:.3f} second")
            loop.say(f"eval at step {row['step']:,}: {said} over {self.episodes} "
                     f"{'games a seat' if 'games' in r else 'episodes'} ({mode}){kept}")
        return row

    def on_update(self, loop: Loop) -> bool:
        if loop.env_steps < self._next:
            return True
        self._next = (loop.env_steps // self.every + 1) * self.every
        try:
            row = self.evaluate(loop)
        except EvaluationInterrupted:  # a signal: no row, no best/; the run stops next
            loop.say(f"evaluation at env step {loop.env_steps:,} interrupted: not recorded")
            return True
        return self.target is None or row["score"] < self.target


def _score(result: dict[str, Any]) -> float:
    """The score of an evaluation's result (see :class:`EvalCallback`): under self-play the worse
    seat's win rate against the random player, else the mean return."""
    if "games" in result:
        return float(min(result["win_rate_first"], result["win_rate_second"]))
    return float(result["return_mean"])
