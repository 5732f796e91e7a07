"""Vector observations -> one flat float32 vector (the space without images).

``Box`` cast and flattened, ``Discrete`` / ``MultiDiscrete`` one-hot, ``MultiBinary`` as 0/1,
``Dict`` / ``Tuple`` each entry so and concatenated in the space's order; a top-level
``action_mask`` key (:data:`MASK_KEY`) left out. :mod:`pgrad.rl.observations.spaces` builds the
layouts of
spaces with images on top of this; all numpy (it runs once per env step on the whole batch).
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np

SUPPORTED = "Box, Discrete, MultiDiscrete, MultiBinary, and Dict/Tuple of these"
#: The ``Dict`` observation key of an env's action mask (PettingZoo's convention).
MASK_KEY = "action_mask"


def observed_space(space: gym.Space) -> gym.Space:
    """``space`` without its top-level ``action_mask`` key (:data:`MASK_KEY`): what the policy
    network reads. Any other space is returned as it is."""
    if isinstance(space, gym.spaces.Dict) and MASK_KEY in space.spaces:
        return gym.spaces.Dict({k: s for k, s in space.spaces.items() if k != MASK_KEY})
    return space


def _unsupported(space: gym.Space, where: str) -> ValueError:
    return ValueError(
        f"observation space {type(space).__name__} ({space}){where} is not supported; "
        f"supported: {SUPPORTED}."
    )


def flat_dim(space: gym.Space) -> int:
    """Width of the flat float32 vector :func:`flat_preprocessor` produces for ``space``.

    Raises:
      ValueError: for an unsupported space, naming it and what is supported.
    """
    return _flat_dim(observed_space(space))


def _flat_dim(space: gym.Space) -> int:
    if isinstance(space, gym.spaces.Box):
        return int(np.prod(space.shape))
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    if isinstance(space, gym.spaces.MultiBinary):
        return int(np.prod(space.shape))
    if isinstance(space, gym.spaces.Dict):
        return sum(_flat_dim(s) for s in space.spaces.values())
    if isinstance(space, gym.spaces.Tuple):
        return sum(_flat_dim(s) for s in space.spaces)
    raise _unsupported(space, "")


def flat_preprocessor(space: gym.Space) -> Callable[[object], np.ndarray]:
    """``fn(batched_obs) -> [N, flat_dim(space)]`` float32 for a batch of ``space`` observations.

    ``batched_obs`` is what a Gymnasium vector env returns: an ``[N, *shape]`` array, or for
    ``Dict``/``Tuple`` spaces a dict/tuple of such arrays.

    Raises:
      ValueError: for an unsupported space (checked here, once, not at every step).
    """
    return _flat_preprocessor(observed_space(space))


def _flat_preprocessor(space: gym.Space) -> Callable[[object], np.ndarray]:
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):  # cast and flattened
        dim = _flat_dim(space)

        def flat(obs):
            return np.asarray(obs, np.float32).reshape(-1, dim)

        return flat
    if isinstance(space, gym.spaces.Discrete):
        eye = np.eye(int(space.n), dtype=np.float32)
        start = int(space.start)

        def one_hot(obs):
            idx = np.asarray(obs, np.int64).reshape(-1) - start  # [N]
            if idx.size and (idx.min() < 0 or idx.max() >= len(eye)):  # -1 would be the last
                raise _out_of_range(idx, np.asarray(len(eye)), np.asarray(start),
                                    str(space))
            return eye[idx]

        return one_hot
    if isinstance(space, gym.spaces.MultiDiscrete):
        nvec = np.asarray(space.nvec, np.int64).reshape(-1)
        starts = np.asarray(getattr(space, "start", np.zeros_like(nvec))).reshape(-1)
        offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]])
        total = int(nvec.sum())

        def multi_one_hot(obs):
            idx = np.asarray(obs, np.int64).reshape(-1, len(nvec)) - starts  # [N, D]
            if idx.size and ((idx < 0) | (idx >= nvec)).any():  # else it sets a neighbour's bit
                raise _out_of_range(idx, nvec, starts, f"MultiDiscrete({nvec.tolist()})")
            idx = idx + offsets
            out = np.zeros((idx.shape[0], total), np.float32)
            np.put_along_axis(out, idx, 1.0, axis=1)
            return out

        return multi_one_hot
    if isinstance(space, gym.spaces.Dict):
        return _flat_dict(space, list(space.spaces.keys()))
    if isinstance(space, gym.spaces.Tuple):
        return _flat_tuple(space, list(range(len(space.spaces))))
    raise _unsupported(space, "")


def flat_entries(space: gym.spaces.Dict | gym.spaces.Tuple, keys: list
                 ) -> Callable[[object], np.ndarray]:
    """The flat float32 vector of entries ``keys`` (Dict keys or Tuple indices) of ``space``,
    concatenated in that order (an image space's vector part,
    :class:`pgrad.rl.observations.spaces.ObsLayout`).
    """
    if isinstance(space, gym.spaces.Dict):
        return _flat_dict(space, keys)
    return _flat_tuple(space, keys)


def _flat_dict(space: gym.spaces.Dict, keys: list) -> Callable[[object], np.ndarray]:
    """The flat float32 vector of ``keys`` of a Dict space, concatenated in that order."""
    parts = [_sub(space.spaces[k], f" (key {k!r})") for k in keys]

    def flat_dict(obs):
        return np.concatenate([p(obs[k]) for k, p in zip(keys, parts)], axis=1)

    return flat_dict


def _flat_tuple(space: gym.spaces.Tuple, indices: list) -> Callable[[object], np.ndarray]:
    """The flat float32 vector of entries ``indices`` of a Tuple space, in that order."""
    parts = [_sub(space.spaces[i], f" (index {i})") for i in indices]

    def flat_tuple(obs):
        return np.concatenate([p(obs[i]) for i, p in zip(indices, parts)], axis=1)

    return flat_tuple


def _sub(space: gym.Space, where: str) -> Callable[[object], np.ndarray]:
    try:
        return _flat_preprocessor(space)
    except ValueError:
        raise _unsupported(space, where) from None


def _out_of_range(idx: np.ndarray, n: np.ndarray, start: np.ndarray, what: str) -> ValueError:
    """The error for discrete observation values outside ``[start, start + n)``; ``idx`` is the
    value minus ``start``."""
    at = tuple(int(i) for i in np.argwhere((idx < 0) | (idx >= n))[0])
    low = int(np.broadcast_to(start, idx.shape)[at])
    high = low + int(np.broadcast_to(n, idx.shape)[at]) - 1
    return ValueError(f"observation value {int(idx[at]) + low} (at index {at}) is outside "
                      f"{what}'s values {low}..{high}.")
