"""Rollouts from Gymnasium vector envs into immutable time-major ``Trajectory`` s ``[T, B, ...]``.

Vector envs are built with ``AutoresetMode.SAME_STEP`` (Gymnasium 1.x): when sub-env ``b`` ends
an episode at step ``t``, the same ``step`` call resets it, returns the *reset* observation and
puts the episode's final observation in ``info["final_obs"][b]``. So every stored transition is
real (none of the dummy "reset" steps of the default ``NEXT_STEP`` mode) and
``next_observations[t, b]`` -- the observation that really followed step ``t`` -- is the next
row's observation within an episode and the final observation at an episode end. Returns then
bootstrap from ``V(next_observations)`` at truncations and not at terminations
(:mod:`pgrad.rl.advantages.returns`).

Episode returns and lengths come from Gymnasium's ``RecordEpisodeStatistics`` (raw rewards, before
any reward normalisation), or for an env that reports whole games
(:data:`pgrad.rl.envs.vector.GAME_INFO`:
Atari, whose learning episodes end at each lost life, with clipped rewards) from those games: their
real scores, as SB3's ``Monitor`` placed before its ``AtariWrapper`` reports them.
``vector_mode="envpool"`` presents envpool's pools through the same contract
(:class:`pgrad.rl.envs.envpool.EnvpoolVectorEnv` converts its NEXT_STEP autoreset).
The vector envs and the env failures (:class:`EnvError`, one sentence naming the env, the env
step and what went wrong) are in :mod:`pgrad.rl.envs.vector`; their names are importable from here
too.

Acting is a numpy callable (see :class:`pgrad.rl.acting.policy.NumpyPolicy`): one TensorFlow call
per env step would cost several times the env step itself.

This module is the Collector's step loop. What one ``collect`` gathers as its steps arrive is
:class:`RolloutRun` (:mod:`pgrad.rl.collection.rollout_run`); what it returns,
:class:`Trajectory`, is in :mod:`pgrad.rl.collection.trajectory`; its image frames go through
:mod:`pgrad.rl.observations.frames`; the NaN/Inf
checks are :mod:`pgrad.rl.collection.finite`; ended episodes and whole-episode batches are
:mod:`pgrad.rl.collection.episodes`; double-buffered stepping is :mod:`pgrad.rl.envs.overlap`
(through the Collector's stepping interface). Their public names are importable from here too.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from pgrad.rl.collection import masks
from pgrad.rl.collection.episodes import ended_episodes, ended_successes, whole_episodes
from pgrad.rl.collection.finite import check_step
from pgrad.rl.collection.rollout_run import RolloutRun
from pgrad.rl.collection.trajectory import Trajectory, build_trajectory, next_vector
from pgrad.rl.envs.overlap import OverlapVectorEnv, not_overlappable, overlapped_steps
from pgrad.rl.envs.vector import (
    GAME_INFO,
    VECTOR_MODES,
    EnvError,
    describe_failure,
    env_name,
    make_vec_env,
)
from pgrad.rl.observations import spaces
from pgrad.rl.observations.frames import FrameBuffer
from pgrad.rl.observations.normalize import ObsNormalizer, RewardNormalizer

__all__ = ["VECTOR_MODES", "Collector", "EnvError", "PolicyFn", "RolloutRun", "Trajectory",
           "describe_failure", "ended_successes", "env_name", "make_vec_env", "next_vector"]

#: ``policy_fn(obs [B, obs_dim]) -> (actions [B, *a], env_actions, log_probs [B], values [B]|None)``
#: (for an env that masks actions, :mod:`pgrad.rl.collection.masks`, it is called as
#: ``policy_fn(obs, action_mask=[B, n] bool)`` and must act legally).
PolicyFn = Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]]


_any = np.logical_or.reduce  # ``x.any()`` without its Python wrapper (called every env step)


def _where(where: str | int) -> str:
    """An env call's place in an error message: ``"reset (...)"`` or ``"env step N"``."""
    return where if isinstance(where, str) else f"env step {where}"


class Collector:
    """Steps a vector env with a numpy policy and records transitions.

    Args:
      envs: from :func:`make_vec_env` (SAME_STEP autoreset, RecordEpisodeStatistics).
      name: env name used in error messages.
      obs_norm / reward_norm: optional running normalisers (updated while collecting).
    """

    def __init__(self, envs: gym.vector.VectorEnv, name: str,
                 obs_norm: ObsNormalizer | None = None,
                 reward_norm: RewardNormalizer | None = None):
        mode = envs.metadata.get("autoreset_mode")
        if mode != gym.vector.AutoresetMode.SAME_STEP:
            raise ValueError(f"Collector needs AutoresetMode.SAME_STEP vector envs; got {mode}.")
        self.envs, self.name = envs, name
        self.num_envs = envs.num_envs
        self.layout = spaces.obs_layout(envs.single_observation_space)
        self.preprocess = self.layout.preprocess
        self.obs_dim = spaces.flat_dim(envs.single_observation_space)
        self.obs_norm, self.reward_norm = obs_norm, reward_norm
        self.env_steps = 0  # sub-env steps taken (the owner may set it: the run's total)
        self._raw_obs: np.ndarray | None = None
        self._last_norm: tuple | None = None  # (flat, mean, var, normalised): see _norm
        self._async = isinstance(getattr(envs, "unwrapped", envs), gym.vector.AsyncVectorEnv)
        # the info key of the episodes to report: the env's whole games, if it reports them
        self._episode_key = GAME_INFO if envs.metadata.get(GAME_INFO) else "episode"
        self._watched = 0  # env calls so far whose warnings were watched (see env_call)
        #: Where the env's action masks come from (``masks.source``; None: it has none).
        self.masks = masks.VectorMasks(envs, self.layout, name)
        self._action_mask: np.ndarray | None = None  # [B, n] bool at the current observations
        #: ``[B]`` bool: whether each env's current observation starts an episode (a recurrent
        #: policy resets its state there; read by the policy function at each step).
        self.episode_start = np.ones(self.num_envs, bool)
        #: ``info["is_success"]`` of the episodes that ended and reported it, oldest first (1.0 /
        #: 0.0); the training loop takes them (:meth:`take_successes`) for the success rate.
        self.successes: list[float] = []
        #: Whether :meth:`collect` acts on one half of the envs while the other steps
        #: (``vector_mode="overlap"``, :mod:`pgrad.rl.envs.overlap`).
        self.overlap = isinstance(envs, OverlapVectorEnv)
        if self.overlap and obs_norm is not None:
            raise not_overlappable(name, "observation normalisation")

    # The stepping interface: what collect() runs, and what a stepper of its own (the
    # double-buffered one of pgrad.rl.envs.overlap) needs to do the same steps in another order.

    @property
    def current_obs(self) -> Any:
        """``[B, ...]`` preprocessed observations the policy acts on next (before observation
        normalisation; parts as :class:`pgrad.rl.observations.spaces.ObsLayout`), None before the
        first :meth:`reset`."""
        return self._raw_obs

    @property
    def action_mask(self) -> np.ndarray | None:
        """``[B, n]`` bool, the legal actions at :attr:`current_obs`; None for an env without
        action masks (:mod:`pgrad.rl.collection.masks`)."""
        return self._action_mask

    def env_call(self, where: str | int, fn: Callable, *args, **kwargs):
        """``fn(*args, **kwargs)`` on the vector env; anything it raises becomes an EnvError.

        ``where`` names the call in that error: a description, or the env step number (the
        message is only formatted if it is needed: the call runs every env step).

        Warnings raised during a call that then fails are dropped (the error says what went
        wrong): Gymnasium's env checker warns about the first reset's and step's outputs just
        before the vector env fails on them, and async workers log their tracebacks as
        warnings. Only those calls are watched (watching costs a little per call).
        """
        watch = self._async or self._watched < 2
        self._watched += 1
        try:
            if not watch:
                return fn(*args, **kwargs)
            with warnings.catch_warnings(record=True) as caught:
                out = fn(*args, **kwargs)
            for w in caught:  # the call succeeded: show them as they would have been
                warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)
            return out
        except EnvError:
            raise
        except Exception as err:
            raise EnvError(f"env {self.name!r} failed at {_where(where)}: "
                           f"{describe_failure(err, self.envs.single_observation_space)}") from err

    def preprocessed(self, raw, where: str | int) -> np.ndarray:
        """``[B, ...]`` preprocessed observations of the env's ``raw`` ones (``where`` as in
        :meth:`env_call`); an observation that does not fit the space -> EnvError."""
        try:
            return self.preprocess(raw)
        except (ValueError, TypeError, IndexError) as err:
            raise EnvError(f"env {self.name!r} returned an unusable observation at "
                           f"{_where(where)}: "
                           f"{describe_failure(err, self.envs.single_observation_space)}") from err

    def reset(self, seed: int | Sequence[int] | None = None) -> None:
        """Resets every sub-env (sub-env i gets ``seed + i``, or ``seed[i]`` for a list)."""
        where = f"reset (env step {self.env_steps})"
        obs, info = self.env_call(where, self.envs.reset, seed=seed)
        flat = self.preprocessed(obs, where)
        self._raw_obs = check_step(self.layout, self.name, self.env_steps, flat, None, None)
        self.episode_start = np.ones(self.num_envs, bool)
        self._action_mask = self.masks.reset(obs, info, where)
        if self.obs_norm is not None:
            self.obs_norm.rms.update(self.layout.vector(self._raw_obs))

    def _norm(self, flat: np.ndarray) -> np.ndarray:
        """Normalised observations. A step's observations are normalised twice with the same
        statistics (as the step's ``next_observations`` and as the next step's inputs): the
        second call returns the first's array, kept with the exact inputs it was computed from
        (the statistics arrays are replaced, never written to, on every change)."""
        if self.obs_norm is None:
            return flat
        rms, last = self.obs_norm.rms, self._last_norm
        if last is not None and last[0] is flat and last[1] is rms.mean and last[2] is rms.var:
            return last[3]
        out = self.layout.with_vector(flat, self.obs_norm(self.layout.vector(flat)))
        self._last_norm = (flat, rms.mean, rms.var, out)
        return out

    def _step(self, policy_fn: PolicyFn, check: bool = True):
        """One vector step. Returns the transition pieces and finished episodes.

        ``check=False`` leaves the finite checks of this step's observations and rewards to
        the caller (:func:`pgrad.rl.collection.finite.check_rollout`).
        """
        obs, action_mask = self.observe()
        if action_mask is None:
            acted = policy_fn(obs)
        else:
            acted = policy_fn(obs, action_mask=action_mask)
        return self.advance(obs, acted, action_mask, check)

    def observe(self) -> tuple[Any, np.ndarray | None]:
        """``(obs, action_mask)``: the (normalised) observations ``[B, ...]`` the policy acts on
        next and their legal actions ``[B, n]`` (None: the env has no masks); the first call
        resets the env."""
        if self._raw_obs is None:
            self.reset()
        raw = self._raw_obs
        assert raw is not None  # reset() sets it
        return self._norm(raw), self._action_mask

    def advance(self, obs, acted: tuple, action_mask, check: bool = True):
        """Steps the env on ``acted`` (the policy's output at :meth:`observe`'s ``obs``) and
        records the step: :meth:`record_step`'s ``(pieces, episodes)``."""
        where = self.env_steps + self.num_envs
        stepped = self.env_call(where, self.envs.step, acted[1])
        return self.record_step(obs, acted, action_mask, stepped, where, check)

    def record_step(self, obs, acted: tuple, action_mask, stepped: tuple, where: int, check: bool):
        """Records one vector step once the env has stepped (the rest of :meth:`_step`).

        Args:
          obs: ``[B, ...]`` the (normalised) observations the policy acted on.
          acted: the policy function's output at ``obs`` (see :data:`PolicyFn`).
          action_mask: ``[B, n]`` bool legal actions at ``obs``, or None.
          stepped: the vector env's ``step`` output ``(obs, rewards, terminated, truncated,
            info)`` for ``acted``'s env actions.
          where: the env step number (:attr:`env_steps` plus ``B``), for errors.
          check: whether to check this step's values are finite (else the caller does).

        Returns:
          ``(pieces, episodes)``: the step's 9 pieces (``obs, actions, rewards, terminated,
          truncated, log_probs, values, next_obs, action_mask``, see
          :func:`pgrad.rl.collection.trajectory.build_trajectory`) and its finished episodes
          ``(env_step, return, length)``. :attr:`current_obs` is then the next observations.
        """
        actions, _, log_probs, values = acted
        raw, rewards, term, trunc, info = stepped
        flat = self.preprocessed(raw, where)
        self._action_mask = self.masks.read(raw, info, _where(where))
        if check:
            check_step(self.layout, self.name, self.env_steps, flat, rewards, where)
        done = np.logical_or(term, trunc)
        self.episode_start = done
        nxt = flat
        episodes: list[tuple] = []
        ended = _any(done)
        if ended:
            nxt = self.layout.copy(flat)
            final = info["final_obs"]
            for i in np.flatnonzero(done):
                last = self.preprocessed(spaces.batch_of_one(final[i]), where)
                if check:
                    check_step(self.layout, self.name, self.env_steps, last, None, where)
                self.layout.set_row(nxt, i, last)
        self.env_steps += self.num_envs
        if ended:
            episodes = ended_episodes(info, self._episode_key, self.env_steps)
            self.successes.extend(ended_successes(info, done))
        if self.obs_norm is not None:
            self.obs_norm.rms.update(self.layout.vector(flat))
        self._raw_obs = flat
        if self.reward_norm is not None:
            rewards = self.reward_norm(rewards, done)
        return ((obs, actions, rewards, term, trunc, log_probs, values, self._norm(nxt),
                 action_mask), episodes)

    def take_successes(self) -> list[float]:
        """The :attr:`successes` recorded since the last call (then forgotten here)."""
        out, self.successes = self.successes, []
        return out

    def collect(self, policy_fn: PolicyFn, num_steps: int) -> tuple[Trajectory, list]:
        """``num_steps`` vector steps -> ``(Trajectory [num_steps, B], episodes)``.

        ``episodes`` is a list of ``(env_step, return, length)`` finished during the call.
        """
        run = RolloutRun(self, num_steps)
        stepper = (overlapped_steps(self, policy_fn, num_steps, run.check) if self.overlap
                   else self._steps(policy_fn, num_steps, run.check))
        try:
            for t, (parts, eps) in enumerate(stepper):
                run.add(t, parts, eps)
        except EnvError:
            run.failed()
            raise
        return run.finish()

    def _steps(self, policy_fn: PolicyFn, num_steps: int, check: bool):
        """``num_steps`` :meth:`_step` results, one vector step after the other."""
        for _ in range(num_steps):
            yield self._step(policy_fn, check)

    def collect_episodes(self, policy_fn: PolicyFn, min_steps: int,
                         max_vector_steps: int = 100_000) -> tuple[Trajectory, list]:
        """Whole episodes: at least ``min_steps`` steps, every env's batch ending at an episode end
        (:func:`pgrad.rl.collection.episodes.whole_episodes`; steps after an env's part closed are
        masked out in ``Trajectory.mask``)."""
        return whole_episodes(lambda: self._step(policy_fn), self.layout, self.num_envs,
                              self.name, min_steps, max_vector_steps)

    def collect_groups(self, policy_fn: PolicyFn, group_seeds: Sequence[int],
                       max_vector_steps: int = 100_000) -> tuple[Trajectory, list]:
        """One episode per env, the envs reset in groups that share a seed (the GRPO family).

        Env ``i`` is reset with ``group_seeds[i // G]`` (``G = B / len(group_seeds)``
        consecutive envs per group: a token task's group shares one prompt); every env's part
        of the batch is its first episode. Steps an env takes after that episode ended (its
        autoreset, while the others finish) are masked out (``Trajectory.mask``) and their
        episodes and successes are not reported; the next call resets every env again.

        Returns:
          ``(Trajectory [T, B] with its mask, episodes)``: ``T`` is the longest episode.
        """
        seeds = [int(s) for s in group_seeds]
        if not seeds or self.num_envs % len(seeds):
            raise ValueError(f"collect_groups: {len(seeds)} group seeds do not divide "
                             f"{self.num_envs} envs.")
        size = self.num_envs // len(seeds)
        self.reset(seed=[s for s in seeds for _ in range(size)])
        steps: list[tuple] = []
        masks: list[np.ndarray] = []
        episodes: list = []
        open_ = np.ones(self.num_envs, bool)
        while open_.any():
            if len(masks) >= max_vector_steps:
                raise ValueError(f"env {self.name!r}: episodes did not end within "
                                 f"{max_vector_steps} vector steps; group rollouts need "
                                 "episodes that end (add a TimeLimit).")
            reported = len(self.successes)
            parts, eps = self._step(policy_fn)
            ended = np.flatnonzero(parts[3] | parts[4])
            first = open_[ended]  # which of the episodes that ended are a batch's episode
            if len(eps) == len(ended):  # RecordEpisodeStatistics: one per ended env, in order
                eps = [e for e, keep in zip(eps, first) if keep]
            new = self.successes[reported:]
            if len(new) == len(ended):  # every ended env reported is_success
                self.successes[reported:] = [v for v, keep in zip(new, first) if keep]
            steps.append(parts)
            masks.append(open_.astype(np.float32))
            episodes.extend(eps)
            open_[ended] = False
        return self._trajectory(steps, np.stack(masks)), episodes

    def _trajectory(self, steps: list[tuple], mask, frames: FrameBuffer | None = None,
                    last_obs=None) -> Trajectory:
        """:func:`pgrad.rl.collection.trajectory.build_trajectory` of ``T`` :meth:`_step`
        results."""
        return build_trajectory(self.layout, steps, mask, frames, last_obs)

    def close(self) -> None:
        self.envs.close()

