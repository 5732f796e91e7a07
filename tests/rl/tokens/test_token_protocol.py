"""The token-task protocol's checker and guard: every shipped env keeps the protocol, and every
mutated copy that breaks one rule fails with one line naming the env, the step and the rule."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest

from pgrad.rl.envs.recipe import apply_wrapper
from pgrad.rl.tokens import (
    Reversal,
    TokenGuard,
    TokenProtocolError,
    check_token_env,
    from_prompts,
    prompt_length,
    register,
    token_shape,
)
from pgrad.rl.tokens.tasks import IDS

register()


@pytest.mark.parametrize("env_id", sorted(IDS))
def test_shipped_tasks_keep_the_protocol(env_id):
    check_token_env(env_id, group_size=3, seeds=range(6))  # by id
    check_token_env(lambda: gym.make(env_id, shaping=True), group_size=2)  # by factory
    check_token_env(gym.make(env_id), group_size=2)  # an instance (+ gym.make of its spec)


def test_the_builder_keeps_the_protocol():
    env = from_prompts([{"prompt": "ab", "answer": "ba"}, {"prompt": "abc", "answer": "cba"}],
                       max_new_tokens=5)
    check_token_env(env, group_size=4, seeds=range(6))  # an instance: deep copies for the group


def test_token_shape_and_prompt_length():
    assert token_shape(Reversal()) == (12, 14)
    vec = gym.vector.SyncVectorEnv([Reversal, Reversal])
    assert token_shape(vec) == (12, 14)
    assert prompt_length(np.array([3, 4, 0, 0])) == 2
    assert prompt_length(np.array([3, 4])) == 2
    assert prompt_length(np.array([0, 0])) == 0


# -- mutated copies: one rule broken each ------------------------------------------------------


class _Spaces(gym.Wrapper):
    def __init__(self, env, observation_space=None, action_space=None):
        super().__init__(env)
        if observation_space is not None:
            self.observation_space = observation_space
        if action_space is not None:
            self.action_space = action_space


class _Obs(gym.Wrapper):
    """Passes everything but changes observations with ``fn(obs, when)``."""

    def __init__(self, env, fn):
        super().__init__(env)
        self.fn = fn

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self.fn(obs, "reset"), info

    def step(self, action):
        obs, *rest = self.env.step(action)
        return (self.fn(obs, "step"), *rest)


class _Step(gym.Wrapper):
    """Passes everything but changes a step's output with ``fn(out, action) -> out``."""

    def __init__(self, env, fn):
        super().__init__(env)
        self.fn = fn

    def step(self, action):
        return self.fn(list(self.env.step(action)), action)


class _UnseededPrompts(gym.Wrapper):
    """Ignores reset's seed: each reset draws with a counter of its own."""

    count = 0

    def reset(self, *, seed=None, options=None):
        _UnseededPrompts.count += 1
        return self.env.reset(seed=1000 + _UnseededPrompts.count)


class _PadGoesOn(gym.Wrapper):
    """Takes the pad as the digit 0 (id 2) and shows the context unchanged: the episode goes on."""

    def reset(self, **kwargs):
        self.last, info = self.env.reset(**kwargs)
        return self.last, info

    def step(self, action):
        obs, *rest = self.env.step(2 if int(action) == 0 else action)
        obs, self.last = (self.last.copy() if int(action) == 0 else obs), obs
        return (obs, *rest)


class _Endless(gym.Env):
    """Appends actions while there is room and ends only on the pad."""

    def __init__(self):
        self.action_space = gym.spaces.Discrete(5)
        self.observation_space = gym.spaces.Box(0, 4, (6,), np.int64)
        self.ctx = np.zeros(6, np.int64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.ctx[:] = 0
        self.ctx[0] = 2
        self.n = 1
        return self.ctx.copy(), {}

    def step(self, action):
        if action == 0:
            return self.ctx.copy(), 0.0, True, False, {"is_success": False}
        if self.n < 6:
            self.ctx[self.n] = action
            self.n += 1
        return self.ctx.copy(), 0.0, False, False, {}


def _reward(value):
    def fn(out, action):
        out[1] = value
        return tuple(out)
    return fn


def _no_success(out, action):
    out[4] = {k: v for k, v in out[4].items() if k != "is_success"}
    return tuple(out)


def _grow_wrong(obs, when):
    obs = obs.copy()
    if when == "step":
        n = prompt_length(obs)
        obs[n - 1] = 2 if obs[n - 1] != 2 else 3  # the last token is not the action
    return obs


def _right_aligned(obs, when):
    n = prompt_length(obs)
    return np.concatenate([np.zeros(len(obs) - n, np.int64), obs[:n]])


def _raises(out, action):
    raise RuntimeError("sensor offline")


MUTANTS = [
    ("action start", lambda: _Spaces(Reversal(), action_space=gym.spaces.Discrete(14, start=1)),
     "the action space must be Discrete(V) (ids from 0); got Discrete(14, start=1)"),
    ("float obs", lambda: _Spaces(Reversal(), gym.spaces.Box(0, 13, (12,), np.float32)),
     "the observation space must be Box(0, 13, (L,), int64)"),
    ("obs high", lambda: _Spaces(Reversal(), gym.spaces.Box(0, 14, (12,), np.int64)),
     "bounds must be 0 and V-1 = 13 (V from Discrete(14)); got low 0, high 14"),
    ("unseeded", lambda: _UnseededPrompts(Reversal()),
     "env 1 of the group: reset(seed=0) gave the prompt"),
    ("right aligned", lambda: _Obs(Reversal(), _right_aligned),
     "reset: the context must be left-aligned and padded with 0"),
    ("int32 obs", lambda: _Obs(Reversal(), lambda o, w: o.astype(np.int32)),
     "reset: the observation must be an int64 array of shape (12,); got int32 (12,)"),
    ("wrong growth", lambda: _Obs(Reversal(), _grow_wrong),
     "step 1: the context must grow by exactly the action taken"),
    ("nan reward", lambda: _Step(Reversal(), _reward(float("nan"))),
     "step 1: the reward must be finite; got nan"),
    ("no success", lambda: _Step(Reversal(), _no_success),
     "at the episode's end info['is_success'] must be a bool; got None"),
    ("pad goes on", lambda: _PadGoesOn(Reversal()),
     "the pad (action 0) was taken and the episode did not end"),
    ("endless", _Endless, "step 5: the context is full (L = 6, prompt 1 tokens) and the episode "
                          "did not end; it must end within L - prompt length = 5 steps"),
    ("step raises", lambda: _Step(Reversal(), _raises),
     "step 1: step("),
]


@pytest.mark.parametrize("make, fragment", [m[1:] for m in MUTANTS], ids=[m[0] for m in MUTANTS])
def test_a_mutated_env_fails_with_one_line(make, fragment):
    with pytest.raises(TokenProtocolError) as err:
        check_token_env(make, group_size=2, seeds=range(8))
    text = str(err.value)
    assert fragment in text, text
    assert "\n" not in text
    name = "_Endless" if make is _Endless else "Reversal"
    assert text.startswith(f"token env {name}"), text


def test_an_env_that_raises_is_named_with_its_exception():
    with pytest.raises(TokenProtocolError) as err:
        check_token_env(lambda: _Step(Reversal(), _raises))
    assert re.fullmatch(r"token env Reversal: seed 0, env 0 of the group, step 1: step\(\d+\) "
                        r"raised RuntimeError: sensor offline", str(err.value)), str(err.value)


def test_the_checker_closes_the_envs_it_built_only():
    closed = []

    class Tracked(Reversal):
        def close(self):
            closed.append(self)

    given = Tracked()
    check_token_env(given, group_size=3, seeds=(0,))
    assert len(closed) == 2 and given not in closed
    with pytest.raises(ValueError, match="group_size must be >= 1"):
        check_token_env(Reversal, group_size=0)
    with pytest.raises(TypeError, match="expected an env id, a factory or a gymnasium.Env"):
        check_token_env(3)


# -- the guard ---------------------------------------------------------------------------------


def test_guard_passes_a_good_env_in_a_vector_env():
    vec = gym.vector.SyncVectorEnv([lambda: TokenGuard(Reversal())] * 3)
    vec.reset(seed=[5, 5, 5])
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(40):
        _, _, term, trunc, _ = vec.step(rng.integers(0, 14, 3))
        ended += int(np.sum(term | trunc))
    assert ended > 3
    assert isinstance(apply_wrapper(Reversal(), "pgrad.rl.tokens.protocol:TokenGuard"),
                      TokenGuard)


def test_guard_refuses_out_of_vocabulary_actions_and_wide_contexts():
    env = TokenGuard(Reversal())
    env.reset(seed=0)
    for bad in (14, -1, 2.0, np.array([3, 4])):
        with pytest.raises(ValueError, match=r"step 1: the action .* is not a token id in the "
                                             r"vocabulary \[0, 14\)"):
            env.step(bad)
        env._step = 0
    with pytest.raises(ValueError, match=r"its context \(L = 12 tokens\) is wider than the "
                                         r"model's \(8\)"):
        TokenGuard(Reversal(), max_context=8)
    TokenGuard(Reversal(), max_context=12)
    with pytest.raises(TokenProtocolError, match="observation space must be Box"):
        TokenGuard(gym.make("CartPole-v1"))


@pytest.mark.parametrize("wrap, actions, fragment", [
    (lambda e: _Step(e, _reward(float("inf"))), [3], "step 1: the reward must be finite"),
    (_PadGoesOn, [0], "step 1: the pad (action 0) was taken and the episode did not end"),
    (lambda e: _Obs(e, _grow_wrong), [3], "step 1: the context must grow by exactly the action"),
    (lambda e: _Step(e, _no_success), [3, 1], "step 2: at the episode's end info"),
    (lambda e: e, [3] * 12, None),
])
def test_guard_catches_a_broken_env_at_the_step(wrap, actions, fragment):
    env = TokenGuard(wrap(from_prompts(["ab", "ba"], answers=["ba", "ab"], max_new_tokens=3,
                                       tokenizer="ab")))
    env.reset(seed=0)
    if fragment is None:  # the good env ends within its room
        for k, a in enumerate(actions):
            *_, term, trunc, _ = env.step(a)
            if term or trunc:
                assert k == 2  # max_new_tokens = 3
                return
        raise AssertionError("the episode did not end")
    with pytest.raises(TokenProtocolError) as err:
        for a in actions:
            env.step(a)
    assert fragment in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith("token env TokenTaskEnv (prompt #"), str(err.value)
