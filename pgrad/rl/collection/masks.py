"""Action masks: which actions an env allows at each step -- read from the env and checked.

An env says which actions are legal in one of three ways; the first of them it provides is the
one read (the precedence, as listed):

1. ``"observation"``: a top-level ``Dict`` observation key ``action_mask`` (PettingZoo's
   convention). The key is not part of what the network sees (:mod:`pgrad.rl.observations.spaces`).
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
cannot be masked: an env that gives masks with one is an error when the collector is built.

**Checked on arrival**, wherever a mask comes from (info, observation key, ``action_masks()``,
:class:`ActionMasker`, a PettingZoo agent, ``predict(..., action_masks=)``): its values are bools,
or integers that are all 0 or 1 (:func:`bool_values`). Anything else is one line naming the env
and the step: floats (a NaN meant as "illegal" reads as legal once cast to bool, so pgrad casts
no float, 0.0/1.0 included; sb3-contrib's ``MaskablePPO`` casts any array to bool), strings
(``'False'`` is a true string), objects, integers such as 2 or -1. So is a mask that forbids
every action of the space (or of one dimension).

**Training and evaluation read alike.** :class:`VectorMasks` (a vector env, the rollout) and
:class:`EnvMasks` (one env, an evaluation episode) decide the source at the reset; from then on
every step must give its mask from that source, or it is an :class:`EnvError` naming the step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from pgrad.rl.envs.vector import EnvError, describe_failure
from pgrad.rl.observations.spaces import MASK_KEY, ObsLayout

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


#: How to allow a mask's values, said in every refusal of them.
_ALLOWED = "pass bools, or integers 0 (illegal) and 1 (legal)"
_KINDS = {"f": "floats", "c": "complex numbers", "U": "strings", "S": "bytes",
          "O": "Python objects", "M": "dates", "m": "time deltas", "V": "raw records"}


def bool_values(mask: Any) -> tuple[np.ndarray | None, str]:
    """``(mask as bool, "")`` if its values are a mask's, else ``(None, why)``.

    A mask's values are bools, or integers that are all 0 or 1; its shape is kept. An object
    array (lists of bools in a vector env's info) is judged by the array its items make.

    Returns:
      The bool array (``None`` if refused) and ``why``, the end of the sentence "gave an
      action_mask that ..." (e.g. ``"holds floats (float32, NaN among them); pass bools, or
      integers 0 (illegal) and 1 (legal)"``).
    """
    try:
        out = np.asarray(mask)
        if out.dtype.kind == "O" and out.size:
            out = np.array(out.tolist())
    except (ValueError, TypeError):
        return None, f"holds ragged or unreadable values; {_ALLOWED}"
    kind = out.dtype.kind
    if kind == "b":
        return out, ""
    if kind in "iu":
        bad = out > 1 if kind == "u" else (out > 1) | (out < 0)
        if not _any(bad, axis=None):
            return out.astype(bool), ""
        values = np.unique(out[bad]).tolist()
        shown = ", ".join(map(str, values[:3])) + (", ..." if len(values) > 3 else "")
        return None, f"holds the integer value(s) {shown}; {_ALLOWED}"
    what = _KINDS.get(kind, "values")
    nan = ", NaN among them" if kind in "fc" and np.isnan(out).any() else ""
    sample = f", e.g. {out.reshape(-1)[0]!r}" if kind in "USO" and out.size else ""
    return None, f"holds {what} ({out.dtype}{nan}{sample}); {_ALLOWED}"


def check(mask: Any, sizes: Sequence[int], rows: int, context: str,
          error: type[Exception] = EnvError, row_name: str = "sub-env") -> np.ndarray:
    """``mask`` as ``[rows, sum(sizes)]`` bool, checked.

    Args:
      mask: the masks of ``rows`` envs (an array-like of bools, or of integers 0 and 1).
      sizes: :func:`mask_sizes` of the action space.
      rows: how many envs' masks it holds.
      context: who gave it, where: the start of the error message (``"env 'X' at env step 12"``).
      error / row_name: the error raised and what a row is called in it.

    Raises:
      EnvError (``error``): values that are not bools or 0/1 integers (:func:`bool_values`), the
        wrong size, or a mask that forbids every action of the space (or of one dimension).
    """
    width = int(sum(sizes))
    out, why = bool_values(mask)
    if out is None:
        raise error(f"{context} gave an action_mask that {why}.")
    try:
        out = out.reshape(rows, width)
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
        self.envs = envs
        self._setup(layout, name, envs.single_action_space, envs.num_envs,
                    lambda method, *args: _call_all(envs, method, *args))

    def _setup(self, layout: ObsLayout, name: str, action_space: gym.Space, rows: int,
               call: Callable[..., tuple]) -> None:
        """``call(method, *args)``: the results of ``method(*args)`` of each of the ``rows``
        envs, through their wrappers."""
        self.layout, self.name, self._call = layout, name, call
        self.action_space = action_space
        self.sizes = mask_sizes(action_space)
        self.rows = rows
        self.source: str | None = "observation" if layout.has_mask_key else None
        self._decided = self.source is not None
        if self.source is not None and self.sizes is None:
            raise unmaskable(name, self.source, self.action_space)

    def reset(self, raw_obs: Any, info: dict, where: str) -> np.ndarray | None:
        """The masks of the observations a reset returned (decides :attr:`source` once)."""
        if not self._decided:
            if isinstance(info, dict) and MASK_KEY in info:
                self.source = "info"
            else:
                try:
                    found = self._call("has_wrapper_attr", METHOD)
                except Exception:  # noqa: BLE001  (an env without call(): no method)
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
        info = info if isinstance(info, dict) else {}
        if source is None:
            if MASK_KEY in info:
                raise EnvError(f"env {self.name!r} gave info['action_mask'] at {where} but not "
                               "at the reset; pgrad reads the masks of every step from the "
                               "reset on.")
            return None
        if source == "observation":  # the raw key: its values are checked, not cast
            mask = raw_obs[MASK_KEY]
        elif source == "info":
            given = info.get("_" + MASK_KEY)
            if MASK_KEY not in info or (given is not None and not _all(given, axis=None)):
                missing = (list(range(self.rows)) if given is None or MASK_KEY not in info
                           else np.flatnonzero(~np.asarray(given, bool)).tolist())
                which = f" (sub-env(s) {missing})" if self.rows > 1 else ""
                raise EnvError(f"env {self.name!r} gave no info['action_mask'] at {where}"
                               f"{which}; an env that masks actions must give the mask from "
                               "its reset and every step.")
            mask = info[MASK_KEY]
        else:
            try:
                masks = self._call(METHOD)
            except Exception as err:
                raise EnvError(f"env {self.name!r} failed in action_masks() at {where}: "
                               f"{describe_failure(err)}") from err
            mask = _stack(masks)
        if self.sizes is None:  # reset refused this already
            raise unmaskable(self.name, source, self.action_space)
        return check(mask, self.sizes, self.rows, f"env {self.name!r} at {where}")


def _stack(masks: Sequence[Any]) -> Any:
    """The sub-envs' ``action_masks()`` results as one array (as they are if they do not stack:
    :func:`check` then names what is wrong)."""
    try:
        return np.stack([np.asarray(m) for m in masks])
    except (ValueError, TypeError):
        return np.asarray(masks, dtype=object)


class EnvMasks(VectorMasks):
    """The action mask ``[1, n]`` of one (unbatched) env, read exactly as :class:`VectorMasks`
    reads a vector env's: the same sources, precedence and checks, the source decided at the
    :meth:`reset` (evaluation: one per episode).

    Args:
      env: the env (its wrappers pass ``action_masks()`` through).
      layout: the observation layout (knows the ``action_mask`` key).
      name: the env's name for error messages.
    """

    def __init__(self, env: gym.Env, layout: ObsLayout, name: str):
        def call(method: str, *args) -> tuple:
            return (env.get_wrapper_attr(method)(*args),)

        self._setup(layout, name, env.action_space, 1, call)


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
