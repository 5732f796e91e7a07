"""``vector_mode="envpool"`` for Atari: envpool's pools behind
:func:`pgrad.rl.envs.atari.make_atari`'s
contract.

:class:`EnvpoolAtariVectorEnv` runs envpool's C++ Atari (its own no-op reset, frame skip with
max-pool of the last two frames, grayscale ``INTER_AREA`` resize, frame stack, episodic life, reward
clipping and FIRE reset) and presents it as a SAME_STEP vector env of ``make_atari`` envs:
``(84, 84, 4)`` uint8 channel-last observations, ``terminated`` at a lost life (episodic life),
clipped learning rewards, and whole games reported with their real score in ``info["game"]``
(:data:`pgrad.rl.envs.vector.GAME_INFO`). The options are ``make_atari``'s.

How envpool (1.2.5) works, and what the adapter does about it:

* **Ids.** envpool names a game ``Breakout-v5``, without sticky actions by default. The adapter
  takes ale-py's registration of the Gymnasium id: ``ALE/Breakout-v5`` gets
  ``repeat_action_probability=0.25``, ``BreakoutNoFrameskip-v4`` 0; envpool's own ids run as
  envpool registers them.
* **Channel-first stacks** ``(4, 84, 84)`` are transposed to ``(84, 84, 4)``.
* **A lost life.** ``pool.reset(ids)`` is a *forced* reset, which restarts the game even after a
  lost life. The adapter therefore resets ended envs by stepping them alone
  (``pool.step(noops, ids)``, which envpool allows for a subset): envpool's own autoreset then
  starts a new game after a game over or the time limit, and continues the game after a lost
  life.
* **The time limit** is envpool's own: ``max_num_frames_per_episode / frame_skip`` (27,000)
  policy steps per game, across lives (``info["elapsed_step"]`` counts the game's steps).
  ``terminated`` is a game over or (episodic life) a lost life with lives left; ``truncated``
  the time limit; both can be true, as in Gymnasium.
* **The score** is envpool's unclipped ``info["reward"]`` summed over the game; a game's length
  is the policy's steps in it, as for ``make_atari``.

Where envpool's semantics differ from the Gymnasium pipeline (``make_atari``), so that only the
settings below can be compared step for step (``tests/rl/test_atari.py`` does):

* after a lost life envpool takes 0..``noop_max``-1 no-op frames and one FIRE frame, and keeps the
  frame stack; ``make_atari`` takes one no-op step, FIRE and action 2 (4 frames each) and starts a
  new stack;
* at a game's start envpool's FIRE reset is one FIRE frame in place of the last no-op frame;
  ``make_atari``'s is two steps (FIRE, action 2) after the no-ops;
* no-op counts and sticky actions come from envpool's generators, seeded per env from the pool's
  seed, not from ale-py's: the same seed gives other games;
* the time limit counts policy steps (27,000) in envpool, frames (108,000, no-ops and FIRE steps
  included) in ale-py;
* rewards of envpool's reset frames (no-ops, FIRE) are not counted; ``make_atari`` counts those of
  its no-op and FIRE steps.

With sticky actions off, ``noop_max=1``, FIRE reset off and episodic life off both run the same
emulator frames: observations, rewards, flags and game scores agree exactly; with episodic life
on they agree up to each env's first lost life.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from pgrad.rl.envs.envpool import EnvpoolVectorEnv, _envpool
from pgrad.rl.envs.ids import GAME_INFO, is_atari_id

#: ale-py's registrations: sticky actions of the Gymnasium Atari ids (their frame limit is 108,000)
STICKY = {"ALE/": 0.25, "NoFrameskip-v4": 0.0, "NoFrameskip-v0": 0.25}


def is_envpool_atari(env_id: Any) -> bool:
    """Whether ``env_id`` is a Gymnasium Atari id or one of envpool's Atari ids."""
    if is_atari_id(env_id):
        return True
    if not isinstance(env_id, str):
        return False
    try:
        from envpool.registration import registry
    except ImportError:
        return False
    entry = registry.specs.get(env_id)
    return entry is not None and entry[0] == "envpool.atari"


def pool_settings(env_id: str) -> tuple[str, dict[str, Any]]:
    """``(envpool id, settings)`` for an Atari id: ale-py's sticky actions for Gymnasium's ids."""
    if env_id.startswith("ALE/"):
        return env_id[len("ALE/"):].rsplit("-v", 1)[0] + "-v5", {
            "repeat_action_probability": STICKY["ALE/"]}
    for suffix in ("NoFrameskip-v4", "NoFrameskip-v0"):
        if env_id.endswith(suffix):
            return env_id[: -len(suffix)] + "-v5", {"repeat_action_probability": STICKY[suffix]}
    return env_id, {}


class EnvpoolAtariVectorEnv(EnvpoolVectorEnv):
    """envpool's Atari as a SAME_STEP vector env of :func:`pgrad.rl.envs.atari.make_atari` envs.

    Args:
      env_id: ``ALE/Breakout-v5``, ``BreakoutNoFrameskip-v4`` or envpool's ``Breakout-v5``.
      num_envs: number of sub-envs.
      seed: sub-env ``i`` is seeded ``seed + i`` (envpool's generators).
      num_threads: envpool worker threads (0: envpool's choice).
      noop_max, frame_skip, screen_size, grayscale, episodic_life, fire_reset, clip_rewards,
        frame_stack: as :func:`pgrad.rl.envs.atari.make_atari` (``noop_max >= 1`` here: envpool
        always takes at least one no-op frame).
      stack_padding: ``"reset"`` only: envpool starts a stack by repeating the first frame.
      max_num_frames_per_episode: the game's frame limit (ale-py's 108,000 by default), applied
        as ``max_num_frames_per_episode // frame_skip`` policy steps.
      **make_kwargs: further ``envpool.make`` options (``repeat_action_probability``,
        ``full_action_space``, ``mode``, ``difficulty``).
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP, GAME_INFO: True}
    _PAST_LIMIT = 0  # envpool's own time limit: its autoreset restarts the game there

    def __init__(self, env_id: str, num_envs: int, seed: int = 0, num_threads: int = 0, *,
                 noop_max: int = 30, frame_skip: int = 4, screen_size: int = 84,
                 grayscale: bool = True, episodic_life: bool = True, fire_reset: bool = True,
                 clip_rewards: bool = True, frame_stack: int = 4, stack_padding: str = "reset",
                 max_num_frames_per_episode: int = 108_000, **make_kwargs: Any):
        _envpool()
        if not isinstance(env_id, str):
            raise TypeError(f"vector_mode='envpool' needs a registered env id string; got "
                            f"{env_id!r}.")
        if make_kwargs.pop("preprocess", True) is False:
            raise ValueError("vector_mode='envpool' always preprocesses Atari frames; use "
                             "vector_mode 'sync' or 'async' for preprocess=False.")
        if stack_padding != "reset":
            raise ValueError("vector_mode='envpool' starts a frame stack by repeating the first "
                             f"frame (stack_padding='reset'); got {stack_padding!r}.")
        if int(noop_max) < 1:
            raise ValueError(f"vector_mode='envpool' takes 1..noop_max no-op frames at a reset: "
                             f"noop_max must be >= 1; got {noop_max}.")
        if not isinstance(frame_stack, int) or frame_stack < 1:
            raise ValueError(f"frame_stack must be an int >= 1; got {frame_stack!r}.")
        pool_id, settings = pool_settings(env_id)
        super().__init__(
            env_id, num_envs, seed, max_episode_steps=int(max_num_frames_per_episode) // frame_skip,
            num_threads=num_threads, pool_id=pool_id,
            **{**settings, **make_kwargs}, stack_num=frame_stack, frame_skip=frame_skip,
            noop_max=int(noop_max), img_height=screen_size, img_width=screen_size,
            gray_scale=grayscale, episodic_life=episodic_life, reward_clip=clip_rewards,
            use_fire_reset=fire_reset)
        self.episodic_life = bool(episodic_life)
        c, h, w = self._pool.observation_space.shape
        self.single_observation_space = gym.spaces.Box(0, 255, (h, w, c), np.uint8)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space,
                                                              self.num_envs)
        self._lives = np.zeros(self.num_envs, np.int64)
        self._score = np.zeros(self.num_envs, np.float64)  # the running games' real scores
        self._steps = np.zeros(self.num_envs, np.int64)  # ... and their policy steps

    def reset(self, *, seed: int | None = None, options: dict | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        """A new game in every sub-env; with ``seed``, sub-env ``i`` is seeded ``seed + i``."""
        obs, info = self._reset_all(seed, options)
        self._lives = info["lives"].astype(np.int64)
        self._score[:], self._steps[:] = 0.0, 0
        self._obs = obs = _channels_last(obs)
        return obs, {"elapsed_step": np.zeros(self.num_envs, np.int32), "lives": self._lives.copy()}

    def step(self, actions: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One step of every sub-env; ended learning episodes reset in this same call."""
        if self._obs is None:
            raise RuntimeError("EnvpoolAtariVectorEnv.step called before reset().")
        obs, rewards, term, trunc, info = self._pool.step(np.asarray(actions))
        obs, rewards, term, trunc, lives, over, raw, elapsed = self._in_order(
            self._ids, info["env_id"], obs, rewards, term, trunc, info["lives"],
            info["terminated"], info["reward"], info["elapsed_step"])
        lives, over = lives.astype(np.int64), over.astype(bool)
        lost = (0 < lives) & (lives < self._lives)  # as envpool's (and SB3's) episodic life
        terminated = over | (lost & self.episodic_life)
        truncated = np.asarray(trunc, bool)  # envpool: done at elapsed_step >= the limit
        done = terminated | truncated
        if not np.array_equal(done, np.asarray(term, bool) | truncated):
            raise RuntimeError(f"envpool ended episodes {np.flatnonzero(term | trunc)}, the "
                               f"adapter expected {np.flatnonzero(done)}: its Atari semantics "
                               "changed (see pgrad/rl/envs/envpool_atari.py).")
        self._score += raw
        self._steps += 1
        out: dict[str, Any] = {}
        if done.any():
            ended = np.flatnonzero(done).astype(np.int32)
            final = np.full(self.num_envs, None, dtype=object)
            for i in ended:
                final[i] = np.ascontiguousarray(obs[i].transpose(1, 2, 0))
            # envpool's own autoreset (pool.reset would also restart a game at a lost life)
            reset_obs, _, _, _, reset_info = self._pool.step(np.zeros(len(ended), np.int32),
                                                             ended)
            reset_obs, reset_lives, reset_elapsed = self._in_order(
                ended, reset_info["env_id"], reset_obs, reset_info["lives"],
                reset_info["elapsed_step"])
            obs[ended], lives[ended], elapsed[ended] = reset_obs, reset_lives, reset_elapsed
            out = {"final_obs": final, "_final_obs": done}
            game = over | truncated
            if game.any():
                out[GAME_INFO] = {"r": np.where(game, self._score, 0.0),
                                  "l": np.where(game, self._steps, 0)}
                out["_" + GAME_INFO] = game
                self._score[game], self._steps[game] = 0.0, 0
        self._lives = lives
        out["elapsed_step"], out["lives"] = elapsed, lives.copy()
        self._obs = obs = _channels_last(obs)
        return obs, rewards.astype(np.float64), terminated, truncated, out

    def __repr__(self) -> str:
        return (f"EnvpoolAtariVectorEnv({self.env_id!r}, num_envs={self.num_envs}, "
                f"envpool id {self._pool_id!r}, max_episode_steps={self.max_episode_steps})")


def _channels_last(obs: np.ndarray) -> np.ndarray:
    """``[B, C, H, W] -> [B, H, W, C]``, contiguous."""
    return np.ascontiguousarray(obs.transpose(0, 2, 3, 1))


def make_envpool(env_id: Any, num_envs: int, **kwargs: Any) -> EnvpoolVectorEnv:
    """The adapter for ``env_id``: :class:`EnvpoolAtariVectorEnv` for Atari ids, else
    :class:`EnvpoolVectorEnv` (``kwargs``: the class's options and ``envpool.make``'s)."""
    if is_envpool_atari(env_id):
        return EnvpoolAtariVectorEnv(env_id, num_envs, **kwargs)
    return EnvpoolVectorEnv(env_id, num_envs, **kwargs)
