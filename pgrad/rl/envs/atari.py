"""Atari as users run it: the DQN / Stable-Baselines3 / CleanRL preprocessing, and the real score.

:func:`make_atari` builds the standard stack from Gymnasium's and ale-py's own parts (``pip install
'pgrad[atari]'``). :func:`pgrad.rl.envs.vector.make_vec_env` and :func:`pgrad.evaluate` apply it to
every
``ALE/...`` and ``...NoFrameskip-v4`` id. From the emulator outwards:

============================  ======================================================================
``gym.make(id, frameskip=1)``  ale-py's emulator, with the id's own sticky actions
                               (``repeat_action_probability``: 0.25 for ``ALE/*-v5``, 0 for
                               ``*NoFrameskip-v4``) and its limit of 108,000 frames per game
``AtariPreprocessing``         Gymnasium's: 1..``noop_max`` no-op frames after a reset; the action
                               repeated ``frame_skip`` frames, the rewards summed and the last two
                               frames max-pooled (Atari sprites flicker); ALE's grayscale, resized
                               to ``screen_size`` x ``screen_size`` with ``cv2.INTER_AREA``
:class:`GameScore`             the real game's score: those rewards summed over the whole game
:class:`EpisodicLife`          a lost life ends the *learning* episode (``terminated``); the next
                               ``reset`` takes one no-op step and the game goes on
:class:`FireReset`             games whose actions include FIRE: FIRE, then action 2, after every
                               reset (a lost life too), or some never start
``TransformReward(sign)``      learning rewards clipped to -1, 0, 1
:class:`FrameStack`            the last ``frame_stack`` frames, channel-last ``(84, 84, 4)`` uint8
                               (TensorFlow's CPU convolutions want NHWC)
:class:`ReportGames`           ``info["game"] = {"r": score, "l": steps}`` where a game ended (the
                               convention :data:`pgrad.rl.envs.vector.GAME_INFO` describes)
============================  ======================================================================

These are SB3's ``AtariWrapper`` defaults plus ``VecFrameStack(4)`` (rl-zoo's Atari settings);
``GameScore`` sits where SB3 puts its ``Monitor`` (before the wrapper), so the Collector's
episodes (``episodes.csv``, the rolling return, ``StopAtReturn``) and :func:`pgrad.evaluate`'s
returns are whole games and their real, unclipped scores. A game's length is the policy's steps
(``frame_skip`` frames each), not counting the no-op / FIRE steps the wrappers take after a lost
life; its score includes any reward those steps earn. Two details differ from SB3: the frame
stack is kept inside each env, so it restarts at a lost life as SB3's ``VecFrameStack`` does, and
it is padded by repeating the first frame (CleanRL's and envpool's way) rather than with zeros
(``stack_padding="zero"`` is SB3's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from pgrad.rl.envs.ids import GAME_INFO, ensure_registered, quiet_ale

__all__ = ["EpisodicLife", "FireReset", "FrameStack", "GameScore", "ReportGames", "make_atari"]

PADDINGS = ("reset", "zero")
INSTALL_HINT = "pip install 'pgrad[atari]'"


def make_atari(env_id: str, *, noop_max: int = 30, frame_skip: int = 4, screen_size: int = 84,
               grayscale: bool = True, episodic_life: bool = True, fire_reset: bool = True,
               clip_rewards: bool = True, frame_stack: int = 4, stack_padding: str = "reset",
               render_mode: str | None = None,
               game_wrapper: Callable[[gym.Env], gym.Env] | None = None,
               **make_kwargs: Any) -> gym.Env:
    """An Atari env with the standard preprocessing (see the module docstring).

    Args:
      env_id: an ale-py id, ``"ALE/Breakout-v5"`` or ``"BreakoutNoFrameskip-v4"``.
      noop_max: at most this many no-op frames after a reset (0: none).
      frame_skip: frames per step (the action repeated, rewards summed, last two max-pooled).
      screen_size: observations are ``screen_size`` x ``screen_size``.
      grayscale: one channel per frame (else three, RGB).
      episodic_life: a lost life is ``terminated`` for learning; the game goes on.
      fire_reset: press FIRE after every reset in games that have it.
      clip_rewards: learning rewards are their sign (the reported score never is).
      frame_stack: frames per observation (>= 1), stacked on the last axis.
      stack_padding: how a new stack starts: ``"reset"`` repeats the first frame, ``"zero"``
        pads with zeros.
      render_mode: passed to ``gym.make`` (``"rgb_array"`` for videos).
      game_wrapper: applied over ``AtariPreprocessing``, where an episode is a whole game and a
        step is a policy step (e.g. Gymnasium's ``RecordVideo``: one video per game).
      **make_kwargs: further ``gym.make`` options of the ale-py env (``repeat_action_probability``,
        ``full_action_space``, ``mode``, ``difficulty``, ``max_num_frames_per_episode``).

    Returns:
      The env; its observations are ``(screen_size, screen_size, frame_stack * channels)`` uint8.

    Raises:
      ImportError: ale-py or OpenCV is not installed (one line naming the extra).
      ValueError: bad options, or an id that is not an ale-py image env.
    """
    if not isinstance(frame_stack, int) or frame_stack < 1:
        raise ValueError(f"frame_stack must be an int >= 1; got {frame_stack!r}.")
    if stack_padding not in PADDINGS:
        raise ValueError(f"stack_padding must be one of {PADDINGS}; got {stack_padding!r}.")
    if "frameskip" in make_kwargs:
        raise ValueError("make_atari: pass frame_skip, not frameskip (the emulator runs with "
                         "frameskip=1 and AtariPreprocessing skips frames, max-pooling the last "
                         "two).")
    if make_kwargs.get("obs_type", "rgb") not in ("rgb", "grayscale"):
        raise ValueError(f"make_atari preprocesses screen images; obs_type="
                         f"{make_kwargs['obs_type']!r} needs preprocess=False.")
    ensure_registered(env_id)
    try:
        import cv2  # noqa: F401  (AtariPreprocessing resizes with it)
    except ImportError as err:
        raise ImportError(f"Atari preprocessing needs OpenCV ({INSTALL_HINT}): "
                          f"{' '.join(str(err).split())}") from err
    import ale_py
    from ale_py import AtariEnv

    quiet_ale(ale_py)  # also when the ids were registered by the user's own import
    if render_mode is not None:
        make_kwargs["render_mode"] = render_mode
    env = gym.make(env_id, frameskip=1, **make_kwargs)
    if not isinstance(env.unwrapped, AtariEnv):
        env.close()
        raise ValueError(f"make_atari needs an ale-py env; {env_id!r} is a "
                         f"{type(env.unwrapped).__name__}.")
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=noop_max, frame_skip=frame_skip, screen_size=screen_size,
        terminal_on_life_loss=False,  # it would reset the game at every lost life
        grayscale_obs=grayscale, grayscale_newaxis=False, scale_obs=False)
    if game_wrapper is not None:
        env = game_wrapper(env)
    env = score = GameScore(env)
    if episodic_life:
        env = EpisodicLife(env)
    if fire_reset and "FIRE" in env.unwrapped.get_action_meanings():  # type: ignore[attr-defined]
        env = FireReset(env)
    if clip_rewards:
        env = gym.wrappers.TransformReward(env, _sign)
    env = FrameStack(env, frame_stack, stack_padding)
    return ReportGames(env, score)


def _sign(reward) -> float:
    return float(np.sign(reward))


def _ale(env: Any):  # an ALE env (ale_py's, untyped) or a wrapper of one
    return env.unwrapped.ale


class GameScore(gym.Wrapper):
    """Sums the rewards it sees over the whole game (every life), for :class:`ReportGames`.

    Placed directly over ``AtariPreprocessing``: its rewards are the game's own (summed over the
    skipped frames, never clipped), and only a real game reset reaches it (:class:`EpisodicLife`
    continues the game after a lost life). ``finished`` holds a finished game's score until
    :class:`ReportGames` reports it; ``restarted`` says a game started since it last looked.
    """

    finished: float | None  # a finished game's score, until ReportGames takes it

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.score, self.finished, self.restarted = 0.0, None, False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Any, dict[str, Any]]:
        self.score, self.restarted = 0.0, True
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.score += float(reward)
        if terminated or truncated:  # the game is over (or at its frame limit)
            self.finished = self.score
        return obs, reward, terminated, truncated, info


class EpisodicLife(gym.Wrapper):
    """A lost life ends the learning episode; the emulator is reset only when the game is over.

    SB3's ``EpisodicLifeEnv`` (from the DQN paper): ``terminated`` is set on a step that loses a
    life while lives remain, and the ``reset`` that follows takes one no-op step instead of
    resetting (if that step ends the game, it resets). A reset with a seed or options, or one not
    right after a lost life, is a real reset.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.lives, self._continue = 0, False

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = _ale(self).lives()
        lost = 0 < lives < self.lives  # 0 lives is the game over itself
        self.lives = lives
        self._continue = lost and not (terminated or truncated)
        return obs, reward, terminated or lost, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Any, dict[str, Any]]:
        resume, self._continue = self._continue and seed is None and options is None, False
        if resume:
            obs, _, terminated, truncated, info = self.env.step(0)
            if not (terminated or truncated):
                self.lives = _ale(self).lives()
                return obs, info
        obs, info = self.env.reset(seed=seed, options=options)
        self.lives = _ale(self).lives()
        return obs, info


class FireReset(gym.Wrapper):
    """Presses FIRE, then action 2, after every reset (SB3's ``FireResetEnv``).

    Games such as Breakout wait for FIRE to serve; with :class:`EpisodicLife` inside it this runs
    after every lost life too. If either step ends the game, the env is reset again.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings()  # type: ignore[attr-defined]  # ALE's
        if "FIRE" not in meanings:
            raise ValueError(f"FireReset: the game has no FIRE action ({meanings}).")
        self._actions = [meanings.index("FIRE")] + ([2] if len(meanings) >= 3 else [])

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        for action in self._actions:
            obs, _, terminated, truncated, _ = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset(seed=seed, options=options)
        return obs, info


class FrameStack(gym.Wrapper):
    """The last ``k`` frames stacked on the last axis: ``(H, W)`` frames -> ``(H, W, k)``.

    Gymnasium's ``FrameStackObservation`` stacks on a new first axis; convolutions on CPU want
    channels last. Colour frames ``(H, W, 3)`` give ``(H, W, 3k)``, oldest first. A reset starts
    a new stack, padded with the reset frame (``padding="reset"``) or zeros (``"zero"``).
    """

    def __init__(self, env: gym.Env, k: int, padding: str = "reset"):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) not in (2, 3):
            raise ValueError(f"FrameStack needs image frames (H, W[, C]); got {space}.")
        h, w, c = (*space.shape, 1)[:3]
        self.k, self.padding = int(k), padding
        self.observation_space = gym.spaces.Box(0, 255, (h, w, c * self.k), space.dtype)
        self._frame_shape = (h, w, -1)  # one frame as the stack holds it
        self._frames: list[np.ndarray] = []

    def _obs(self) -> np.ndarray:
        return np.concatenate(self._frames, axis=-1)  # a new array: the frames are not shared

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        frame = obs.reshape(self._frame_shape)
        pad = frame if self.padding == "reset" else np.zeros_like(frame)
        self._frames = [pad] * (self.k - 1) + [frame]
        return self._obs(), info

    def step(self, action: Any
             ) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._frames = self._frames[1:] + [obs.reshape(self._frame_shape)]
        return self._obs(), reward, terminated, truncated, info


class ReportGames(gym.Wrapper):
    """Outermost: reports each finished game, ``metadata["game"] = True`` declaring it.

    ``info["game"] = {"r": the game's score (GameScore), "l": the policy's steps in it}`` in the
    info of the step that ended the game -- or, for a game that ended inside a reset (an
    :class:`EpisodicLife` no-op or a FIRE step, at the frame limit), whose step info a wrapper's
    reset drops, in the info of that reset (:data:`pgrad.rl.envs.vector.GAME_INFO`).
    """

    def __init__(self, env: gym.Env, score: GameScore):
        super().__init__(env)
        self.metadata = {**env.metadata, GAME_INFO: True}
        self._score, self._steps = score, 0

    def _report(self, info: dict) -> dict:
        if self._score.finished is None:
            return info
        game = {"r": float(self._score.finished), "l": int(self._steps)}
        self._score.finished = None
        return {**info, GAME_INFO: game}

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        self._steps += 1
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, self._report(info)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        info = self._report(info)
        if self._score.restarted:  # a new game (or the first): count its steps from here
            self._steps, self._score.restarted = 0, False
        return obs, info
