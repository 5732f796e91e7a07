"""The update's inputs: a ``[T, B]`` rollout packed into a few tensors on the host, and unpacked
again inside the compiled graph (:class:`agents.update.compiled.CompiledUpdate`).

Each tensor argument of a ``tf.function`` call costs a conversion and signature matching (~10 us
apiece), so a rollout travels as four tensors (floats, actions, mask, float64 statistics) plus
its image parts in their own dtype, handed over without a copy where the Collector's frame
buffers allow (:func:`frames_tensor`). Each frame travels once: the next observations' image
parts are the observations' buffers shifted by one row plus the few final frames of the steps
whose next observation is not the following row's (:class:`pgrad.rl.observations.frames.NextFrames`;
in the graph :class:`NextImages`), so the graph never needs a ``[T, B, ...]`` next-frames tensor.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from pgrad.rl.collection import rollout
from pgrad.rl.observations.frames import NextFrames, writable_alias


def frames_tensor(x: np.ndarray) -> tf.Tensor:
    """A rollout's ``[T, B, ...]`` image part as a tensor, on the same memory where it allows
    (the Collector's page-aligned frame buffers, :mod:`pgrad.rl.observations.frames`: handed over
    through
    DLPack, the graph only reads it), else a copy. A copy would hold every frame twice during
    the update: 29 MB more for rl-zoo's 8 x 128 Atari rollout."""
    alias = (writable_alias(x) if x.flags.c_contiguous and x.ctypes.data % 64 == 0 else None)
    if alias is None:
        return tf.constant(x)
    return tf.experimental.dlpack.from_dlpack(alias.__dlpack__())


class NextImages(NamedTuple):
    """The next observations of a rollout with images, in the graph (as
    :class:`pgrad.rl.observations.frames.NextFrames`): row ``t`` of image part ``i`` is
    ``frames[i][t + 1]`` except at the steps ``index`` whose next frame is ``finals[i][k]``."""

    frames: tuple  # per image part [T + 1, B, *shape]: rows 0..T-1 the observations' parts
    finals: tuple  # per image part [K, *shape]
    index: tf.Tensor  # [K, 2] int32 (t, b)
    vector: Any  # [T, B, d] float32 the vector part, or None


def _host_next_frames(traj: rollout.Trajectory, layout: Any) -> NextFrames:
    """``traj``'s next observations in compact form: the Collector's own, where its
    observations are still the views of those buffers, else made from the whole arrays."""
    nf = traj.next_frames
    if nf is not None:
        obs = [x for x, p in zip(layout.split(traj.observations), layout.parts) if p.image]
        if all(x.shape[0] + 1 == f.shape[0] and x.ctypes.data == f.ctypes.data
               for x, f in zip(obs, nf.frames)):
            return nf
    return NextFrames.of(traj.observations, traj.next_observations, layout)


class UpdateInputs:
    """Packs a rollout for the update (:meth:`inputs`) and unpacks it in the graph.

    Args:
      parts: the update's :class:`agents.update.parts.UpdateParts`, whose layout (observation
        parts), normalisers, schedules, counters and recurrent state sizes set the packing.
    """

    def __init__(self, parts: Any):
        self.parts = parts
        self.net = parts.net
        self.env_steps_var, self.updates_var = parts.counters.env_steps, parts.counters.updates
        self.normalizers = list(parts.normalizers)
        # Observations with images: each image part is its own input in its own dtype; the
        # float32 concatenation carries only the vector part (all of a flat observation).
        self.layout = parts.layout
        self.vector_dim = self.layout.vector_dim

    def inputs(self, traj: rollout.Trajectory, taken: int, scheduled: list[float] | None = None,
               recurrent: tuple | None = None, host: bool = False) -> tuple:
        """The update's inputs as four tensors (each tensor argument of a call costs a
        conversion and signature matching, ~10 us apiece), then the images, if any:

        ``[2 T B obs_dim + 4 T B]`` float32: observations, next observations, rewards,
        terminated, truncated and log-probs end to end (:meth:`unpack` splits them; of
        observations with images only their vector part, ``d`` wide, is here);
        the actions; the mask (``None`` for fixed-length rollouts); ``[1 + S + K]`` float64: the
        env steps taken, each normaliser's mean, var and count, then the value of each
        scheduled hyperparameter (``parts.schedules.names``) for this update; for observations with
        images, each image part's frames ``[T + 1, B, *shape]`` in its own dtype (uint8 frames
        stay 4x smaller than float32: rows ``0..T-1`` the observations, rows ``1..T`` the next
        observations except where they differ: episode ends), then each image part's ``[F,
        *shape]`` final frames of those steps and their ``[F, 2]`` int32 ``(t, b)`` (see
        :class:`NextImages`); then, for an env that masks actions, the ``[T, B, n]`` bool
        action masks; last, where the rollout carries the acting call's ``V(o_t)`` and the
        update uses them (``parts.values_from_acting``), those
        ``[T, B]`` float32 values (the update then skips its value pass over the observations).

        A recurrent policy's ``recurrent = (state0 [B, S], episode_start0 [B], state_end [B, S])``
        (the actor's state before the rollout, whether its first observations start episodes,
        its state after the rollout) end the float32 vector (:meth:`split_recurrent`).

        ``host``: the same arrays as numpy, not converted (for observations without images: a
        population stacks its members' inputs and converts each position once,
        :mod:`agents.update.batched`).
        """
        if scheduled is None:  # the values of the update that follows now
            scheduled = self.parts.schedules.values(int(self.env_steps_var.numpy()) + taken,
                                                    self.parts.budget(),
                                                    int(self.updates_var.numpy()))
        layout = self.layout
        obs, nxt = layout.vector(traj.observations), rollout.next_vector(traj, layout)
        vectors = [] if obs is None else [obs.ravel(), nxt.ravel()]
        tail = [] if recurrent is None else [np.ravel(x).astype(np.float32) for x in recurrent]
        floats = np.concatenate(vectors + [traj.rewards.ravel(), traj.terminated.ravel(),
                                           traj.truncated.ravel(), traj.log_probs.ravel()]
                                + tail, dtype=np.float32, casting="same_kind")
        stats = np.concatenate([[float(taken)]] + [
            np.ravel(x) for n in self.normalizers for x in (n.rms.mean, n.rms.var,
                                                               n.rms.count)]
            + [np.asarray(scheduled, np.float64)], dtype=np.float64, casting="same_kind")
        if host and not layout.flat:
            raise ValueError("host inputs are for observations without images")
        convert = np.asarray if host else tf.constant
        mask = None if traj.mask is None else convert(traj.mask)
        images = []
        if not layout.flat:
            nf = _host_next_frames(traj, layout)
            images = ([frames_tensor(x) for x in nf.frames]
                      + [tf.constant(x) for x in nf.finals] + [tf.constant(nf.index)])
        if traj.action_mask is not None:
            images.append(convert(traj.action_mask))
        if traj.values is not None and self.parts.values_from_acting:
            images.append(convert(np.asarray(traj.values, np.float32)))
        return (convert(floats), convert(traj.actions), mask, convert(stats), *images)

    def split_recurrent(self, floats: tf.Tensor, batch: int):
        """``floats -> (floats, (state0 [B, S], episode_start0 [B], state_end [B, S]))``."""
        size = self.net.state_sizes[0]
        n = batch * size
        floats, state0, start0, state_end = tf.split(
            floats, [tf.shape(floats)[0] - 2 * n - batch, n, batch, n])
        return floats, (tf.reshape(state0, [batch, size]), start0,
                        tf.reshape(state_end, [batch, size]))

    def split_images(self, rest: tuple) -> tuple[tuple, tf.Tensor | None, tf.Tensor | None]:
        """The trailing inputs -> ``(image parts, action masks or None, [T, B] values from
        acting or None)`` (see :meth:`inputs`; the masks are bool, the values float32)."""
        count = 0 if self.layout.flat else 2 * len(self.layout.images) + 1
        tail = {x.dtype: x for x in rest[count:]}
        return tuple(rest[:count]), tail.get(tf.bool), tail.get(tf.float32)

    def signature(self, args: tuple) -> list:
        """:meth:`inputs` for ``get_concrete_function``: the final frames and their indices with
        their ``K`` open (it changes from rollout to rollout; one trace serves every ``K``)."""
        if self.layout.flat:
            return list(args)
        n = len(self.layout.images)
        out = list(args)
        for i in range(4 + n, 5 + 2 * n):
            out[i] = tf.TensorSpec([None, *args[i].shape[1:]], args[i].dtype)
        return out

    def unpack(self, floats: tf.Tensor, actions: tf.Tensor, stats: tf.Tensor,
               *images: tf.Tensor) -> tuple:
        """Inverse of :meth:`inputs` in the graph (static shapes where the actions'
        are): ``(obs, next_obs [T, B, d] (or the layout's parts), rewards, terminated,
        truncated, log_probs [T, B], env steps taken, [(mean, var, count) per normaliser],
        {scheduled name: float32 scalar})``. For observations with images ``next_obs`` is a
        :class:`NextImages` (:meth:`next_observations` makes the whole tensors from it)."""
        T, B = (actions.shape[i] if actions.shape[i] is not None else tf.shape(actions)[i]
                for i in (0, 1))
        d = self.vector_dim
        n = T * B
        if d:
            obs, next_obs, *rest = tf.split(floats, [n * d, n * d, n, n, n, n])
            obs, next_obs = (tf.reshape(x, [T, B, d]) for x in (obs, next_obs))
        else:
            obs = next_obs = None
            rest = tf.split(floats, [n, n, n, n])
        if not self.layout.flat:
            n_img = len(self.layout.images)
            frames = tuple(images[:n_img])
            obs = self._join([f[:T] for f in frames], obs)  # rows 0..T-1 (no copy: dim 0)
            next_obs = NextImages(frames, tuple(images[n_img: 2 * n_img]), images[2 * n_img],
                                  next_obs)
        rest = [tf.reshape(x, [T, B]) for x in rest]
        taken = tf.cast(stats[0], tf.int64)
        norm_stats, at = [], 1
        for norm in self.normalizers:
            size = int(np.prod(norm.mean.shape))
            mean = tf.reshape(stats[at: at + size], norm.mean.shape)
            var = tf.reshape(stats[at + size: at + 2 * size], norm.var.shape)
            norm_stats.append((mean, var, stats[at + 2 * size]))
            at += 2 * size + 1
        scheduled = {name: tf.cast(stats[at + i], tf.float32)
                     for i, name in enumerate(self.parts.schedules.names)}
        return (obs, next_obs, *rest, taken, norm_stats, scheduled)

    def next_observations(self, nxt: Any) -> Any:
        """The ``[T, B, ...]`` next observations in the layout's form (the graph's copy of the
        frames: only for the paths that need every row, recurrent critics)."""
        if not isinstance(nxt, NextImages):
            return nxt
        images = [tf.tensor_scatter_nd_update(f[1:], nxt.index, k)
                  for f, k in zip(nxt.frames, nxt.finals)]
        return self._join(images, nxt.vector)

    def _join(self, images: list, vector):
        """Image tensors and the vector part -> the layout's observation (graph side)."""
        it = iter(images)
        return self.layout.join(next(it) if p.image else vector for p in self.layout.parts)
