"""A rollout's image observations written in place: ``[T, B, ...]`` buffers of their own memory.

Stacking a rollout's per-step frames at the end (``np.array(list_of_steps)``) holds every frame
twice while it copies; the per-step arrays then go back to the C allocator, which on glibc keeps
them (its mmap threshold rises to the size of the first large block freed), so the process's
resident memory grows by a rollout it no longer uses. The Collector instead writes each step's
image parts into row ``t`` of a buffer made for the whole rollout (:class:`FrameBuffer`), from
an anonymous memory map of its own (:func:`page_array`): page-aligned, so it can be handed to
TensorFlow without a copy (:func:`writable_alias` for DLPack; the update does so), and
returned to the operating system as soon as the last array or tensor on it is dropped.
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["FrameBuffer", "page_array", "writable_alias"]

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


class FrameBuffer:
    """The image parts of a rollout's observations and next observations, ``[T, B, *shape]``
    each in its own dtype, written one vector step at a time.

    Args:
      layout: the Collector's :class:`pgrad.rl.spaces.ObsLayout` (with at least one image).
      num_steps: ``T``, the vector steps of the rollout.
      num_envs: ``B``.
    """

    def __init__(self, layout: Any, num_steps: int, num_envs: int):
        self.layout = layout
        self.index = [i for i, p in enumerate(layout.parts) if p.image]
        shapes = [(num_steps, num_envs, *layout.parts[i].shape) for i in self.index]
        dtypes = [layout.parts[i].dtype for i in self.index]
        self.obs = [page_array(s, d) for s, d in zip(shapes, dtypes)]
        self.next_obs = [page_array(s, d) for s, d in zip(shapes, dtypes)]

    def write(self, t: int, obs: Any, next_obs: Any) -> tuple[Any, Any]:
        """Copies step ``t``'s image parts into row ``t``; returns ``(obs, next_obs)`` with those
        parts replaced by None (their arrays need not be kept: only the vector part, if any,
        is left to stack)."""
        return self._put(self.obs, t, obs), self._put(self.next_obs, t, next_obs)

    def _put(self, buffers: list[np.ndarray], t: int, obs: Any) -> Any:
        parts = list(self.layout.split(obs))
        for buf, i in zip(buffers, self.index):
            buf[t] = parts[i]
            parts[i] = None
        return tuple(parts)

    def observations(self, steps: Sequence[Any], buffers: list[np.ndarray]) -> Any:
        """The rollout's observations in the layout's form: the buffers for the image parts,
        the vector part (if any) stacked from ``steps`` (each a :meth:`write` result)."""
        it = iter(buffers)
        parts = [next(it) if p.image else np.array([s[i] for s in steps])
                 for i, p in enumerate(self.layout.parts)]
        return self.layout.join(parts)
