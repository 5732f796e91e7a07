"""What training logs, how often, under which names: shared by ``pgrad-train``'s run directory
and ``agent.learn(..., tensorboard_log=...)`` / :class:`TensorBoardLog`.

**Cadence.** A row is written every ``log_every`` updates (:func:`default_log_every`: A2C every
100 updates as Stable-Baselines3's ``log_interval=100``, PPO and NPG once per update = once per
rollout as SB3's PPO and sb3-contrib's TRPO, REINFORCE every 10), also after the first update, at
least every :data:`LOG_SECONDS` seconds, and at every checkpoint and at the end. The update's
metrics already arrive with the new weights in the update's one device fetch (``agent.step``),
so between rows they are only summed on the host (:class:`Interval`, a few microseconds); a row
holds their **mean** over the interval and, for what a mean could hide (:data:`MAX_KEYS`: the
gradient norms, the NaN/Inf skips, the KL), their **maximum** as ``KEY_max``.

**Names** (:func:`tags`), as Stable-Baselines3 writes them: ``rollout/ep_rew_mean`` and
``rollout/ep_len_mean`` over the last 100 training episodes, ``rollout/success_rate`` (the mean
``info["is_success"]`` of the last 100 that reported one, if the env reports it),
``train/<metric>`` for the update's
metrics (SB3's ``policy_loss``, ``value_loss``, ``entropy_loss`` = -entropy, ``approx_kl``,
``clip_fraction``, ``clip_range``, ``learning_rate``, ``explained_variance``, ``std``, plus
pgrad's own: ``grad_norm``, ``pg_grad_norm``, ``nonfinite_skipped``, ...), ``train/n_updates``,
``time/fps`` (env steps per second of this run) and ``time/time_elapsed``; an evaluation as
``eval/mean_reward`` and ``eval/mean_ep_length``.

**TensorBoard** (:class:`TensorBoardWriter`): each row is one ``Summary`` of ``simple_value``
scalars written with one op, so TensorBoard's ``EventAccumulator.Scalars(tag)`` (what plotting
scripts call) reads them, as it reads SB3's; array metrics (``--diagnostics``' per-step norms)
are histograms of the row's last update.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agents.learning import Callback, Loop

if TYPE_CHECKING:
    from agents.protocol import Agent

#: A row at least this often (seconds), whatever ``log_every`` says (a slow run still reports).
LOG_SECONDS = 30.0
#: Episodes in ``rollout/ep_rew_mean`` / ``ep_len_mean`` (SB3's ``stats_window_size``).
EPISODE_WINDOW = 100
#: Metrics whose maximum over a row's interval is written beside the mean (``KEY_max``).
MAX_KEYS = ("grad_norm", "pg_grad_norm", "nonfinite_skipped", "approx_kl")
#: Updates per row by agent (see the module docstring).
LOG_EVERY = {"a2c": 100, "ppo": 1, "npg": 1, "reinforce": 10}
#: pgrad's metric name -> SB3's tag (and the sign it takes), where they differ.
SB3_NAMES = {"entropy": ("train/entropy_loss", -1.0)}


def default_log_every(agent: Agent) -> int:
    """Updates per logged row for ``agent`` (:data:`LOG_EVERY`; 1 for an agent not there)."""
    return LOG_EVERY.get(getattr(agent, "name", ""), 1)


class Interval:
    """The updates since the last row: sums (and maxima) of their scalar metrics, the last
    update's array metrics; :meth:`row` gives the means and resets."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.count = 0
        self.sums: dict[str, float] = {}
        self.maxima: dict[str, float] = {}
        self.arrays: dict[str, np.ndarray] = {}

    def add(self, metrics: Mapping[str, Any]) -> None:
        self.count += 1
        for k, v in metrics.items():
            if isinstance(v, float | int):
                x = float(v)
            else:
                a = np.asarray(v)
                if a.ndim:
                    if a.size:
                        self.arrays[k] = a
                    continue
                x = float(a)
            self.sums[k] = self.sums.get(k, 0.0) + x
            if k in MAX_KEYS:
                old = self.maxima.get(k)  # NaN wins: a max must not hide a non-finite value
                if old is None or math.isnan(x) or (not math.isnan(old) and x > old):
                    self.maxima[k] = x

    def row(self) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        """``(scalars, arrays)``: each metric's mean over the interval (``KEY_max`` beside the
        ones in :data:`MAX_KEYS`), the last update's arrays; then resets."""
        n = max(1, self.count)
        scalars: dict[str, float] = {}
        for k, s in self.sums.items():
            scalars[k] = s / n
            if k in self.maxima:
                scalars[f"{k}_max"] = self.maxima[k]
        arrays = self.arrays
        self.reset()
        return scalars, arrays


def episode_means(loop: Loop) -> tuple[float | None, float | None]:
    """``(ep_rew_mean, ep_len_mean)`` over the last :data:`EPISODE_WINDOW` training episodes."""
    stats = loop.stats
    returns = list(stats.recent_returns)[-EPISODE_WINDOW:]
    lengths = list(getattr(stats, "recent_lengths", ()))[-EPISODE_WINDOW:]
    return (float(np.mean(returns)) if returns else None,
            float(np.mean(lengths)) if lengths else None)


def success_rate(loop: Loop) -> float | None:
    """SB3's ``rollout/success_rate``: the mean ``info["is_success"]`` of the last
    :data:`EPISODE_WINDOW` training episodes that reported one (``None`` before any did)."""
    recent = list(getattr(loop.stats, "recent_successes", ()))[-EPISODE_WINDOW:]
    return float(np.mean(recent)) if recent else None


def policy_std(agent: Agent) -> float | None:
    """The Gaussian head's mean standard deviation ``exp(log_std)`` (SB3's ``train/std``), if
    it has a state-independent one."""
    log_std = getattr(getattr(agent, "mirror", None), "log_std", None)
    if log_std is None:
        return None
    return float(np.mean(np.exp(np.asarray(log_std, np.float64))))


def tags(scalars: Mapping[str, float], loop: Loop, fps: float | None = None
         ) -> dict[str, float]:
    """One row's values under their TensorBoard / W&B names (see the module docstring)."""
    out: dict[str, float] = {}
    rew, length = episode_means(loop)
    if rew is not None:
        out["rollout/ep_rew_mean"] = rew
    if length is not None:
        out["rollout/ep_len_mean"] = length
    success = success_rate(loop)
    if success is not None:
        out["rollout/success_rate"] = success
    for k, v in scalars.items():
        name, sign = SB3_NAMES.get(k, (f"train/{k}", 1.0))
        out[name] = sign * float(v)
    std = policy_std(loop.agent)
    if std is not None:
        out["train/std"] = std
    out["train/n_updates"] = float(loop.updates)
    if fps is not None:
        out["time/fps"] = float(fps)
    out["time/time_elapsed"] = float(loop.wall_s())
    return out


def eval_tags(evaluation: Mapping[str, Any]) -> dict[str, float]:
    """An evaluation row (:class:`agents.callbacks.EvalCallback`) under SB3's names."""
    return {"eval/mean_reward": float(evaluation["return_mean"]),
            "eval/std_reward": float(evaluation["return_std"]),
            "eval/mean_ep_length": float(evaluation["length_mean"])}


class TensorBoardWriter:
    """A TensorBoard event file of ``simple_value`` scalars (``EventAccumulator.Scalars()``
    reads them) and histograms, under ``directory``."""

    def __init__(self, directory: str | Path):
        import tensorflow as tf

        self.tf = tf
        self.writer = tf.summary.create_file_writer(str(directory))

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        """All of ``values`` as one Summary at ``step`` (one op); non-finite values too."""
        tf = self.tf
        summary = tf.compat.v1.Summary(value=[
            tf.compat.v1.Summary.Value(tag=k, simple_value=float(v)) for k, v in values.items()])
        with self.writer.as_default(step=int(step)):
            tf.summary.experimental.write_raw_pb(summary.SerializeToString())

    def histograms(self, step: int, arrays: Mapping[str, np.ndarray]) -> None:
        if not arrays:
            return
        tf = self.tf
        with self.writer.as_default(step=int(step)):
            for k, a in arrays.items():
                tf.summary.histogram(k, np.asarray(a, np.float32))

    def flush(self) -> None:
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.flush()
            self.writer.close()
            self.writer = None


class Cadence:
    """When a row is due: after the first update, every ``every`` updates, or once
    :data:`LOG_SECONDS` passed since the last row. ``every=None``: the agent's default."""

    def __init__(self, every: int | None = None, seconds: float = LOG_SECONDS):
        if every is not None and int(every) < 1:
            raise ValueError(f"log_every must be >= 1; got {every}.")
        self.every, self.seconds = (None if every is None else int(every)), float(seconds)

    def start(self, loop: Loop) -> None:
        if self.every is None:
            self.every = default_log_every(loop.agent)
        self._first = True
        self._last_t = time.monotonic()
        self._since = 0
        self._fps_t, self._fps_steps = time.monotonic(), loop.env_steps

    def due(self, loop: Loop) -> bool:
        """Counts this update; true if a row is due now."""
        self._since += 1
        every = self.every if self.every is not None else default_log_every(loop.agent)
        return (self._first or self._since >= every
                or time.monotonic() - self._last_t >= self.seconds)

    def written(self) -> None:
        self._first, self._since, self._last_t = False, 0, time.monotonic()

    def fps(self, loop: Loop) -> float | None:
        """Env steps per second since this run started (SB3's ``time/fps``)."""
        dt = time.monotonic() - self._fps_t
        return (loop.env_steps - self._fps_steps) / dt if dt > 0 else None


def next_run_dir(root: str | Path, name: str) -> Path:
    """``root/NAME_k`` with ``k`` one more than the largest there (SB3's ``A2C_1``, ``A2C_2``)."""
    root = Path(root)
    pattern = re.compile(rf"^{re.escape(name)}_(\d+)$")
    taken = [int(m.group(1)) for p in (root.iterdir() if root.is_dir() else ())
             if (m := pattern.match(p.name))]
    return root / f"{name}_{max(taken, default=0) + 1}"


class TensorBoardLog(Callback):
    """TensorBoard logging for ``agent.learn`` (what ``tensorboard_log=`` adds)::

        agent.learn(100_000, callbacks=TensorBoardLog("runs/"))   # runs/A2C_1, runs/A2C_2, ...

    Writes the rows of the module docstring every ``log_every`` updates (default: the agent's,
    :func:`default_log_every`) into ``root/NAME_k`` (``NAME``: ``tb_log_name``, default the
    agent's class name; ``k`` counts up as SB3's), an evaluation of an :class:`EvalCallback`
    before this one as ``eval/*``.
    """

    def __init__(self, root: str | Path, tb_log_name: str | None = None,
                 log_every: int | None = None):
        self.root, self.tb_log_name = Path(root), tb_log_name
        self.cadence = Cadence(log_every)
        self.interval = Interval()
        self.writer: TensorBoardWriter | None = None
        self.directory: Path | None = None

    def on_start(self, loop: Loop) -> None:
        name = self.tb_log_name or type(loop.agent).__name__
        self.directory = next_run_dir(self.root, name)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.writer = TensorBoardWriter(self.directory)
        self.cadence.start(loop)

    def _writer(self) -> TensorBoardWriter:
        if self.writer is None:
            raise RuntimeError("TensorBoardLog: written to before on_start or after close")
        return self.writer

    def on_update(self, loop: Loop) -> None:
        self.interval.add(loop.metrics)
        if loop.evaluation is not None:
            self._writer().scalars(loop.env_steps, eval_tags(loop.evaluation))
        if self.cadence.due(loop):
            self.write(loop)

    def write(self, loop: Loop) -> None:
        if not self.interval.count:
            return
        scalars, arrays = self.interval.row()
        writer = self._writer()
        writer.scalars(loop.env_steps, tags(scalars, loop, self.cadence.fps(loop)))
        writer.histograms(loop.env_steps, {f"train/{k}": a for k, a in arrays.items()})
        self.cadence.written()

    def on_end(self, loop: Loop) -> None:
        self.write(loop)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def finite(values: Mapping[str, float]) -> dict[str, float]:
    """The finite ones of ``values`` (W&B refuses NaN in some plots)."""
    return {k: v for k, v in values.items() if math.isfinite(v)}
