"""A callback that logs a scalar of its own to TensorBoard and stops training early.

``agent.learn(N, callbacks=cb)`` calls ``cb.on_update(loop)`` after every update. A callback
sees ``loop.metrics`` (the update's metrics), ``loop.new_episodes`` (``(env_step, return,
length)`` of the episodes that ended in it), ``loop.env_steps`` and ``loop.rolling_return()``.

* **A custom scalar**: put it into ``loop.metrics``. With ``tensorboard_log=DIR`` (or
  ``pgrad-train``'s run directory) every metric is written as ``train/<name>``, so
  ``train/best_rolling_return`` below appears in TensorBoard beside ``train/policy_loss``.
  User callbacks run before the logger, so the value is in the same row; a row holds the mean
  over the updates since the previous row (``log_every``), as every other metric.
* **Stopping early**: return ``False`` or call ``loop.stop(reason)``; the run ends after this
  update and every other callback still sees it.

``PlateauStop`` stops once the rolling return reaches a target, or when it has not improved for
``patience`` updates. The script reads the TensorBoard events back to show the scalar is there.

Run: ``python examples/callback_custom_scalar.py`` (A2C on CartPole-v1 to a rolling return of
200, about a minute; ``--target 30 --steps 20000`` for a smoke run). Then
``tensorboard --logdir DIR`` with the directory it prints.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

# isort: off
from pgrad_app.quiet import silence  # noqa: I001

silence()  # first: TensorFlow's start-up noise off (what pgrad's commands do)
import agents  # noqa: E402
from agents.learning import Callback, Loop  # noqa: E402
from agents.logger import TensorBoardLog  # noqa: E402

# isort: on


class PlateauStop(Callback):
    """Logs ``best_rolling_return`` and ``updates_since_best``; stops at ``target`` or after
    ``patience`` updates without an improvement of more than ``min_delta``."""

    def __init__(self, target: float, patience: int = 200, min_delta: float = 1.0):
        self.target, self.patience, self.min_delta = float(target), int(patience), min_delta
        self.best: float | None = None
        self.since_best = 0
        self.reason: str | None = None

    def on_update(self, loop: Loop) -> bool | None:
        rolling = loop.rolling_return()  # None until an episode has finished
        if rolling is None:
            return None
        if self.best is None or rolling > self.best + self.min_delta:
            self.best, self.since_best = rolling, 0
        else:
            self.since_best += 1
        loop.metrics["best_rolling_return"] = self.best  # -> train/best_rolling_return
        loop.metrics["updates_since_best"] = float(self.since_best)
        if rolling >= self.target:
            self.reason = f"rolling return {rolling:.1f} >= {self.target:g}"
        elif self.since_best >= self.patience:
            self.reason = f"no improvement in {self.patience} updates (best {self.best:.1f})"
        if self.reason:
            loop.stop(self.reason)  # the same as returning False, with a reason
        return None


def read_scalars(logdir: Path, tag: str) -> list[tuple[int, float]]:
    """``(step, value)`` of one TensorBoard tag, as plotting scripts read them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = []
    for run in sorted(p for p in logdir.iterdir() if p.is_dir()):
        acc = EventAccumulator(str(run))
        acc.Reload()
        if tag in acc.Tags()["scalars"]:
            out += [(e.step, e.value) for e in acc.Scalars(tag)]
    return out


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=float, default=200.0, help="rolling return to stop at")
    parser.add_argument("--steps", type=int, default=200_000, help="env steps to train at most")
    parser.add_argument("--logdir", type=Path, default=None,
                        help="TensorBoard folder (default: a new temporary one)")
    args = parser.parse_args(argv)

    logdir = args.logdir or Path(tempfile.mkdtemp(prefix="pgrad-tb-"))
    # log_every=1 would write every update; the default (A2C: every 100 updates, as SB3) is
    # what a long run wants. TensorBoardLog is what tensorboard_log= adds, here with a cadence.
    stop = PlateauStop(args.target)
    agent = agents.make("a2c", "CartPole-v1", seed=0)
    agent.learn(args.steps, callbacks=[stop, TensorBoardLog(logdir, log_every=10)],
                progress=False)
    print(f"stopped after {agent.env_steps} of {args.steps} env steps: {stop.reason}")
    values = read_scalars(logdir, "train/best_rolling_return")
    print(f"TensorBoard ({logdir}): train/best_rolling_return has {len(values)} points, "
          f"last {values[-1][1]:.1f} at env step {values[-1][0]}" if values else "no points")
    agent.close()
    return {"env_steps": float(agent.env_steps), "points": float(len(values)),
            "last_logged": values[-1][1] if values else float("nan"),
            "best": stop.best if stop.best is not None else float("nan"),
            "stopped": float(stop.reason is not None)}


if __name__ == "__main__":
    main()
