"""Action masks: which actions an env allows at each step -- read from the env and checked.

An env says which actions are legal in one of three ways; the first of them it provides is the
one read (the precedence, as listed):

1. ``"observation"``: a top-level ``Dict`` observation key ``action_mask`` (PettingZoo's
   convention). The key is not part of what the network sees (:mod:`pgrad.rl.spaces`).
2. ``"info"``: ``info["action_mask"]`` from ``reset`` and from every ``step`` (Gymnasium's
   convention, e.g. ``Taxi-v4``). An env that gives it only from some step on, or not for every
   sub-env, is an error: the mask of every step is needed.
3. ``"method"``: an env method ``action_masks()`` (sb3-contrib's ``ActionMasker`` wrapper and
   ``MaskablePPO``), called after the reset and after each step (through the wrappers; one
   extra call per vector step, a round trip to the workers of an async vector env).

A mask is ``[n]`` (bool or 0/1) for ``Discrete(n)`` and, for ``MultiDiscrete(nvec)``, the
concatenation of one mask per dimension, ``[sum(nvec)]`` (sb3-contrib's convention). Masked
actions are never sampled nor chosen greedily, and log-probabilities and entropy are over the
legal actions (:func:`pgrad.rl.distributions.mask_logits`). Continuous and binary action spaces
cannot be masked: an env that gives masks with one is an error when the collector is built. A
mask that forbids every action of the space (or of one dimension) is an :class:`EnvError` naming
the env and the env step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from pgrad.rl.envs.vector import EnvError, describe_failure
from pgrad.rl.spaces import MASK_KEY, ObsLayout

SOURCES = ("observation", "info", "method")
METHOD = "action_masks"  # sb3-contrib's env method

_any = np.logical_or.reduce  # without the Python wrappers of ``x.any()`` (every env step)
_all = np.logical_and.reduce


def mask_sizes(action_space: gym.Space) -> tuple[int, ...] | None:
    """The sizes of the per-dimension masks of ``action_space``: ``(n,)`` for ``Discrete(n)``,
    ``tuple(nvec)`` for ``MultiDiscrete``; None for a space that cannot be masked."""
    if isinstance(action_space, gym.spaces.Discrete):
        return (int(action_space.n),)
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        return tuple(int(n) for n in np.asarray(action_space.nvec).reshape(-1))
    return None


def unmaskable(name: str, source: str, action_space: gym.Space) -> ValueError:
    """The error for an env that gives masks with an action space that has none."""
    return ValueError(f"env {name!r} gives action masks ({_describe(source)}) but its action "
                      f"space {action_space} is not Discrete or MultiDiscrete; only those "
                      "actions can be masked.")


def _describe(source: str) -> str:
    return {"observation": "observation['action_mask']", "info": "info['action_mask']",
            "method": "its action_masks() method"}[source]


def check(mask: Any, sizes: Sequence[int], rows: int, context: str,
          error: type[Exception] = EnvError, row_name: str = "sub-env") -> np.ndarray:
    """``mask`` as ``[rows, sum(sizes)]`` bool, checked.

    Args:
      mask: the masks of ``rows`` envs (any array-like of 0/1 or bools).
      sizes: :func:`mask_sizes` of the action space.
      rows: how many envs' masks it holds.
      context: who gave it, where: the start of the error message (``"env 'X' at env step 12"``).
      error / row_name: the error raised and what a row is called in it.

    Raises:
      EnvError (``error``): the mask has the wrong size, or forbids every action of the space
        (or of one of its dimensions).
    """
    width = int(sum(sizes))
    try:
        out = np.asarray(mask)
        out = out.reshape(rows, width).astype(bool, copy=False)
    except (ValueError, TypeError):
        raise error(f"{context} gave an action_mask of shape {np.shape(mask)}; the action space "
                    f"needs {width} values for each of {rows} {row_name}(s).") from None
    if len(sizes) == 1:
        legal = _any(out, axis=1)[:, None]  # [rows, 1]
    else:  # one mask per dimension: each must allow something
        legal = np.logical_or.reduceat(out, np.cumsum((0, *sizes[:-1])), axis=1)
    if not _all(legal, axis=None):
        row, dim = (int(i[0]) for i in np.nonzero(~legal))
        which = f" ({row_name} {row})" if rows > 1 else ""
        part = f" of action dimension {dim}" if len(sizes) > 1 else ""
        raise error(f"{context} gave an action_mask that forbids every action{part}{which}; "
                    "at least one action must be legal.")
    return out


def _call_all(envs: gym.vector.VectorEnv, method: str, *args) -> tuple:
    """``method(*args)`` of every sub-env (vector wrappers have no ``call``: the inner env's)."""
    inner: Any = getattr(envs, "unwrapped", envs)  # Sync/AsyncVectorEnv or a duck of them
    return inner.call(method, *args)


class VectorMasks:
    """The action masks ``[B, n]`` of a vector env's sub-envs, after reset and after each step.

    Args:
      envs: the vector env (SAME_STEP autoreset: a step's info holds the reset info of the
        sub-envs it reset, so its masks are those of the observations it returns).
      layout: the observation layout (knows the ``action_mask`` key).
      name: the env's name for error messages.

    Attributes:
      source: one of :data:`SOURCES`, or None (the env gives no masks); decided at the first
        :meth:`reset` (the observation key: at construction).
    """

    def __init__(self, envs: gym.vector.VectorEnv, layout: ObsLayout, name: str):
        self.envs, self.layout, self.name = envs, layout, name
        self.action_space = envs.single_action_space
        self.sizes = mask_sizes(self.action_space)
        self.rows = envs.num_envs
        self.source: str | None = "observation" if layout.has_mask_key else None
        self._decided = self.source is not None
        if self.source is not None and self.sizes is None:
            raise unmaskable(name, self.source, self.action_space)

    def reset(self, raw_obs: Any, info: dict, where: str) -> np.ndarray | None:
        """The masks of the observations a reset returned (decides :attr:`source` once)."""
        if not self._decided:
            if MASK_KEY in info:
                self.source = "info"
            else:
                try:
                    found = _call_all(self.envs, "has_wrapper_attr", METHOD)
                except Exception:  # noqa: BLE001  (a vector env without call(): no method)
                    found = None
                self.source = "method" if found and all(found) else None
            self._decided = True
            if self.source is not None and self.sizes is None:
                raise unmaskable(self.name, self.source, self.action_space)
        return self.read(raw_obs, info, where)

    def read(self, raw_obs: Any, info: dict, where: str) -> np.ndarray | None:
        """``[B, n]`` bool masks of the observations a step returned (None: the env has none).

        Raises:
          EnvError: a missing or bad mask (see :func:`check`).
        """
        source = self.source
        if source is None:
            if MASK_KEY in info:
                raise EnvError(f"env {self.name!r} gave info['action_mask'] at {where} but not "
                               "at the reset; pgrad reads the masks of every step from the "
                               "reset on.")
            return None
        if source == "observation":
            mask = self.layout.action_mask(raw_obs)
        elif source == "info":
            given = info.get("_" + MASK_KEY)
            if MASK_KEY not in info or (given is not None and not _all(given, axis=None)):
                missing = (list(range(self.rows)) if given is None or MASK_KEY not in info
                           else np.flatnonzero(~np.asarray(given, bool)).tolist())
                raise EnvError(f"env {self.name!r} gave no info['action_mask'] at {where} "
                               f"(sub-env(s) {missing}); an env that masks actions must give "
                               "the mask from its reset and every step.")
            mask = info[MASK_KEY]
        else:
            try:
                masks = _call_all(self.envs, METHOD)
            except Exception as err:
                raise EnvError(f"env {self.name!r} failed in action_masks() at {where}: "
                               f"{describe_failure(err)}") from err
            mask = np.stack([np.asarray(m) for m in masks])
        if self.sizes is None:  # reset refused this already
            raise unmaskable(self.name, source, self.action_space)
        return check(mask, self.sizes, self.rows, f"env {self.name!r} at {where}")


def env_mask(env: gym.Env, layout: ObsLayout, raw_obs: Any, info: dict, name: str,
             where: str) -> np.ndarray | None:
    """``[1, n]`` bool mask of one (unbatched) env's observation, or None; the same sources and
    precedence as :class:`VectorMasks` (used by evaluation, one env per episode).

    Raises:
      ValueError: masks with an action space that has none; EnvError: a bad mask.
    """
    if layout.has_mask_key:
        source, mask = "observation", raw_obs[MASK_KEY]
    elif isinstance(info, dict) and MASK_KEY in info:
        source, mask = "info", info[MASK_KEY]
    elif env.has_wrapper_attr(METHOD):
        source = "method"
        mask = env.get_wrapper_attr(METHOD)()
    else:
        return None
    sizes = mask_sizes(env.action_space)
    if sizes is None:
        raise unmaskable(name, source, env.action_space)
    return check(mask, sizes, 1, f"env {name!r} at {where}")


def given_mask(mask: Any, action_space: gym.Space, rows: int, where: str) -> np.ndarray | None:
    """A mask a caller passed (``predict(..., action_masks=...)``) as ``[rows, n]`` bool, checked
    as an env's is; None stays None.

    Raises:
      ValueError: the action space cannot be masked, or the mask is bad (naming ``where``).
    """
    if mask is None:
        return None
    sizes = mask_sizes(action_space)
    if sizes is None:
        raise ValueError(f"{where}: action masks need a Discrete or MultiDiscrete action "
                         f"space; this one is {action_space}.")
    return check(mask, sizes, rows, where, ValueError, "row")


class ActionMasker(gym.Wrapper):
    """Gives an env an ``action_masks()`` method, ``action_mask_fn(env)`` (sb3-contrib's
    ``ActionMasker`` wrapper, the same arguments): pgrad then reads the env's masks from it.

    Args:
      env: the env.
      action_mask_fn: ``fn(env) -> [n]`` bool (or 0/1) the legal actions of the current
        observation; ``env`` is the wrapped env.
    """

    def __init__(self, env: gym.Env, action_mask_fn: Callable[[gym.Env], Any]):
        super().__init__(env)
        self._action_mask_fn = action_mask_fn

    def action_masks(self) -> np.ndarray:
        return np.asarray(self._action_mask_fn(self.env))
