"""Two halves of a vector env, so the policy can act on one while the other steps.

``vector_mode="overlap"`` (Sample Factory's double-buffered sampling, in one process): sub-envs
``0 .. h-1`` and ``h .. B-1`` (``h = B // 2``) are two ``SAME_STEP`` vector envs of their own,
and one worker thread steps a half while the caller's thread runs the network on the other
(:func:`overlapped_steps`, which :meth:`pgrad.rl.collection.rollout.Collector.collect` runs). The
network's TensorFlow call releases the interpreter lock while its kernels run, so a second core
that would idle while the network runs can step the emulators instead; the stepping itself
(Python wrappers) holds the lock, so two halves stepping at once would gain nothing. It costs
more CPU than acting on the whole batch (two network calls of ``h`` rows instead of one of
``B``): it pays only where a core is idle (docs/performance.md, "double-buffered collection").

What a rollout holds is unchanged: sub-env ``i`` is seeded ``seed + i`` as in one vector env,
each sub-env is stepped with the same actions in the same order, and the Collector draws the
actions half A then half B from the one generator, which is how one ``[B]`` draw consumes it
(the numpy samplers draw row by row). Only the network sees two batches of ``h`` rows instead
of one of ``B``, which can change its outputs by float round-off (bitwise equal for NatureCNN
here, see ``tests/rl/test_overlap.py``).

As a plain ``VectorEnv`` (:meth:`OverlapVectorEnv.step`: evaluation, whole-episode rollouts) the
halves step one after the other, with exactly the results of one vector env of ``B``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from pgrad.rl.observations import spaces

__all__ = ["OverlapVectorEnv", "merge_info", "merge_obs", "merge_step", "not_overlappable",
           "overlapped_steps", "Stepper"]


def merge_obs(a: Any, b: Any) -> Any:
    """Two batches of observations (arrays, or dicts / tuples of them) -> one, A's rows first."""
    if isinstance(a, dict):
        return {k: merge_obs(a[k], b[k]) for k in a}
    if isinstance(a, tuple):
        return tuple(merge_obs(x, y) for x, y in zip(a, b))
    return np.concatenate([a, b])


def _filler(like: np.ndarray, n: int) -> np.ndarray:
    """``n`` rows of what a vector env's info holds for a sub-env without the key (gymnasium's
    ``VectorEnv._init_info_arrays``: zeros for numbers and bools, None otherwise)."""
    if like.dtype.kind in "biuf":
        return np.zeros((n, *like.shape[1:]), like.dtype)
    return np.full((n, *like.shape[1:]), None, object)


def merge_info(a: dict, b: dict, na: int, nb: int) -> dict:
    """The info of one vector env of ``na + nb`` sub-envs from its halves' infos: every key's
    ``[n, ...]`` arrays concatenated (nested dicts key by key), a half without the key filled as
    gymnasium fills sub-envs without it (its ``_key`` mask False)."""
    out: dict = {}
    for k in list(a) + [k for k in b if k not in a]:
        x, y = a.get(k), b.get(k)
        if isinstance(x, dict) or isinstance(y, dict):
            out[k] = merge_info(x or {}, y or {}, na, nb)
            continue
        x = _filler(np.asarray(y), na) if x is None else np.asarray(x)
        y = _filler(x, nb) if y is None else np.asarray(y)
        out[k] = np.concatenate([x, y])
    return out


class OverlapVectorEnv(gym.vector.VectorEnv):
    """A ``SAME_STEP`` vector env of ``B`` sub-envs made of two halves that can step apart.

    Args:
      halves: two ``SAME_STEP`` vector envs (sub-envs ``0 .. h-1``, then the rest), each with its
        own ``RecordEpisodeStatistics``, same spaces.
    """

    def __init__(self, halves: tuple[gym.vector.VectorEnv, gym.vector.VectorEnv]):
        self.halves = tuple(halves)
        first = self.halves[0]
        self.sizes: tuple[int, int] = (self.halves[0].num_envs, self.halves[1].num_envs)
        self.split = self.sizes[0]
        self.num_envs = sum(self.sizes)
        self.single_observation_space = first.single_observation_space
        self.single_action_space = first.single_action_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space,
                                                              self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space,
                                                         self.num_envs)
        self.metadata = dict(first.metadata)
        self.render_mode = getattr(first, "render_mode", None)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="pgrad-overlap")
        self._pending: list[Future | None] = [None, None]

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Sub-env ``i`` gets ``seed + i``, as in one vector env."""
        a = self.halves[0].reset(seed=seed, options=options)
        b = self.halves[1].reset(seed=None if seed is None else seed + self.split,
                                 options=options)
        return merge_obs(a[0], b[0]), merge_info(a[1], b[1], *self.sizes)

    def step_async(self, half: int, actions: Any) -> None:
        """Starts half ``half`` (0 or 1) stepping ``actions`` (its ``[n, ...]`` rows) in the
        worker thread; :meth:`step_wait` returns its results."""
        if self._pending[half] is not None:
            raise RuntimeError(f"half {half} is stepping already; call step_wait({half}) first.")
        self._pending[half] = self._pool.submit(self.halves[half].step, actions)

    def step_wait(self, half: int) -> tuple:
        """The ``(obs, rewards, terminated, truncated, info)`` of half ``half``'s step (whatever
        the step raised, raised here)."""
        future, self._pending[half] = self._pending[half], None
        if future is None:
            raise RuntimeError(f"half {half} is not stepping; call step_async({half}, ...).")
        return future.result()

    def drain(self) -> None:
        """Waits for any half still stepping and drops its results (after an error elsewhere:
        the envs are then wherever that step left them)."""
        for half, pending in enumerate(self._pending):
            if pending is not None:
                pending.exception()
                self._pending[half] = None

    def step(self, actions: Any):
        """Both halves, one after the other (results as one vector env of ``B``)."""
        actions = np.asarray(actions)
        return merge_step(self.halves[0].step(actions[: self.split]),
                          self.halves[1].step(actions[self.split:]), self.sizes)

    def close_extras(self, **kwargs: Any) -> None:
        self.drain()
        self._pool.shutdown(wait=True)
        for h in self.halves:
            h.close()


def merge_step(a: tuple, b: tuple, sizes: tuple[int, int]) -> tuple:
    """Two halves' ``step`` results -> one vector env's."""
    return (merge_obs(a[0], b[0]), *(np.concatenate([x, y]) for x, y in zip(a[1:4], b[1:4])),
            merge_info(a[4], b[4], *sizes))


def not_overlappable(name: str, what: str) -> ValueError:
    """The error for an env (named ``name``) whose ``what`` rules out ``vector_mode="overlap"``."""
    return ValueError(
        f"env {name!r}: vector_mode 'overlap' acts on half the envs before the other "
        f"half has stepped, which {what} (read from every env's step) does not allow; use "
        "vector_mode 'sync'.")


class Stepper(Protocol):
    """What :func:`overlapped_steps` uses of :class:`pgrad.rl.collection.rollout.Collector`
    (documented there): its env, where the env stands, and the pieces of one vector step."""

    envs: Any  # an OverlapVectorEnv
    name: str
    num_envs: int
    env_steps: int
    layout: spaces.ObsLayout

    @property
    def current_obs(self) -> Any: ...

    @property
    def action_mask(self) -> np.ndarray | None: ...

    def reset(self, seed: int | None = None) -> None: ...

    def env_call(self, where: str | int, fn: Callable, *args: Any, **kwargs: Any) -> Any: ...

    def preprocessed(self, raw: Any, where: str | int) -> Any: ...

    def record_step(self, obs: Any, acted: tuple, action_mask: Any, stepped: tuple, where: int,
                    check: bool) -> tuple: ...


def overlapped_steps(col: Stepper, policy_fn: Callable, num_steps: int,
                     check: bool) -> Iterator[tuple]:
    """The :class:`pgrad.rl.collection.rollout.Collector` 's ``num_steps`` vector steps (its
    :meth:`~pgrad.rl.collection.rollout.Collector.record_step` results) on an
    :class:`OverlapVectorEnv`:
    the policy acts on one half of the envs while the worker thread steps the other. Per vector
    step ``t``: act on B at ``t`` while A steps ``t``; start B's step ``t``; act on A at
    ``t + 1`` while B steps ``t``; start A's step ``t + 1`` and record step ``t`` while it runs.
    The policy function is called on half batches, A's rows then B's at every step (the order
    one ``[B]`` draw takes from the generator), with the same observations and actions as one
    step after the other; no half is left stepping afterwards."""
    envs = col.envs
    assert isinstance(envs, OverlapVectorEnv)  # (col.overlap)
    if col.current_obs is None:
        col.reset()
    if col.action_mask is not None:
        raise not_overlappable(col.name, "the env's action masks")
    halves, layout = (slice(0, envs.split), slice(envs.split, None)), col.layout

    def rows(obs, half: int):
        return layout.join(p[halves[half]] for p in layout.split(obs))

    obs = col.current_obs  # (no observation normaliser with this env: see Collector.__init__)
    acted_a = policy_fn(rows(obs, 0))
    where = col.env_steps + col.num_envs
    try:
        envs.step_async(0, acted_a[1])
        for t in range(num_steps):
            acted_b = policy_fn(rows(obs, 1))
            stepped_a = col.env_call(where, envs.step_wait, 0)
            envs.step_async(1, acted_b[1])
            more = t + 1 < num_steps
            if more:
                next_a = policy_fn(col.preprocessed(stepped_a[0], where))
            stepped_b = col.env_call(where, envs.step_wait, 1)
            if more:  # A steps t + 1 while step t is recorded
                envs.step_async(0, next_a[1])
            acted = tuple(None if a is None else np.concatenate([a, b])
                          for a, b in zip(acted_a, acted_b))
            yield col.record_step(obs, acted, None, merge_step(stepped_a, stepped_b, envs.sizes),
                                  where, check)
            obs, where = col.current_obs, where + col.num_envs
            if more:
                acted_a = next_a
    finally:
        envs.drain()  # (an error or an abandoned rollout: nothing left stepping)
