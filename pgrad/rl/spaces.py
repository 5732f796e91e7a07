"""Observation preprocessing: any supported Gymnasium observation space -> a flat float32 vector.

* ``Box`` -- cast to float32 and flattened (``[N, *shape] -> [N, prod(shape)]``).
* ``Discrete(n, start)`` -- one-hot ``[N, n]``.
* ``MultiDiscrete(nvec)`` -- concatenated one-hots ``[N, sum(nvec)]``.
* ``MultiBinary(n)`` -- 0/1 as float32 ``[N, prod(n)]``.
* ``Dict`` / ``Tuple`` -- each sub-space preprocessed as above and concatenated, in the space's
  own key/index order (``Dict`` keys are sorted by Gymnasium).

Everything here is numpy: it runs once per environment step on the batch of observations the
vector env returns, where a TensorFlow call would cost far more than the arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np

SUPPORTED = "Box, Discrete, MultiDiscrete, MultiBinary, and Dict/Tuple of these"


def _unsupported(space: gym.Space, where: str) -> ValueError:
    return ValueError(
        f"observation space {type(space).__name__} ({space}){where} is not supported; "
        f"supported: {SUPPORTED}."
    )


def flat_dim(space: gym.Space) -> int:
    """Width of the flat float32 vector :func:`make_preprocessor` produces for ``space``.

    Raises:
      ValueError: for an unsupported space, naming it and what is supported.
    """
    if isinstance(space, gym.spaces.Box):
        return int(np.prod(space.shape))
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    if isinstance(space, gym.spaces.MultiBinary):
        return int(np.prod(space.shape))
    if isinstance(space, gym.spaces.Dict):
        return sum(flat_dim(s) for s in space.spaces.values())
    if isinstance(space, gym.spaces.Tuple):
        return sum(flat_dim(s) for s in space.spaces)
    raise _unsupported(space, "")


def make_preprocessor(space: gym.Space) -> Callable[[object], np.ndarray]:
    """``fn(batched_obs) -> [N, flat_dim(space)]`` float32 for a batch of ``space`` observations.

    ``batched_obs`` is what a Gymnasium vector env returns: an ``[N, *shape]`` array, or for
    ``Dict``/``Tuple`` spaces a dict/tuple of such arrays.

    Raises:
      ValueError: for an unsupported space (checked here, once, not at every step).
    """
    if isinstance(space, gym.spaces.Box):
        dim = flat_dim(space)

        def box(obs):
            return np.asarray(obs, np.float32).reshape(-1, dim)

        return box
    if isinstance(space, gym.spaces.Discrete):
        eye = np.eye(int(space.n), dtype=np.float32)
        start = int(space.start)

        def one_hot(obs):
            return eye[np.asarray(obs, np.int64).reshape(-1) - start]

        return one_hot
    if isinstance(space, gym.spaces.MultiDiscrete):
        nvec = np.asarray(space.nvec, np.int64).reshape(-1)
        start = np.asarray(getattr(space, "start", np.zeros_like(nvec))).reshape(-1)
        offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]])
        total = int(nvec.sum())

        def multi_one_hot(obs):
            idx = np.asarray(obs, np.int64).reshape(-1, len(nvec)) - start + offsets  # [N, D]
            out = np.zeros((idx.shape[0], total), np.float32)
            np.put_along_axis(out, idx, 1.0, axis=1)
            return out

        return multi_one_hot
    if isinstance(space, gym.spaces.MultiBinary):
        dim = flat_dim(space)

        def binary(obs):
            return np.asarray(obs, np.float32).reshape(-1, dim)

        return binary
    if isinstance(space, gym.spaces.Dict):
        keys = list(space.spaces.keys())
        parts = [_sub(space.spaces[k], f" (key {k!r})") for k in keys]

        def flat_dict(obs):
            return np.concatenate([p(obs[k]) for k, p in zip(keys, parts)], axis=1)

        return flat_dict
    if isinstance(space, gym.spaces.Tuple):
        parts = [_sub(s, f" (index {i})") for i, s in enumerate(space.spaces)]

        def flat_tuple(obs):
            return np.concatenate([p(o) for o, p in zip(obs, parts)], axis=1)

        return flat_tuple
    raise _unsupported(space, "")


def _sub(space: gym.Space, where: str) -> Callable[[object], np.ndarray]:
    try:
        return make_preprocessor(space)
    except ValueError:
        raise _unsupported(space, where) from None




def batch_of_one(x):
    """One observation -> a batch of one, as a vector env returns it (dicts/tuples recursively)."""
    if isinstance(x, dict):
        return {k: batch_of_one(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(batch_of_one(v) for v in x)
    return np.asarray(x)[None]


def is_batch(obs, space: gym.Space) -> bool:
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
    ndim = np.ndim(obs)
    if ndim == len(shape) + 1:
        return True
    if ndim == len(shape):
        return False
    raise ValueError(f"observation of shape {np.shape(obs)} fits neither one observation nor a "
                     f"batch of {space}.")
