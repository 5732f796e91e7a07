"""A rollout's image observations written in place: ``[T, B, ...]`` buffers of their own memory.

Stacking a rollout's per-step frames at the end (``np.array(list_of_steps)``) holds every frame
twice while it copies; the per-step arrays then go back to the C allocator, which on glibc keeps
them (its mmap threshold rises to the size of the first large block freed), so the process's
resident memory grows by a rollout it no longer uses. The Collector instead writes each step's
image parts into row ``t`` of a buffer made for the whole rollout (:class:`FrameBuffer`), from
an anonymous memory map of its own (:func:`page_array`): page-aligned, so it can be handed to
TensorFlow without a copy (:func:`writable_alias` for DLPack; the update does so), and
returned to the operating system as soon as the last array or tensor on it is dropped.

Each frame is stored once: ``next_observations[t, b]`` is ``observations[t + 1, b]`` except
where step ``t`` ended an episode (there the episode's final frame; the next row holds the reset
frame) and at the last row. So a buffer has ``T + 1`` rows (row ``T``: the observation after
the last step), the observations are its rows ``0..T-1`` and the next observations its rows
``1..T`` with the few final frames put back (:class:`NextFrames`, ``[K, ...]`` with their
``(t, b)``). This halves the frames of a rollout (29 MB of rl-zoo's 8 x 128 Atari rollout).
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["FrameBuffer", "NextFrames", "page_array", "writable_alias"]

# Linux: the kernel maps every page of a buffer at once (written page by page, a fresh map
# faulted once per 4 KiB page)
_POPULATE = ({"flags": mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE}
             if hasattr(mmap, "MAP_POPULATE") else {})


def page_array(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A zero-filled C-contiguous array on an anonymous memory map of its own (page-aligned;
    unmapped when the array and every view of it are gone)."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    memory = mmap.mmap(-1, max(1, count * dtype.itemsize), **_POPULATE)
    return np.frombuffer(memory, dtype, count=count).reshape(shape)


def writable_alias(x: np.ndarray) -> np.ndarray | None:
    """A writable view of ``x`` if its memory is a :func:`page_array`'s (the Trajectory marks
    the arrays read-only, not the map), else None. For handing frames over through DLPack,
    whose older protocol cannot mark an array read-only: the reader (the update's graph) never
    writes to it, and no other array's memory is ever shared this way."""
    base: Any = x
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):  # np.frombuffer's
        base = base.obj
    if not isinstance(base, mmap.mmap):
        return None
    alias = x.view()
    alias.flags.writeable = True  # the map is writable; the view's flag only guards numpy
    return alias


class NextFrames:
    """A rollout's next observations with their image parts stored once.

    Row ``t`` of image part ``i`` is ``frames[i][t + 1]``, except at the ``K`` steps ``index``
    (``[K, 2]`` int32 ``(t, b)``, sorted) whose next frame differs from the following row's:
    there it is ``finals[i][k]``. The non-image parts are stored whole.

    Args:
      frames: per image part, ``[T + 1, B, *shape]``: rows ``0..T-1`` the observations' image
        parts (the Trajectory's ``observations`` are views of them), row ``T`` the observation
        that followed the last step.
      finals: per image part, ``[K, *shape]``.
      index: ``[K, 2]`` int32.
      parts: the next observations' parts in layout order, None where a part is an image
        (the vector part, ``[T, B, d]`` float32, if any).
      single: the observation is one array (no tuple of parts).
    """

    def __init__(self, frames: Sequence[np.ndarray], finals: Sequence[np.ndarray],
                 index: np.ndarray, parts: Sequence[Any], single: bool):
        self.frames, self.finals = tuple(frames), tuple(finals)
        self.index, self.parts, self.single = index, tuple(parts), single
        self._full: Any = None  # the materialised next observations, once asked for

    def observations(self, parts: Sequence[Any]) -> Any:
        """The observations: ``parts`` (the non-image ones; None at images) with each image part
        the view of rows ``0..T-1`` of its buffer."""
        it = iter(self.frames)
        out = [next(it)[:-1] if x is None else x for x in parts]
        for x in out:
            x.flags.writeable = False
        return out[0] if self.single else tuple(out)

    def full(self) -> Any:
        """The ``[T, B, ...]`` next observations as stacked arrays (read-only), built on the first
        call and kept."""
        if self._full is None:
            t, b = self.index[:, 0], self.index[:, 1]
            images = iter(self.frames)
            finals = iter(self.finals)
            out = []
            for x in self.parts:
                if x is None:
                    x = next(images)[1:].copy()
                    x[t, b] = next(finals)
                    x.flags.writeable = False
                out.append(x)
            self._full = out[0] if self.single else tuple(out)
        return self._full

    @staticmethod
    def merged(others: Sequence[NextFrames]) -> NextFrames:
        """Several workers' next frames of the same ``T`` -> one, their env columns side by side
        in the given order (the frames written into one new page-aligned buffer)."""
        frames = []
        for parts in zip(*(n.frames for n in others)):
            shape = (parts[0].shape[0], sum(p.shape[1] for p in parts), *parts[0].shape[2:])
            out = page_array(shape, parts[0].dtype)
            np.concatenate(parts, axis=1, out=out)
            out.flags.writeable = False
            frames.append(out)
        offsets = np.cumsum([0] + [n.frames[0].shape[1] for n in others[:-1]])
        index = np.concatenate([n.index + np.array([0, o], np.int32)
                                for n, o in zip(others, offsets)]).astype(np.int32)
        order = np.lexsort((index[:, 1], index[:, 0]))  # by t, then b
        finals = [_frozen(np.concatenate(p)[order]) for p in zip(*(n.finals for n in others))]
        parts = [None if p[0] is None else _frozen(np.concatenate(p, axis=1))
                 for p in zip(*(n.parts for n in others))]
        return NextFrames(frames, finals, _frozen(index[order]), parts, others[0].single)

    @staticmethod
    def of(observations: Any, next_observations: Any, layout: Any) -> NextFrames:
        """The compact form of whole ``[T, B, ...]`` observations and next observations (e.g. of
        a whole-episode batch), by comparing ``next_observations[t]`` with
        ``observations[t + 1]`` in every image part (the frames are copied once)."""
        obs, nxt = layout.split(observations), layout.split(next_observations)
        images = [i for i, p in enumerate(layout.parts) if p.image]
        num, envs = obs[images[0]].shape[:2]
        differs = np.zeros((max(num - 1, 0), envs), bool)  # [T - 1, B]
        frames = []
        for i in images:
            buf = page_array((num + 1, *obs[i].shape[1:]), obs[i].dtype)
            buf[:num], buf[num] = obs[i], nxt[i][num - 1]
            frames.append(_frozen(buf))
            differs |= (nxt[i][:-1] != obs[i][1:]).reshape(*differs.shape, -1).any(-1)
        index = _frozen(np.argwhere(differs).astype(np.int32).reshape(-1, 2))  # sorted (t, b)
        finals = [_frozen(nxt[i][index[:, 0], index[:, 1]]) for i in images]
        parts = [None if p.image else x for x, p in zip(nxt, layout.parts)]
        return NextFrames(frames, finals, index, parts, layout.single)

    def __reduce__(self):  # pickled (e.g. a Ray message) in the compact form, never the full one
        return NextFrames, (self.frames, self.finals, self.index, self.parts, self.single)


def _frozen(x: np.ndarray) -> np.ndarray:
    x.flags.writeable = False
    return x


class FrameBuffer:
    """The image parts of a rollout's observations, ``[T + 1, B, *shape]`` each in its own
    dtype, written one vector step at a time, and the final frames of the steps whose next
    observation is not the next row's (see :class:`NextFrames`).

    Which next frames are finals is found by comparison, never assumed from the episode ends:
    row ``t + 1`` first holds step ``t``'s next observation; when step ``t + 1``'s observation
    is written over it, the env columns that differ are kept as finals of ``(t, b)``.

    Args:
      layout: the Collector's :class:`pgrad.rl.observations.spaces.ObsLayout` (with at least one
        image).
      num_steps: ``T``, the vector steps of the rollout.
      num_envs: ``B``.
    """

    def __init__(self, layout: Any, num_steps: int, num_envs: int):
        self.layout = layout
        self.index = [i for i, p in enumerate(layout.parts) if p.image]
        self.frames = [page_array((num_steps + 1, num_envs, *layout.parts[i].shape),
                                  layout.parts[i].dtype) for i in self.index]
        self._finals: list[list[np.ndarray]] = [[] for _ in self.index]  # per part, [*shape]
        self._at: list[tuple[int, int]] = []  # their (t, b)

    def write(self, t: int, obs: Any, next_obs: Any) -> tuple[Any, Any]:
        """Copies step ``t``'s image parts into rows ``t`` (``obs``) and ``t + 1`` (``next_obs``);
        returns ``(obs, next_obs)`` with those parts replaced by None (their arrays need not be
        kept: only the vector part, if any, is left to stack)."""
        obs_parts = self._put(t, obs)
        nxt = list(self.layout.split(next_obs))
        for buf, i in zip(self.frames, self.index):
            buf[t + 1] = nxt[i]
            nxt[i] = None
        return obs_parts, tuple(nxt)

    def _put(self, t: int, obs: Any) -> tuple:
        """Writes ``obs``' image parts into row ``t``, first keeping the next frames of step
        ``t - 1`` they differ from."""
        parts = list(self.layout.split(obs))
        if t > 0:
            self._keep_finals(t, [parts[i] for i in self.index])
        for buf, i in zip(self.frames, self.index):
            buf[t] = parts[i]
            parts[i] = None
        return tuple(parts)

    def _keep_finals(self, t: int, images: list[np.ndarray]) -> None:
        """Keeps row ``t``'s frames (step ``t - 1``'s next observation) of the env columns where
        ``images`` (the observation to be written there, every image part) differs."""
        differs = np.zeros(self.frames[0].shape[1], bool)
        for buf, x in zip(self.frames, images):
            differs |= (buf[t] != x).reshape(differs.shape[0], -1).any(1)
        for b in np.flatnonzero(differs):
            self._at.append((t - 1, int(b)))
            for kept, buf in zip(self._finals, self.frames):
                kept.append(buf[t, b].copy())

    def next_frames(self, steps: Sequence[Any], last_obs: Any) -> NextFrames:
        """The rollout's next observations after ``T = len(steps)`` :meth:`write` s (fewer than
        the buffers were made for when a step raised): ``last_obs``, the observation that
        followed the last step (None: not known), goes into row ``T``, its differing frames
        kept first. ``steps`` are :meth:`write`'s second results (their vector parts)."""
        n = len(steps)
        if last_obs is not None:
            parts = self.layout.split(last_obs)
            self._keep_finals(n, [parts[i] for i in self.index])
            for buf, i in zip(self.frames, self.index):
                buf[n] = parts[i]
        frames = [_frozen(b[: n + 1]) for b in self.frames]
        finals = [_frozen(np.array(k) if k else np.zeros((0, *f.shape[2:]), f.dtype))
                  for k, f in zip(self._finals, self.frames)]
        index = _frozen(np.array(self._at, np.int32).reshape(-1, 2))
        parts = [None if p.image else _frozen(np.array([s[i] for s in steps]))
                 for i, p in enumerate(self.layout.parts)]
        return NextFrames(frames, finals, index, parts, self.layout.single)

    def observations(self, steps: Sequence[Any], next_frames: NextFrames) -> Any:
        """The rollout's observations in the layout's form: views of the buffers for the image
        parts, the vector part (if any) stacked from ``steps`` (:meth:`write`'s first results)."""
        return next_frames.observations([None if p.image else np.array([s[i] for s in steps])
                                         for i, p in enumerate(self.layout.parts)])
