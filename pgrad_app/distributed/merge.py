"""Merging the rollout workers' results into the learner's: ``[T_k, n_k, ...]`` trajectory
pieces into one ``[T, B, ...]`` trajectory in env order (shorter whole-episode pieces padded and
masked; image frames kept in compact form where every piece has it), and the workers' running
normaliser statistics into the learner's (Chan et al.'s parallel moments).

Used by :class:`pgrad_app.distributed.workers.RemoteCollector` after every synchronous rollout.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pgrad.rl.collection.rollout import Trajectory
from pgrad.rl.observations.frames import NextFrames


def merge_trajectories(parts: list[Trajectory]) -> Trajectory:
    """``[T_k, n_k, ...]`` pieces -> ``[T, B, ...]`` in env order; shorter ones padded, masked.

    Pieces whose next observations are in compact form (image frames stored once, as the
    workers' Collectors send them) and of one length merge in that form."""
    T = max(p.rewards.shape[0] for p in parts)
    masked = any(p.mask is not None for p in parts) or len({p.rewards.shape[0]
                                                            for p in parts}) > 1
    compact, nexts = None, [n for n in (p.next_frames for p in parts) if n is not None]
    if not masked and len(nexts) == len(parts):
        compact = NextFrames.merged(nexts)
    fields: dict[str, Any] = {}
    for name in Trajectory._fields:
        if compact is not None and name in ("observations", "next_observations"):
            continue
        pieces = [getattr(p, name) for p in parts]
        if name == "mask":
            if not masked:
                fields[name] = None
                continue
            pieces = [np.ones(p.rewards.shape, np.float32) if p.mask is None else p.mask
                      for p in parts]
        if pieces[0] is None:
            fields[name] = None
            continue
        if isinstance(pieces[0], tuple):  # observations with images: part by part
            fields[name] = tuple(merge_field(name, list(p), T) for p in zip(*pieces))
        else:
            fields[name] = merge_field(name, pieces, T)
    if compact is not None:
        vectors = [None if c is None else np.concatenate(
            [p.observations[i] for p in parts], axis=1) for i, c in enumerate(compact.parts)]
        fields["observations"] = compact.observations(vectors)
        fields["next_observations"] = compact
    return Trajectory(**fields)


def merge_field(name: str, pieces: list[np.ndarray], T: int) -> np.ndarray:
    """``[T_k, n_k, ...]`` arrays of field ``name`` -> ``[T, B, ...]``, shorter ones padded."""
    padded = []
    for x in pieces:
        if x.shape[0] < T:  # padding rows: masked out; terminated so nothing bootstraps;
            # every action legal (a row forbidding all would be no distribution)
            fill = 1.0 if name in ("terminated", "action_mask") else 0.0
            pad = np.full((T - x.shape[0], *x.shape[1:]), fill, x.dtype)
            x = np.concatenate([x, pad])
        padded.append(x)
    out = np.concatenate(padded, axis=1)
    out.flags.writeable = False
    return out


def merge_stats(results: list[dict], key: str, rms) -> None:
    """Sets running statistic ``rms`` (the learner's) to worker 0's final statistics with every
    other worker's batch moments merged in."""
    rms.mean, rms.var, rms.count = results[0]["stats"][key][0]
    for r in results[1:]:
        mean, var, count = r["stats"][key][1]
        if count > 0:
            rms.update_from_moments(mean, var, count)
