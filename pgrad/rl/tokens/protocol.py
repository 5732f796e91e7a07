"""The token-task protocol: an ordinary Gymnasium env in which a policy writes text token by token.

Any env that keeps these rules trains with pgrad's agents, rollouts, run directories,
evaluation and export as they are (``pgrad-train --env module:EnvId``, ``agents.make(name,
factory)``), with no other code. :func:`check_token_env` checks an env against them;
:class:`TokenGuard` checks them cheaply while an env is collected from.

Spaces (V tokens, context length L):

* ``action_space = Discrete(V)``: the next token, an id in ``[0, V)``.
* ``observation_space = Box(0, V - 1, (L,), int64)``: the context so far -- the prompt's tokens,
  then the tokens generated -- left-aligned and padded with 0 on the right. Id 0 is the pad: it
  never appears inside the context, so the context's length is the number of non-zero ids.

Episodes:

* ``reset(seed=s)`` returns the prompt, ``P`` tokens with ``0 <= P < L``. The same seed gives the
  same prompt, in this env and in any env built the same way: a group of G envs reset with one
  seed shares one prompt (group sampling, as GRPO needs). ``reset(seed=None)`` draws the next
  prompt from the env's own ``np_random``.
* Step ``k`` (1, 2, ...) appends its action: the observation is the prompt followed by the ``k``
  actions taken, then zeros. The pad (action 0) cannot be appended without breaking this rule:
  taking it ends the episode at once (the observation shows it as padding).
* The env ends the episode when the completion is over (its end-of-sequence token, its length
  limit), and at the latest when the context is full: within ``L - P`` steps. An end by the
  env's own end-of-sequence token (or the pad) is ``terminated``; an end by a length limit may
  be ``truncated`` (pgrad's :class:`~pgrad.rl.tokens.env.TokenTaskEnv` sets both flags there:
  the reward has been paid and nothing follows, so returns must not bootstrap, while
  ``truncated`` still tells the completions cut by the limit from the finished ones).
* The reward of every step is a finite number: usually 0 until the last step, which carries the
  task's reward (rewards on the way are allowed).
* At the episode's end, ``info["is_success"]`` is a bool: the answer is exactly right.
"""

from __future__ import annotations

import copy
import math
import numbers
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["TokenGuard", "TokenProtocolError", "check_token_env", "prompt_length",
           "token_shape"]


class TokenProtocolError(ValueError):
    """A token env broke the protocol; the message is one line naming the env, where, and what."""


def token_shape(env: gym.Env | gym.vector.VectorEnv | None = None, *,
                observation_space: gym.Space | None = None,
                action_space: gym.Space | None = None) -> tuple[int, int]:
    """``(L, V)`` of a token env (or of its two spaces; a vector env's single-env spaces).

    Raises:
      TokenProtocolError: the spaces are not ``Discrete(V)`` and ``Box(0, V-1, (L,), int64)``.
    """
    name = env_name(env) if env is not None else "spaces"
    if isinstance(env, gym.vector.VectorEnv):
        observation_space, action_space = env.single_observation_space, env.single_action_space
    elif env is not None:
        observation_space, action_space = env.observation_space, env.action_space
    act, obs = action_space, observation_space
    if not isinstance(act, gym.spaces.Discrete) or int(act.start) != 0:
        raise TokenProtocolError(f"token env {name}: the action space must be Discrete(V) "
                                 f"(ids from 0); got {act}.")
    vocab = int(act.n)
    if not (isinstance(obs, gym.spaces.Box) and len(obs.shape) == 1 and obs.dtype == np.int64):
        raise TokenProtocolError(f"token env {name}: the observation space must be "
                                 f"Box(0, {vocab - 1}, (L,), int64); got {obs}.")
    if not (np.all(obs.low == 0) and np.all(obs.high == vocab - 1)):
        raise TokenProtocolError(f"token env {name}: the observation space's bounds must be 0 "
                                 f"and V-1 = {vocab - 1} (V from Discrete({vocab})); got low "
                                 f"{_span(obs.low)}, high {_span(obs.high)}.")
    return int(obs.shape[0]), vocab


def prompt_length(obs: np.ndarray) -> int:
    """The context's length: the number of ids before the first pad (``L`` when full)."""
    pads = np.flatnonzero(np.asarray(obs) == 0)
    return int(pads[0]) if pads.size else int(np.shape(obs)[0])


def check_token_env(env: Any, group_size: int = 2, seeds: Sequence[int] = (0, 1, 2)) -> None:
    """Checks an env against the token-task protocol (the module docstring); None if it keeps it.

    Builds ``group_size`` envs (an id or a factory is built that many times; an env instance is
    the first, and ``gymnasium.make`` of its spec, or a deep copy made before it is used, the
    others). For each seed: the group resets with it and must show one prompt; each env runs one
    episode (even-numbered envs with random actions over the whole vocabulary, odd-numbered ones
    never taking the pad), checked step by step; the first env resets with the seed again and
    must show the prompt again. Envs it built are closed; an instance it was given is not.

    Args:
      env: a registered id, a factory returning the env, or a ``gymnasium.Env``.
      group_size: envs reset with one seed (at least 1).
      seeds: the seeds to reset with (also seed the actions taken).

    Raises:
      TokenProtocolError: one line naming the env, the seed, the env of the group, the step and
        what broke.
    """
    if int(group_size) < 1:
        raise ValueError(f"check_token_env: group_size must be >= 1; got {group_size}.")
    envs, owned = _group(env, int(group_size))
    try:
        name = env_name(envs[0])
        length, vocab = token_shape(envs[0])
        for seed in seeds:
            _check_seed(envs, name, length, vocab, int(seed))
    finally:
        for e in owned:
            e.close()


def _group(env: Any, size: int) -> tuple[list[gym.Env], list[gym.Env]]:
    if isinstance(env, gym.Env):
        spec = getattr(env, "spec", None)
        if spec is not None and getattr(spec, "id", None) in gym.registry:
            others = [gym.make(spec) for _ in range(size - 1)]
        else:
            others = [copy.deepcopy(env) for _ in range(size - 1)]
        return [env, *others], others
    if isinstance(env, str):
        from pgrad.rl.tokens import tasks  # pgrad's own ids work without register() first

        if env in tasks.IDS:
            tasks.register()
        made = [gym.make(env) for _ in range(size)]
    elif callable(env):
        made = [env() for _ in range(size)]
    else:
        raise TypeError(f"check_token_env: expected an env id, a factory or a gymnasium.Env; "
                        f"got {type(env).__name__}.")
    return made, made


def _check_seed(envs: list[gym.Env], name: str, length: int, vocab: int, seed: int) -> None:
    prompts = []
    for g, env in enumerate(envs):
        where = f"token env {name}: seed {seed}, env {g} of the group"
        obs = _check_obs(_reset(env, seed, where), length, vocab, f"{where}, reset")
        prompts.append(obs)
        first = prompts[0]
        if not np.array_equal(obs, first):
            raise TokenProtocolError(f"{where}: reset(seed={seed}) gave the prompt "
                                     f"{_ids(obs)}, env 0 of the group {_ids(first)}; one seed "
                                     f"must give one prompt.")
    for g, env in enumerate(envs):
        actions = np.random.default_rng([seed, g]).integers(g % 2, vocab, length)  # [L]
        _check_episode(env, first, actions, length, vocab,
                       f"token env {name}: seed {seed}, env {g} of the group")
    where = f"token env {name}: seed {seed}, env 0 of the group"
    again = _check_obs(_reset(envs[0], seed, where), length, vocab, f"{where}, second reset")
    if not np.array_equal(again, first):
        raise TokenProtocolError(f"{where}: a second reset(seed={seed}) gave the prompt "
                                 f"{_ids(again)}, the first {_ids(first)}; one seed must give "
                                 f"one prompt.")


def _reset(env: gym.Env, seed: int, where: str) -> Any:
    try:
        out = env.reset(seed=seed)
    except Exception as err:
        raise TokenProtocolError(f"{where}: reset(seed={seed}) raised {_one_line(err)}") from None
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict)):
        raise TokenProtocolError(f"{where}: reset must return (observation, info dict); got "
                                 f"{type(out).__name__}.")
    return out[0]


def _check_episode(env: gym.Env, prompt: np.ndarray, actions: np.ndarray, length: int,
                   vocab: int, where: str) -> None:
    obs = np.asarray(prompt)
    start = prompt_length(obs)
    if start >= length:
        raise TokenProtocolError(f"{where}, reset: the prompt fills the whole context "
                                 f"(L = {length}); no room for a completion.")
    for k in range(1, length - start + 1):
        a = int(actions[k - 1])
        at = f"{where}, step {k}"
        try:
            out = env.step(a)
        except Exception as err:
            raise TokenProtocolError(f"{at}: step({a}) raised {_one_line(err)}") from None
        if not (isinstance(out, tuple) and len(out) == 5):
            raise TokenProtocolError(f"{at}: step must return (obs, reward, terminated, "
                                     f"truncated, info); got {type(out).__name__}.")
        new, reward, terminated, truncated, info = out
        new = _check_obs(new, length, vocab, at)
        _check_reward(reward, at)
        for flag, value in (("terminated", terminated), ("truncated", truncated)):
            if not isinstance(value, (bool, np.bool_)):
                raise TokenProtocolError(f"{at}: {flag} must be a bool; got {value!r}.")
        done = bool(terminated) or bool(truncated)
        expected = obs.copy()
        if a != 0:
            expected[start + k - 1] = a
        if not np.array_equal(new, expected):
            i = int(np.flatnonzero(new != expected)[0])
            raise TokenProtocolError(f"{at}: the context must grow by exactly the action taken "
                                     f"({a}); position {i} holds {int(new[i])}, expected "
                                     f"{int(expected[i])}.")
        if a == 0 and not done:
            raise TokenProtocolError(f"{at}: the pad (action 0) was taken and the episode did "
                                     f"not end; taking the pad ends it.")
        if done:
            success = info.get("is_success") if isinstance(info, dict) else None
            if not isinstance(success, (bool, np.bool_)):
                raise TokenProtocolError(f"{at}: at the episode's end info['is_success'] must "
                                         f"be a bool; got {success!r}.")
            return
        obs = new
    raise TokenProtocolError(f"{where}, step {length - start}: the context is full (L = "
                             f"{length}, prompt {start} tokens) and the episode did not end; "
                             f"it must end within L - prompt length = {length - start} steps.")


def _check_obs(obs: Any, length: int, vocab: int, at: str) -> np.ndarray:
    if not isinstance(obs, np.ndarray) or obs.dtype != np.int64 or obs.shape != (length,):
        got = (f"{obs.dtype} {obs.shape}" if isinstance(obs, np.ndarray)
               else type(obs).__name__)
        raise TokenProtocolError(f"{at}: the observation must be an int64 array of shape "
                                 f"({length},); got {got}.")
    bad = np.flatnonzero((obs < 0) | (obs >= vocab))
    if bad.size:
        raise TokenProtocolError(f"{at}: observation position {int(bad[0])} holds "
                                 f"{int(obs[bad[0]])}, outside the vocabulary [0, {vocab}).")
    n = prompt_length(obs)
    if np.any(obs[n:] != 0):
        i = n + int(np.flatnonzero(obs[n:])[0])
        raise TokenProtocolError(f"{at}: the context must be left-aligned and padded with 0; "
                                 f"position {n} is a pad but position {i} holds "
                                 f"{int(obs[i])}.")
    return obs


def _check_reward(reward: Any, at: str) -> None:
    if not isinstance(reward, (numbers.Real, np.number)) or isinstance(reward, (bool, np.bool_)):
        raise TokenProtocolError(f"{at}: the reward must be a number; got {reward!r}.")
    if not math.isfinite(float(reward)):
        raise TokenProtocolError(f"{at}: the reward must be finite; got {float(reward)}.")


class TokenGuard(gym.Wrapper):
    """Checks a token env's steps while it is collected from; every failure is one line.

    At construction: the spaces (:func:`token_shape`), and with ``max_context`` the context
    length L against the model's (a context wider than the model is refused). At each step: the
    action is one integer id in ``[0, V)`` (checked before the env sees it), the context grew by
    it, the reward is finite, the pad ends the episode, the episode ends by the time the context
    is full, and ``info["is_success"]`` is a bool at the end. Errors name the env, the step and
    the prompt (``info["prompt_index"]`` where the env gives one). Use it by name as a wrapper:
    ``env_wrapper="pgrad.rl.tokens.protocol:TokenGuard"``.

    Args:
      env: a token env.
      max_context: the longest context the model reads (None: no limit).

    Raises:
      TokenProtocolError: the env broke the protocol.
      ValueError: an action outside the vocabulary, or a context wider than ``max_context``.
    """

    def __init__(self, env: gym.Env, max_context: int | None = None):
        super().__init__(env)
        self.name = env_name(env)
        self.context_len, self.vocab_size = token_shape(env)
        if max_context is not None and self.context_len > int(max_context):
            raise ValueError(f"token env {self.name}: its context (L = {self.context_len} "
                             f"tokens) is wider than the model's ({int(max_context)}); build "
                             f"the model with a longer context or the env with fewer tokens.")
        self._length = 0
        self._step = 0
        self._prompt = "?"

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._prompt = f"prompt #{info['prompt_index']}" if "prompt_index" in info else "prompt"
        self._step = 0
        obs = _check_obs(obs, self.context_len, self.vocab_size, self._where("reset"))
        self._length = prompt_length(obs)
        if self._length >= self.context_len:
            raise TokenProtocolError(f"{self._where('reset')}: the prompt fills the whole "
                                     f"context (L = {self.context_len}).")
        return obs, info

    def step(self, action: Any):
        self._step += 1
        a = self._token(action)
        obs, reward, terminated, truncated, info = self.env.step(a)
        at = self._where(f"step {self._step}")
        _check_reward(reward, at)
        done = bool(terminated) or bool(truncated)
        obs = np.asarray(obs)
        if a == 0 and not done:
            raise TokenProtocolError(f"{at}: the pad (action 0) was taken and the episode did "
                                     f"not end; taking the pad ends it.")
        if a != 0:
            if obs.shape != (self.context_len,) or obs[self._length] != a:
                raise TokenProtocolError(f"{at}: the context must grow by exactly the action "
                                         f"taken ({a}) at position {self._length}.")
            self._length += 1
        if not done and self._length >= self.context_len:
            raise TokenProtocolError(f"{at}: the context is full (L = {self.context_len}) and "
                                     f"the episode did not end.")
        if done and not isinstance(info.get("is_success"), (bool, np.bool_)):
            raise TokenProtocolError(f"{at}: at the episode's end info['is_success'] must be "
                                     f"a bool; got {info.get('is_success')!r}.")
        return obs, reward, terminated, truncated, info

    def _token(self, action: Any) -> int:
        a = np.asarray(action)
        if a.shape != () or a.dtype.kind not in "iu" or not 0 <= int(a) < self.vocab_size:
            raise ValueError(f"{self._where(f'step {self._step}')}: the action {action!r} is "
                             f"not a token id in the vocabulary [0, {self.vocab_size}).")
        return int(a)

    def _where(self, when: str) -> str:
        return f"token env {self.name} ({self._prompt}), {when}"


def env_name(env: Any) -> str:
    """An env's name for messages: its id, its factory's name, or its class name."""
    if isinstance(env, str):
        return env
    if isinstance(env, (gym.Env, gym.vector.VectorEnv)):
        spec = getattr(env, "spec", None)
        inner = env.unwrapped if isinstance(env, gym.Env) else env
        return getattr(spec, "id", None) or type(inner).__name__
    return getattr(env, "__name__", None) or repr(env)


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or "(no message)"
    return f"{type(err).__name__}: {text[:297] + '...' if len(text) > 300 else text}"


def _ids(obs: np.ndarray) -> list[int]:
    return [int(i) for i in obs[: prompt_length(obs)]]


def _span(values: np.ndarray) -> str:
    lo, hi = np.min(values), np.max(values)
    return str(lo) if lo == hi else f"{lo}..{hi}"
