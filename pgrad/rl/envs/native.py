"""Gymnasium's CartPole as one numpy vector env: the same numbers, a fraction of the Python.

``gym.make_vec("CartPole-v1", n, vectorization_mode="sync")`` steps ``n`` Python envs, each
through four wrappers (time limit, order enforcing, the passive checker, the action check), so
a 16-env step costs ~160 us here, most of a population's or a small run's wall
(docs/populations.md). :class:`CartPoleVector` steps all ``n`` in a few numpy operations and
gives what that sync env gives, bit for bit:

* each sub-env keeps its own ``numpy.random.Generator``, seeded as Gymnasium seeds an env
  (``reset(seed=s)``: sub-env ``i`` gets ``s + i``; a list: one seed each; ``None``: the RNG
  goes on, or a fresh one at the first reset), so its reset states are Gymnasium's;
* the physics are CartPoleEnv's expressions in its order, elementwise on float64 arrays
  (IEEE operations, so the same results as its scalar ones; ``np.cos`` / ``np.sin`` of an
  array agree with the scalar calls, which ``tests/rl/test_native_envs.py`` checks along
  with whole rollouts against the sync env);
* ``SAME_STEP`` autoreset with ``info["final_obs"]`` as :class:`gymnasium.vector.SyncVectorEnv`
  builds it, the id's ``max_episode_steps`` as ``TimeLimit`` applies it, and an action outside
  ``{0, 1}`` refused as CartPoleEnv refuses it.

:func:`native_vector_env` returns one for the ids it covers (:data:`NATIVE_IDS`, the registered
entry point unchanged, no env options), else None; :func:`pgrad.rl.envs.vector.make_vec_env`
uses it for ``vector_mode="sync"``. ``PGRAD_NATIVE_ENVS=0`` in the environment turns it off
(Gymnasium's own sync env then; :func:`gymnasium_envs` does so for a block).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector.utils import batch_space

#: Ids :func:`native_vector_env` builds natively, with the entry point each must still have.
NATIVE_IDS = {
    "CartPole-v0": "gymnasium.envs.classic_control.cartpole:CartPoleEnv",
    "CartPole-v1": "gymnasium.envs.classic_control.cartpole:CartPoleEnv",
}
#: The environment variable that turns the native envs off (``0``).
SWITCH = "PGRAD_NATIVE_ENVS"

# CartPoleEnv's constants, as its __init__ sets them.
GRAVITY = 9.8
MASSCART = 1.0
MASSPOLE = 0.1
TOTAL_MASS = MASSPOLE + MASSCART
LENGTH = 0.5  # half the pole's length
POLEMASS_LENGTH = MASSPOLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4


def native_vector_env(env_id: Any, num_envs: int, kwargs: dict | None = None
                      ) -> gym.vector.VectorEnv | None:
    """A :class:`CartPoleVector` for ``env_id``, or None where the native env does not apply:
    an id outside :data:`NATIVE_IDS`, one registered again with another entry point or options,
    any ``kwargs``, or ``PGRAD_NATIVE_ENVS=0``."""
    if not isinstance(env_id, str) or env_id not in NATIVE_IDS or kwargs:
        return None
    if os.environ.get(SWITCH, "1").strip() == "0":
        return None
    try:
        spec = gym.spec(env_id)
    except gym.error.Error:
        return None
    if (spec.entry_point != NATIVE_IDS[env_id] or spec.kwargs or spec.additional_wrappers
            or spec.max_episode_steps is None or not spec.order_enforce):
        return None
    return CartPoleVector(num_envs, spec.max_episode_steps, spec)


@contextlib.contextmanager
def gymnasium_envs() -> Iterator[None]:
    """Gymnasium's own envs inside the block (and in processes it starts): for figures that
    measure pgrad against Gymnasium's stepping. Usable as a decorator."""
    old = os.environ.get(SWITCH)
    os.environ[SWITCH] = "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(SWITCH, None)
        else:
            os.environ[SWITCH] = old


class CartPoleVector(gym.vector.VectorEnv):
    """``num_envs`` CartPoles stepped together, in ``SAME_STEP`` autoreset (module docstring).

    Args:
      num_envs: sub-envs ``B``.
      max_episode_steps: the time limit (an episode is truncated at this many steps).
      spec: the id's ``EnvSpec`` (for names; optional).
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(self, num_envs: int, max_episode_steps: int = 500, spec: Any = None):
        if int(num_envs) < 1:
            raise ValueError(f"num_envs must be >= 1; got {num_envs}.")
        self.num_envs = int(num_envs)
        self.max_episode_steps = int(max_episode_steps)
        self.spec = spec
        high = np.array([X_THRESHOLD * 2, np.inf, THETA_THRESHOLD * 2, np.inf],
                        dtype=np.float32)
        self.single_observation_space = gym.spaces.Box(-high, high, dtype=np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._state = np.zeros((self.num_envs, 4), np.float64)  # [B, 4]: x, x', theta, theta'
        self._elapsed = np.zeros(self.num_envs, np.int64)  # [B] steps into each episode
        self._rngs: list[np.random.Generator | None] = [None] * self.num_envs
        self._started = False
        #: ``(actions, [B, 4] next states)`` from :func:`step_together`, for the next step.
        self._ahead: tuple | None = None

    def _reset_one(self, i: int, seed: int | None) -> None:
        if seed is not None or self._rngs[i] is None:
            self._rngs[i] = seeding.np_random(seed)[0]
        rng = self._rngs[i]
        assert rng is not None
        self._state[i] = rng.uniform(low=-0.05, high=0.05, size=(4,))
        self._elapsed[i] = 0

    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: dict | None = None) -> tuple[np.ndarray, dict]:
        """Every sub-env reset: ``seed`` as :class:`gymnasium.vector.SyncVectorEnv` takes it.
        Returns ``(obs [B, 4] float32, {})``."""
        if options:
            raise ValueError(f"CartPoleVector.reset takes no options; got {sorted(options)}.")
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"reset got {len(seeds)} seeds for {self.num_envs} envs.")
        for i, s in enumerate(seeds):
            self._reset_one(i, s)
        self._started = True
        self._ahead = None
        return self._state.astype(np.float32), {}

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                          dict]:
        """One step of every sub-env on ``actions`` ``[B]`` in {0, 1}. Returns ``(obs [B, 4]
        float32, rewards [B] float64, terminated [B], truncated [B], info)``; an env that
        ended is reset in the same call (its last observation in ``info["final_obs"]``)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] is actions:  # stepped by step_together already
            new = ahead[1]
        else:
            new = _physics(self._state, self._checked(actions))
        self._state = new
        x, theta = new[:, 0], new[:, 2]
        terminated = ((x < -X_THRESHOLD) | (x > X_THRESHOLD) | (theta < -THETA_THRESHOLD)
                      | (theta > THETA_THRESHOLD))
        self._elapsed += 1
        truncated = self._elapsed >= self.max_episode_steps
        rewards = np.ones(self.num_envs, np.float64)
        obs = new.astype(np.float32)
        info: dict[str, Any] = {}
        done = terminated | truncated
        if done.any():
            ended = np.flatnonzero(done)
            final = np.full(self.num_envs, None, dtype=object)
            for i in ended:
                final[i] = obs[i].copy()
                self._reset_one(int(i), None)
                obs[i] = self._state[i].astype(np.float32)
            info = {"final_obs": final, "_final_obs": done.copy(), "final_info": {},
                    "_final_info": done.copy()}
        return obs, rewards, terminated, truncated, info

    def _checked(self, actions: Any) -> np.ndarray:
        """``actions`` as an array, or CartPoleEnv's refusal (before a reset: ResetNeeded)."""
        if not self._started:
            raise gym.error.ResetNeeded("Cannot call env.step() before calling env.reset()")
        a = np.asarray(actions)
        if (a.shape != (self.num_envs,) or a.dtype.kind not in "iub"
                or not np.logical_or(a == 0, a == 1).all()):
            raise AssertionError(f"{actions!r} ({type(actions)}) invalid: CartPole takes "
                                 f"{self.num_envs} actions in {{0, 1}}")
        return a

    def close_extras(self, **kwargs: Any) -> None:  # nothing to release
        pass


def _physics(state: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``[M, 4]`` the states after one step of ``state`` ``[M, 4]`` on actions ``a`` ``[M]``:
    CartPoleEnv.step's expressions in its order (its default Euler integrator), elementwise, so
    a row's result does not depend on the other rows."""
    x, x_dot, theta, theta_dot = state[:, 0], state[:, 1], state[:, 2], state[:, 3]
    force = np.where(a == 1, FORCE_MAG, -FORCE_MAG)
    costheta = np.cos(theta)
    sintheta = np.sin(theta)
    temp = (force + POLEMASS_LENGTH * np.square(theta_dot) * sintheta) / TOTAL_MASS
    thetaacc = (GRAVITY * sintheta - costheta * temp) / (
        LENGTH * (4.0 / 3.0 - MASSPOLE * np.square(costheta) / TOTAL_MASS))
    xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
    new = np.empty_like(state)
    new[:, 0] = x + TAU * x_dot
    new[:, 1] = x_dot + TAU * xacc
    new[:, 2] = theta + TAU * theta_dot
    new[:, 3] = theta_dot + TAU * thetaacc
    return new


def step_together(envs: Sequence[Any], actions: Sequence[Any]) -> None:
    """Computes the physics of the next ``step`` of several vector envs in one set of numpy
    operations (a population's members, stepped in lock-step: one call over ``N x B`` carts
    instead of ``N`` over ``B``). ``envs`` are the members' vector envs, wrapped or not; each
    whose base env is a :class:`CartPoleVector` keeps its share, and its own ``step`` then
    takes it if called with the very same ``actions`` object (any other call, or a wrapper
    that changes the actions, computes its own physics: the result is the same either way).
    Resets, time limits and episode bookkeeping stay each env's own. Anything else is left
    alone; an action an env would refuse leaves that env to refuse it in its own ``step``."""
    carts, acts = [], []
    for env, a in zip(envs, actions):
        base = getattr(env, "unwrapped", env)
        if not isinstance(base, CartPoleVector):
            continue
        base._ahead = None
        try:
            checked = base._checked(a)
        except (AssertionError, gym.error.ResetNeeded):
            continue  # refused in its own step
        carts.append((base, a))
        acts.append(checked)
    if len(carts) < 2:
        return
    new = _physics(np.concatenate([c._state for c, _ in carts]), np.concatenate(acts))
    at = 0
    for cart, a in carts:
        cart._ahead = (a, new[at: at + cart.num_envs])
        at += cart.num_envs


__all__ = ["NATIVE_IDS", "SWITCH", "CartPoleVector", "gymnasium_envs", "native_vector_env"]
