"""The shipped tasks: answers checked against an independent computation from the prompt text,
partial credit on hand examples, the prompt distributions, ids and options."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from pgrad.rl.tokens import Addition, Reversal, Sort, partial_credit, register
from pgrad.rl.tokens.tasks import ALPHABET, IDS

register()


def _answer(env_id: str, prompt: str, **kw) -> str:
    """The answer computed here from the prompt text alone."""
    body = prompt[:-1]
    if env_id == "pgrad/Reversal-v0":
        return body[::-1]
    if env_id == "pgrad/Sort-v0":
        return "".join(sorted(body))
    a, b = body.split("+")
    total = str(int(a) + int(b))
    return total[::-1] if kw.get("reverse_answer") else total


def _run(env, text: str, eos: bool = True):
    ids = [ALPHABET.index(c) + 2 for c in text] + ([1] if eos else [])
    for token in ids:
        out = env.step(token)
    return out


@pytest.mark.parametrize("env_id, kw", [
    ("pgrad/Reversal-v0", {}), ("pgrad/Sort-v0", {}), ("pgrad/Addition-v0", {}),
    ("pgrad/Addition-v0", {"digits": 3, "reverse_answer": True}),
    ("pgrad/Reversal-v0", {"min_digits": 1, "max_digits": 8}),
])
def test_exact_answers_score_one_and_others_zero(env_id, kw):
    env = gym.make(env_id, **kw)
    for seed in range(25):
        _, info = env.reset(seed=seed)
        answer = _answer(env_id, info["prompt"], **kw)
        _, reward, terminated, truncated, info = _run(env, answer)
        assert (reward, info["is_success"], terminated, truncated) == (1.0, True, True, False)
        assert info["completion"] == answer
        env.reset(seed=seed)
        wrong = answer[:-1] + str((int(answer[-1]) + 1) % 10)
        _, reward, *_, info = _run(env, wrong)
        assert (reward, info["is_success"]) == (0.0, False)


def test_partial_credit_by_hand():
    assert partial_credit("", "1413", "1413") == 1.0
    assert partial_credit("", "1431", "1413") == 0.5
    assert partial_credit("", "14", "1413") == 0.5  # too short: misses two positions
    assert partial_credit("", "141300", "1413") == pytest.approx(4 / 6)  # too long
    assert partial_credit("", "", "1413") == 0.0
    assert partial_credit("", "9", "1") == 0.0


def test_shaping_rewards_partial_credit_and_exact_one():
    env = Reversal(shaping=True)
    _, info = env.reset(seed=3)
    answer = info["prompt"][:-1][::-1]
    _, reward, *_, info = _run(env, answer[0])
    assert reward == pytest.approx(1 / len(answer)) and not info["is_success"]
    assert info["rewards"] == {"partial_credit": pytest.approx(1 / len(answer))}
    env.reset(seed=3)
    assert _run(env, answer)[1] == 1.0
    env.reset(seed=3)  # never stopping: max_digits + 1 tokens, one more than any answer
    _, reward, terminated, truncated, info = _run(env, (answer + "000000")[:6], eos=False)
    assert (terminated, truncated, info["stop"]) == (True, True, "length")
    assert 0.0 < reward < 1.0 and len(info["completion"]) == 6


@pytest.mark.parametrize("cls, kw, lengths", [
    (Reversal, {}, {3, 4, 5}), (Sort, {"min_digits": 2, "max_digits": 3}, {2, 3}),
])
def test_prompt_lengths_cover_the_range(cls, kw, lengths):
    env = cls(**kw)
    seen = {len(env.reset(seed=s)[1]["prompt"]) - 1 for s in range(200)}
    assert seen == lengths


def test_addition_operands_have_exactly_n_digits():
    env = Addition(digits=3)
    for s in range(100):
        a, b = env.reset(seed=s)[1]["prompt"][:-1].split("+")
        assert len(a) == len(b) == 3 and a[0] != "0" and b[0] != "0"
    assert {int(Addition(digits=1).reset(seed=s)[1]["prompt"][0]) for s in range(200)} == set(
        range(10))


def test_ids_options_and_small_defaults():
    assert set(IDS) == {"pgrad/Reversal-v0", "pgrad/Addition-v0", "pgrad/Sort-v0"}
    for env_id in IDS:
        env = gym.make(env_id)
        length, vocab = env.observation_space.shape[0], env.action_space.n
        assert length <= 24 and vocab == 14, (env_id, length, vocab)
    assert gym.make("pgrad/Reversal-v0", max_digits=8).observation_space.shape == (18,)
    assert gym.make("pgrad/Addition-v0", digits=3).observation_space.shape == (13,)
    with pytest.raises(ValueError, match="Reversal: need 1 <= min_digits <= max_digits; got 4 "
                                         "and 3"):
        Reversal(min_digits=4, max_digits=3)
    with pytest.raises(ValueError, match="Addition: digits must be >= 1; got 0"):
        Addition(digits=0)


@pytest.mark.parametrize("cls", [Reversal, Addition, Sort])
def test_gymnasium_check_env_and_a_random_episode(cls):
    check_env(cls(), skip_render_check=True)
    env = cls()
    env.reset(seed=0)
    env.action_space.seed(0)
    for _ in range(env.observation_space.shape[0]):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert obs in env.observation_space and 0.0 <= reward <= 1.0
        if terminated or truncated:
            assert isinstance(info["is_success"], bool)
            break
    else:
        raise AssertionError("a random episode did not end within L steps")


def test_different_seeds_give_different_prompts():
    prompts = {Reversal().reset(seed=s)[1]["prompt"] for s in range(50)}
    assert len(prompts) > 40
    np.testing.assert_array_equal(Sort().reset(seed=9)[0], Sort().reset(seed=9)[0])
