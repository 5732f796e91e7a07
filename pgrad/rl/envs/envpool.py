"""envpool's C++ vector envs behind the contract :class:`pgrad.rl.collection.rollout.Collector`
needs.

The optional backend of ``vector_mode="envpool"`` (``pip install 'pgrad[envpool]'``), for envpool's
classic-control, MuJoCo (Gymnasium-style ids, e.g. ``HalfCheetah-v5``) and Atari ids.

How envpool (1.2) reports episode ends, and what :class:`EnvpoolVectorEnv` does about it:

* **Autoreset is NEXT_STEP.** The step that ends an episode returns its last observation; the
  *next* ``step`` ignores that env's action and returns the reset observation with reward 0,
  ``terminated = truncated = False`` and ``info["elapsed_step"] == 0``. The adapter instead
  resets the envs that just ended inside the same ``step`` call (``pool.reset(env_ids)``, which
  envpool allows for a subset of envs), puts their last observations in ``info["final_obs"]``
  and returns the reset observations: Gymnasium's ``AutoresetMode.SAME_STEP``, so no dummy
  transition reaches a ``Trajectory``.
* **A termination on the time limit's step is reported as a truncation.** envpool sets
  ``trunc = done and elapsed_step >= max_episode_steps`` and ``terminated = done and not trunc``,
  so a pole that falls on step 500 of CartPole-v1 comes back as ``terminated=False,
  truncated=True`` and would be bootstrapped. Gymnasium's ``TimeLimit`` reports
  ``terminated=True, truncated=True``. The adapter therefore creates the pool with a limit one
  step longer (envpool then never truncates) and applies the time limit itself from
  ``info["elapsed_step"]``: ``terminated`` is envpool's real termination and ``truncated`` is
  ``elapsed_step >= max_episode_steps``, both possibly true, as in Gymnasium.
* **Seeds are fixed when the pool is made** (sub-env ``i`` gets ``seed + i``, like Gymnasium's
  vector envs, but from a different generator: the same seed gives other episodes than
  Gymnasium). ``reset(seed=s)`` makes a new pool with seed ``s`` unless the current one was just
  made with it and has not stepped.

Episode returns and lengths come from Gymnasium's own ``RecordEpisodeStatistics`` vector wrapper
around this env (:func:`pgrad.rl.collection.rollout.make_vec_env` adds it), as for the other vector
modes.

Atari (``ALE/Breakout-v5``, ``BreakoutNoFrameskip-v4`` or envpool's own ``Breakout-v5``) runs
under :class:`EnvpoolAtariVectorEnv` (:mod:`pgrad.rl.envs.envpool_atari`): the contract of
:func:`pgrad.rl.envs.atari.make_atari`, from envpool's own preprocessing.
"""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np

#: envpool families whose ids the backend admits (envpool's import path of the env).
FAMILIES = {"envpool.classic_control": "classic control", "envpool.mujoco.gym": "MuJoCo",
            "envpool.atari": "Atari"}
INSTALL_HINT = "pip install 'pgrad[envpool]'"


def _envpool():
    try:
        import envpool
    except ImportError as e:
        raise ImportError(
            f"vector_mode='envpool' needs the envpool package ({INSTALL_HINT}); "
            f"importing it failed: {e}"
        ) from e
    return envpool


def is_available() -> bool:
    """True if ``envpool`` can be imported."""
    try:
        _envpool()
    except ImportError:
        return False
    return True


def supported_ids() -> list[str]:
    """The env ids ``vector_mode="envpool"`` accepts (envpool's classic control, MuJoCo, Atari)."""
    from envpool.registration import registry

    _envpool()
    return sorted(k for k, (path, *_) in registry.specs.items() if path in FAMILIES)


def check_env_id(env_id: Any) -> str:
    """``env_id`` if envpool can run it here, else a ValueError (TypeError for a non-string)."""
    if not isinstance(env_id, str):
        raise TypeError(
            f"vector_mode='envpool' needs a registered env id string; got {env_id!r} "
            "(use vector_mode 'sync' or 'async' for an env factory)."
        )
    _envpool()
    from envpool.registration import registry

    entry = registry.specs.get(env_id)
    if entry is None or entry[0] not in FAMILIES:
        where = "" if entry is None else f" (envpool has it under {entry[0]!r})"
        raise ValueError(
            f"vector_mode='envpool' does not support env {env_id!r}{where}: it runs envpool's "
            f"{', '.join(FAMILIES.values())} ids (pgrad.rl.envs.envpool.supported_ids() lists "
            "them); use vector_mode 'sync' or 'async' for this env."
        )
    return env_id


class EnvpoolVectorEnv(gym.vector.VectorEnv):
    """An envpool pool presented as a Gymnasium ``SAME_STEP`` vector env.

    ``step`` returns, for a sub-env whose episode ended, the reset observation, with the
    episode's last observation in ``info["final_obs"][b]`` (``info["_final_obs"]`` marks them),
    separate ``terminated`` / ``truncated`` flags (the time limit applied as Gymnasium's
    ``TimeLimit`` does) and ``info["elapsed_step"]`` of the returned observations. Rewards are
    float64 and flags bool, as Gymnasium's vector envs return them.

    Args:
      env_id: an envpool id of the classic-control, MuJoCo or Atari families.
      num_envs: number of sub-envs.
      seed: sub-env ``i`` is seeded ``seed + i`` (envpool's generator, not Gymnasium's).
      max_episode_steps: time limit; default envpool's for the id (the same as Gymnasium's
        registration for the classic-control and MuJoCo ids).
      num_threads: envpool worker threads (0: envpool's choice).
      pool_id: envpool's id for the env, if ``env_id`` is another name of it.
      **make_kwargs: further ``envpool.make`` options (e.g. MuJoCo's ``reset_noise_scale``).
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
    #: steps past the time limit given to envpool: 1, so envpool never truncates, we do
    _PAST_LIMIT = 1
    _pool: Any = None  # envpool's own (untyped) pool, made by _make_pool

    def __init__(self, env_id: str, num_envs: int, seed: int = 0,
                 max_episode_steps: int | None = None, num_threads: int = 0,
                 pool_id: str | None = None, **make_kwargs: Any):
        self._envpool = _envpool()
        self.env_id = env_id
        self._pool_id = check_env_id(env_id if pool_id is None else pool_id)
        if max_episode_steps is None:
            spec = self._envpool.make_spec(self._pool_id)
            max_episode_steps = int(spec.config.max_episode_steps)
        if int(max_episode_steps) < 1:
            raise ValueError(f"max_episode_steps must be >= 1; got {max_episode_steps}")
        self.max_episode_steps = int(max_episode_steps)
        self.num_envs = int(num_envs)
        self._make_kwargs = dict(make_kwargs, num_envs=self.num_envs, num_threads=num_threads,
                                 max_episode_steps=self.max_episode_steps + self._PAST_LIMIT)
        self._seed, self._fresh = None, False
        self._make_pool(seed)
        self.single_observation_space = self._pool.observation_space
        self.single_action_space = self._pool.action_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space,
                                                              self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self._ids = np.arange(self.num_envs, dtype=np.int32)
        self._obs: np.ndarray | None = None

    def _make_pool(self, seed) -> None:
        if self._pool is not None:
            self._pool.close()
        with warnings.catch_warnings():  # Box bounds given as float64 for a float32 space
            warnings.simplefilter("ignore", UserWarning)
            self._pool = self._envpool.make(self._pool_id, "gymnasium", seed=seed,
                                            **self._make_kwargs)
            self._pool.observation_space, self._pool.action_space  # noqa: B018  (built here)
        self._seed, self._fresh = seed, True

    @staticmethod
    def _in_order(rows: np.ndarray, env_id: np.ndarray, *arrays):
        """``arrays`` reordered so that row ``i`` is env ``rows[i]`` (``rows`` ascending)."""
        if np.array_equal(env_id, rows):  # envpool's sync mode: always, so far
            return arrays
        order = np.argsort(env_id)
        if not np.array_equal(env_id[order], rows):
            raise RuntimeError(f"envpool returned envs {env_id}, expected {rows}.")
        return tuple(a[order] for a in arrays)

    def reset(self, *, seed: int | None = None, options: dict | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        """Resets every sub-env; with ``seed``, sub-env ``i`` restarts from seed ``seed + i``."""
        obs, _ = self._reset_all(seed, options)
        self._obs = obs
        return obs, {"elapsed_step": np.zeros(self.num_envs, np.int32)}

    def _reset_all(self, seed: int | None, options: dict | None):
        """envpool's reset of every sub-env: ``(obs, info)`` in env order (a new pool if seeded)."""
        if options:
            raise ValueError(f"{type(self).__name__}.reset takes no options; got {options!r}")
        if seed is not None and not (self._fresh and seed == self._seed):
            self._make_pool(seed)
        self._fresh = False
        obs, info = self._pool.reset()
        keys = [k for k, v in info.items() if isinstance(v, np.ndarray)]
        obs, *values = self._in_order(self._ids, info["env_id"], obs, *(info[k] for k in keys))
        return obs, dict(zip(keys, values))

    def step(self, actions: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One step of every sub-env; ended episodes reset in this same call (SAME_STEP)."""
        if self._obs is None:
            raise RuntimeError("EnvpoolVectorEnv.step called before reset().")
        obs, rewards, term, _trunc, info = self._pool.step(np.asarray(actions))
        elapsed = info["elapsed_step"]
        obs, rewards, term, elapsed = self._in_order(self._ids, info["env_id"], obs, rewards,
                                                     term, elapsed)
        rewards = rewards.astype(np.float64)
        terminated = np.asarray(term, bool)  # envpool's "trunc" never fires: the limit is ours
        truncated = elapsed >= self.max_episode_steps
        done = terminated | truncated
        out = {}
        if done.any():
            ended = np.flatnonzero(done).astype(np.int32)
            final = np.full(self.num_envs, None, dtype=object)
            for i in ended:
                final[i] = obs[i].copy()
            reset_obs, reset_info = self._pool.reset(ended)
            (reset_obs,) = self._in_order(ended, reset_info["env_id"], reset_obs)
            obs[ended] = reset_obs
            elapsed = np.where(done, 0, elapsed)
            out = {"final_obs": final, "_final_obs": done}
        out["elapsed_step"] = elapsed
        self._obs = obs
        return obs, rewards, terminated, truncated, out

    def close_extras(self, **kwargs: Any) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __repr__(self) -> str:
        return (f"EnvpoolVectorEnv({self.env_id!r}, num_envs={self.num_envs}, "
                f"max_episode_steps={self.max_episode_steps})")
