"""Observation preprocessing: a Gymnasium observation space -> what the policy network reads.

Vector observations (no image anywhere in the space) become one flat float32 vector:

* ``Box`` -- cast to float32 and flattened (``[N, *shape] -> [N, prod(shape)]``).
* ``Discrete(n, start)`` -- one-hot ``[N, n]``.
* ``MultiDiscrete(nvec)`` -- concatenated one-hots ``[N, sum(nvec)]``.
* ``MultiBinary(n)`` -- 0/1 as float32 ``[N, prod(n)]``.
* ``Dict`` / ``Tuple`` -- each sub-space preprocessed as above and concatenated, in the space's
  own key/index order (``Dict`` keys are sorted by Gymnasium).

A top-level ``Dict`` key ``action_mask`` (PettingZoo's convention, :data:`MASK_KEY`) is not part
of what the network sees: it is the env's action mask (:mod:`pgrad.rl.collection.masks`), read from
the raw
observation by :meth:`ObsLayout.action_mask`. Everything here describes the space without it.

Images are kept in their own dtype until the network scales them (:class:`ObsLayout`): an image
is a rank-3 ``Box`` of dtype uint8 with bounds 0..255 (Stable-Baselines3's ``is_image_space``) or
of dtype bool (binary planes, e.g. MinAtar's 10x10xC), channel-last or channel-first. A space
with images is preprocessed into *parts*: each image as its own ``[N, *shape]`` array in its own
dtype, and everything else flattened as above into one float32 ``[N, d]`` vector part. One part
is a plain array; several (a ``Dict`` with an image and a vector part) are a tuple in the
layout's order (image keys in the space's key order, then the vector part).

Everything here is numpy: it runs once per environment step on the batch of observations the
vector env returns, where a TensorFlow call would cost far more than the arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, TypeGuard

import gymnasium as gym
import numpy as np

from pgrad.rl.observations.flat_obs import (
    MASK_KEY,
    SUPPORTED,
    flat_dim,
    flat_entries,
    flat_preprocessor,
    observed_space,
)

__all__ = ["MASK_KEY", "SUPPORTED", "ObsLayout", "Part", "batch_of_one", "check_finite",
           "flat_dim", "flat_preprocessor", "is_batch", "is_channels_first", "is_image_space",
           "make_preprocessor", "obs_layout", "observed_space"]

# -- images and layouts -------------------------------------------------------------------------


def is_image_space(space: gym.Space) -> TypeGuard[gym.spaces.Box]:
    """Whether ``space`` is an image the encoders keep whole: a rank-3 ``Box`` of dtype uint8
    with bounds 0..255 everywhere (Stable-Baselines3's ``is_image_space``), or of dtype bool
    (binary planes such as MinAtar's ``10 x 10 x C``; scaled by a cast, not by 1/255)."""
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 3:
        return False
    if space.dtype == np.bool_:
        return True
    return bool(space.dtype == np.uint8 and np.all(space.low == 0) and np.all(space.high == 255))


def is_channels_first(shape: tuple[int, ...]) -> bool:
    """``[C, H, W]`` rather than ``[H, W, C]``: the first axis is strictly the smallest (SB3's
    rule, ties read as channel-last; Gymnasium's frame stack gives ``[4, 84, 84]``)."""
    return int(np.argmin(shape)) == 0 and shape[0] < shape[-1]


class Part(NamedTuple):
    """One part of a preprocessed observation (see :class:`ObsLayout`)."""

    name: str  # the Dict key / Tuple index of an image; "vector" for the flat float32 rest
    shape: tuple[int, ...]  # one observation, as stored: the image as the env gives it, or (d,)
    dtype: np.dtype  # uint8 / bool for images, float32 for the vector part
    image: bool
    channels_first: bool = False

    def image_size(self) -> tuple[int, int, int]:
        """``(height, width, channels)`` of an image part."""
        h, w, c = self.shape[1:] + self.shape[:1] if self.channels_first else self.shape
        return int(h), int(w), int(c)


def _unique(name: str, taken: set[str]) -> str:
    out, i = name, 1
    while out in taken:
        out, i = f"{name}_{i}", i + 1
    return out


class ObsLayout:
    """How observations of a space are preprocessed and stored: one or more :class:`Part` s.

    A space without images has one float32 vector part and :attr:`flat` set: its observations
    are the ``[N, d]`` arrays of :func:`flat_preprocessor`, as always. A space with images
    (:func:`is_image_space`: the space itself, or entries of a top-level ``Dict`` / ``Tuple``)
    has one part per image, in its own dtype, then a float32 vector part of everything else
    (if anything is left). Observations are then one array (a single part) or a tuple of
    arrays in the order of :attr:`parts`. The helpers below work on either form.

    Raises:
      ValueError: for an unsupported space.
    """

    def __init__(self, space: gym.Space):
        #: The env's action mask arrives as the observation's ``action_mask`` key (see
        #: :meth:`action_mask`); :attr:`space` is the space without it.
        self.has_mask_key = observed_space(space) is not space
        space = observed_space(space)
        if self.has_mask_key and isinstance(space, gym.spaces.Dict) and not space.spaces:
            raise ValueError("observation space holds an action_mask and nothing else; the "
                             "policy needs an observation beside it.")
        self.space = space
        if is_image_space(space):
            self.parts: tuple[Part, ...] = (self._image("image", space),)
            self.preprocess = self._image_fn(self.parts[0])
        elif isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)) and any(
                is_image_space(s) for s in self._entries(space).values()):
            entries = self._entries(space)
            images = [k for k, s in entries.items() if is_image_space(s)]
            rest = [k for k in entries if k not in images]
            parts = [self._image(str(k), entries[k]) for k in images]
            fns = [self._image_fn(p) for p in parts]
            if rest:
                sub = flat_entries(space, rest)
                dim = sum(flat_dim(entries[k]) for k in rest)
                name = _unique("vector", {p.name for p in parts})
                parts.append(Part(name, (dim,), np.dtype(np.float32), False))
            self.parts = tuple(parts)
            keys = images

            def preprocess(obs):
                out = tuple(fn(obs[k]) for k, fn in zip(keys, fns))
                return out + (sub(obs),) if rest else (out if len(out) > 1 else out[0])

            self.preprocess = preprocess
        else:
            self.preprocess = flat_preprocessor(space)  # first: its errors name Dict keys
            self.parts = (Part("vector", (flat_dim(space),), np.dtype(np.float32), False),)
        self.flat = not any(p.image for p in self.parts)
        index = [i for i, p in enumerate(self.parts) if not p.image]
        self.vector_index = index[0] if index else None
        self.vector_dim = self.parts[index[0]].shape[0] if index else 0
        self.single = len(self.parts) == 1

    @staticmethod
    def _entries(space) -> dict:
        items = space.spaces.items() if isinstance(space, gym.spaces.Dict) else enumerate(
            space.spaces)
        return dict(items)

    @staticmethod
    def _image(name: str, space: gym.spaces.Box) -> Part:
        shape = tuple(int(x) for x in space.shape)
        return Part(name, shape, np.dtype(space.dtype), True, is_channels_first(shape))

    @staticmethod
    def _image_fn(part: Part):
        shape, dtype = part.shape, part.dtype

        def image(obs):
            return np.asarray(obs, dtype).reshape(-1, *shape)

        return image

    def action_mask(self, raw_obs: Any) -> np.ndarray | None:
        """``[N, n]``: the ``action_mask`` key of a batch of raw Dict observations as given (its
        values unchecked: :func:`pgrad.rl.collection.masks.given_mask` refuses NaN, strings, 2s), or
        None when the space has no such key."""
        if not self.has_mask_key:
            return None
        mask = np.asarray(raw_obs[MASK_KEY])
        return mask.reshape(mask.shape[0], -1)

    @property
    def images(self) -> list[Part]:
        return [p for p in self.parts if p.image]

    # -- helpers on observations (an array, or a tuple of arrays in part order) -----------------

    def split(self, obs: Any) -> tuple:
        """The observation's arrays as a tuple in part order."""
        return (obs,) if self.single else tuple(obs)

    def join(self, arrays: Iterable[Any]) -> Any:
        """Inverse of :meth:`split`."""
        arrays = tuple(arrays)
        return arrays[0] if self.single else arrays

    def vector(self, obs: Any) -> Any:
        """The float32 vector part (the whole observation when :attr:`flat`), or None."""
        if self.single:
            return obs if self.vector_index is not None else None
        return None if self.vector_index is None else obs[self.vector_index]

    def with_vector(self, obs: Any, vector: Any) -> Any:
        """``obs`` with its vector part replaced (e.g. by normalised values)."""
        if self.single:
            return vector if self.vector_index is not None else obs
        if self.vector_index is None:
            return obs
        out = list(obs)
        out[self.vector_index] = vector
        return tuple(out)

    def copy(self, obs: Any) -> Any:
        return obs.copy() if self.single else tuple(x.copy() for x in obs)

    def set_row(self, obs: Any, i: int | np.integer, one: Any) -> None:
        """``obs[i] = one[0]`` in every part (``one`` a batch of one)."""
        if self.single:
            obs[i] = one[0]
        else:
            for x, y in zip(obs, one):
                x[i] = y[0]

    def stack(self, steps: Sequence[Any]) -> np.ndarray | tuple[np.ndarray, ...]:
        """``[T]`` observations ``[B, ...]`` -> ``[T, B, ...]`` (each part in its own dtype)."""
        if self.single:
            return np.array(steps)
        return tuple(np.array(col) for col in zip(*steps))

    def concat(self, batches: list) -> Any:
        """Batches of observations concatenated along the batch axis."""
        if self.single:
            return np.concatenate(batches)
        return tuple(np.concatenate(col) for col in zip(*batches))

    def nbytes(self, obs: Any) -> int:
        return sum(x.nbytes for x in self.split(obs))

    def tensor_specs(self, batch_dims: tuple = (None,), names: bool = True) -> Any:
        """``tf.TensorSpec`` s of the parts (one, or a tuple), named after them if ``names``."""
        import tensorflow as tf

        specs = tuple(tf.TensorSpec([*batch_dims, *p.shape], tf.as_dtype(p.dtype),
                                    name=_spec_name(p.name) if names else None)
                      for p in self.parts)
        return self.join(specs)

    def to_tensors(self, obs: Any) -> Any:
        """The observation as tensors, each part in its own dtype."""
        import tensorflow as tf

        return self.join(tf.constant(np.asarray(x, p.dtype)) if not tf.is_tensor(x)
                         else tf.cast(x, p.dtype) for x, p in zip(self.split(obs), self.parts))


def _spec_name(name: str) -> str:
    """A TensorFlow-valid argument name for part ``name``."""
    import re

    out = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return out if out[:1].isalpha() else f"part_{out}"


def obs_layout(space: gym.Space) -> ObsLayout:
    """The :class:`ObsLayout` of ``space`` (raises ValueError for an unsupported space)."""
    return ObsLayout(space)


def make_preprocessor(space: gym.Space) -> Callable[[object], Any]:
    """``fn(batched_obs)`` -> what the policy reads: ``[N, flat_dim(space)]`` float32 for a space
    without images (:func:`flat_preprocessor`), the parts of :class:`ObsLayout` for one with.

    Raises:
      ValueError: for an unsupported space (checked here, once, not at every step).
    """
    return obs_layout(space).preprocess


def batch_of_one(x: Any) -> Any:
    """One observation -> a batch of one, as a vector env returns it (dicts/tuples recursively)."""
    if isinstance(x, dict):
        return {k: batch_of_one(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(batch_of_one(v) for v in x)
    return np.asarray(x)[None]


def is_batch(obs: Any, space: gym.Space) -> bool:
    """Whether ``obs`` is a batch of observations of ``space`` (else one observation).

    Decided by shape against the space: ``[N, *shape]`` for Box/MultiDiscrete/MultiBinary,
    ``[N]`` for Discrete, and by the first entry for Dict/Tuple spaces.
    """
    if isinstance(space, gym.spaces.Dict):
        key = next(iter(space.spaces))
        return is_batch(obs[key], space.spaces[key])
    if isinstance(space, gym.spaces.Tuple):
        return is_batch(obs[0], space.spaces[0])
    if isinstance(space, gym.spaces.Discrete):
        return np.ndim(obs) == 1
    shape = tuple(space.shape or ())
    got = tuple(np.shape(obs))
    # The whole shape, not only the rank: a [4, 1] column for a (4,) space is neither one
    # observation nor a batch of four (reshaped, it would be read as one wrong observation).
    if got[1:] == shape:
        return True
    if got == shape:
        return False
    raise ValueError(f"observation of shape {got} fits neither one observation {shape} nor a "
                     f"batch [N, {', '.join(map(str, shape))}] of the observation space "
                     f"({type(space).__name__}).")


def check_finite(obs: Any, where: str = "observation") -> None:
    """Raises ValueError naming ``where`` if a float observation (or any Dict/Tuple entry) holds
    NaN or inf: a policy acting on one returns an arbitrary action, silently."""
    if isinstance(obs, dict):
        for key, value in obs.items():
            check_finite(value, f"{where}[{key!r}]")
        return
    if isinstance(obs, tuple):
        for i, value in enumerate(obs):
            check_finite(value, f"{where}[{i}]")
        return
    arr = np.asarray(obs)
    if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(f"{where} holds NaN or inf (at index {tuple(int(i) for i in bad)}: "
                         f"{arr[tuple(bad)]}); pgrad does not act on it.")
