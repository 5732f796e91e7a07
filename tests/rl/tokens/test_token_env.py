"""TokenTaskEnv and from_prompts: seeding and groups, episodes ended by EOS / pad / length, reward
functions per sample and TRL's way, every prompt form, and bad input as one line."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest
from gymnasium.utils.env_checker import check_env

from pgrad.rl.tokens import RewardFunctionError, TokenTaskEnv, exact_match, from_prompts

PROMPTS = ["ab", "ba", "aab", "bba", "abab", "b"]


def _env(**kw) -> TokenTaskEnv:
    kw.setdefault("answers", [p[::-1] for p in PROMPTS])
    kw.setdefault("max_new_tokens", 5)
    return from_prompts(PROMPTS, **kw)


def _write(env: TokenTaskEnv, text: str, eos: bool = True):
    """Steps ``text`` (and the end of sequence); returns the last step's output."""
    ids = env.tokenizer.encode(text) + ([env.tokenizer.eos_id] if eos else [])
    for k, token in enumerate(ids):
        out = env.step(token)
        assert (out[2] or out[3]) == (k == len(ids) - 1), (k, out)
    return out


def test_spaces_and_the_default_character_tokenizer():
    env = _env()
    assert env.tokenizer.alphabet == "ab"
    assert env.action_space == gym.spaces.Discrete(4)
    assert env.observation_space == gym.spaces.Box(0, 3, (4 + 5,), np.int64)  # L = P_max + new


def test_same_seed_same_prompt_in_a_group_and_seed_none_continues_the_stream():
    group = [_env() for _ in range(4)]
    for seed in range(5):
        first = [env.reset(seed=seed) for env in group]
        assert all(np.array_equal(o, first[0][0]) and i == first[0][1] for o, i in first)
    a, b = _env(), _env()
    a.reset(seed=3)
    b.reset(seed=3)
    stream_a = [a.reset()[1]["prompt_index"] for _ in range(20)]
    stream_b = [b.reset()[1]["prompt_index"] for _ in range(20)]
    assert stream_a == stream_b and len(set(stream_a)) > 1
    seen = {_env().reset(seed=s)[1]["prompt_index"] for s in range(60)}
    assert seen == set(range(len(PROMPTS)))  # every prompt drawn


def test_a_group_in_a_sync_vector_env_shares_one_prompt():
    vec = gym.vector.SyncVectorEnv([_env] * 4)
    obs, info = vec.reset(seed=[7] * 4)
    assert all(np.array_equal(row, obs[0]) for row in obs)
    assert len(set(info["prompt"])) == 1
    rng = np.random.default_rng(0)
    for _ in range(30):  # autoreset keeps stepping
        obs, reward, term, trunc, info = vec.step(rng.integers(0, 4, 4))
        assert obs.dtype == np.int64 and obs.shape == (4, 9) and np.all(np.isfinite(reward))


def test_exact_answer_wrong_answer_and_the_observation():
    env = _env()
    obs, info = env.reset(seed=0)
    prompt = info["prompt"]
    ids = env.tokenizer.encode(prompt)
    np.testing.assert_array_equal(obs, ids + [0] * (9 - len(ids)))
    obs, reward, terminated, truncated, info = _write(env, prompt[::-1])
    assert (reward, terminated, truncated, info["is_success"]) == (1.0, True, False, True)
    assert info["completion"] == prompt[::-1] and info["stop"] == "eos"
    assert info["rewards"] == {"exact_match": 1.0} and info["prompt"] == prompt
    want = ids + env.tokenizer.encode(prompt[::-1]) + [1]  # the end of sequence shows
    np.testing.assert_array_equal(obs, want + [0] * (9 - len(want)))
    env.reset(seed=0)
    _, reward, _, _, info = _write(env, prompt[::-1] + "a")
    assert (reward, info["is_success"]) == (0.0, False)


def test_the_length_limit_terminates_and_truncates_and_the_pad_stops():
    env = _env(max_new_tokens=3)
    env.reset(seed=1)
    _, reward, terminated, truncated, info = _write(env, "aaa", eos=False)
    assert (terminated, truncated, info["stop"], info["completion"]) == (True, True, "length",
                                                                          "aaa")
    obs, info = env.reset(seed=1)
    env.step(2)
    after, reward, terminated, truncated, info = env.step(0)
    assert (terminated, truncated, info["completion"]) == (True, False, "a")
    assert after[prompt_len := len(info["prompt"])] == 2 and after[prompt_len + 1] == 0
    with pytest.raises(RuntimeError, match="step after the episode ended; call reset"):
        env.step(2)
    env.reset(seed=1)
    for bad in (4, -1, 1.5, np.array([2, 3])):
        with pytest.raises(ValueError, match=r"at step 1 is not a token id in the vocabulary "
                                             r"\[0, 4\)"):
            env.step(bad)


def test_gymnasium_check_env_on_the_builder():
    check_env(_env(), skip_render_check=True)


# -- reward functions --------------------------------------------------------------------------


def test_per_sample_reward_functions_get_their_columns_and_weights():
    calls = []

    def length(prompt, completion):
        calls.append(("length", prompt, completion))
        return len(completion)

    def bonus(prompt, completion, weight):
        calls.append(("bonus", weight))
        return weight

    def everything(prompt, completion, **kwargs):
        calls.append(("everything", sorted(kwargs)))
        return None  # does not apply: counts 0

    rows = [{"prompt": "ab", "weight": 0.5, "topic": "x"}]
    env = from_prompts(rows, [length, bonus, everything], max_new_tokens=4,
                       reward_weights=[1.0, 2.0, 3.0])
    env.reset(seed=0)
    _, reward, *_, info = _write(env, "ba")
    assert reward == pytest.approx(2 * 1.0 + 0.5 * 2.0)
    assert info["rewards"] == {"length": 2.0, "bonus": 0.5, "everything": 0.0}
    assert calls == [("length", "ab", "ba"), ("bonus", 0.5), ("everything", ["topic", "weight"])]
    assert info["is_success"] is False  # no answers, no success_reward


def test_trl_style_reward_functions_are_called_with_lists():
    seen = {}

    def trl_reward(completions, answer, **kwargs):  # as TRL's GRPOTrainer calls them
        seen.update(completions=completions, answer=answer, **kwargs)
        return [float(c == a) for c, a in zip(completions, answer)]

    def named_only(prompts, completions):
        seen["named_only"] = (prompts, completions)
        return [0.25]

    env = from_prompts({"prompt": ["ab"], "answer": ["ba"]}, [trl_reward, named_only],
                       max_new_tokens=3)
    env.reset(seed=0)
    _, reward, *_, info = _write(env, "ba")
    assert reward == 1.25 and info["is_success"]
    assert seen == {"completions": ["ba"], "answer": ["ba"], "prompts": ["ab"],
                    "completion_ids": [[3, 2]], "named_only": (["ab"], ["ba"])}


@pytest.mark.parametrize("fn, fragment", [
    (lambda prompt, completion: 1 / 0, "reward function '<lambda>' on prompt #"),
    (lambda prompt, completion: 1 / 0, "raised ZeroDivisionError: division by zero"),
    (lambda prompt, completion: float("nan"), "returned nan; rewards must be finite"),
    (lambda prompt, completion: np.float32("inf"), "returned inf; rewards must be finite"),
    (lambda prompt, completion: "1", "returned '1', not a number"),
    (lambda prompts, completions: [1.0, 2.0], "returns a list of one value per completion"),
    (lambda prompts, completions: 1.0, "returns a list of one value per completion"),
])
def test_a_failing_reward_function_is_one_line_naming_it_and_the_prompt(fn, fragment):
    env = from_prompts(["ab", "ba"], fn, max_new_tokens=2)
    _, info = env.reset(seed=4)
    with pytest.raises(RewardFunctionError) as err:
        _write(env, "a")
    text = str(err.value)
    assert fragment in text and "\n" not in text, text
    assert f"prompt #{info['prompt_index']} {info['prompt']!r}" in text, text


def test_numpy_rewards_and_success_reward():
    env = from_prompts(["ab"], lambda prompt, completion: np.array(len(completion) / 2),
                       max_new_tokens=3, success_reward=1.0)
    env.reset(seed=0)
    assert _write(env, "a")[4]["is_success"] is False
    env.reset(seed=0)
    _, reward, *_, info = _write(env, "ab")
    assert reward == 1.0 and info["is_success"] is True
    assert exact_match("p", " ba ", "ba") == 1.0 and exact_match("p", "ba") == 0.0


# -- prompt forms and bad input ----------------------------------------------------------------


class _DatasetLike:
    """What a ``datasets.Dataset`` gives when iterated: row dicts (plus a length)."""

    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)


@pytest.mark.parametrize("prompts", [
    [{"prompt": "ab", "answer": "ba"}, {"prompt": "ba", "answer": "ab"}],
    {"prompt": ["ab", "ba"], "answer": ["ba", "ab"]},
    pd.DataFrame({"prompt": ["ab", "ba"], "answer": ["ba", "ab"]}),
    _DatasetLike([{"prompt": "ab", "answer": "ba"}, {"prompt": "ba", "answer": "ab"}]),
    (row for row in [{"prompt": "ab", "answer": "ba"}, {"prompt": "ba", "answer": "ab"}]),
], ids=["rows", "columns", "dataframe", "dataset", "generator"])
def test_every_prompt_form_gives_the_same_env(prompts):
    env = from_prompts(prompts, max_new_tokens=3)
    texts = sorted(p.text for p in env.sample_prompt.prompts)
    assert texts == ["ab", "ba"]
    assert all(p.columns["answer"] == p.text[::-1] for p in env.sample_prompt.prompts)
    obs, info = env.reset(seed=2)
    _, reward, *_, info = _write(env, info["prompt"][::-1])
    assert reward == 1.0 and info["is_success"]


@pytest.mark.parametrize("call, error, fragment", [
    (lambda: from_prompts("ab", exact_match), TypeError, "not one string; wrap it: [prompt]"),
    (lambda: from_prompts([], exact_match), ValueError, "no prompts"),
    (lambda: from_prompts(["ab", {"text": "x"}], exact_match), TypeError,
     "prompts[1]: expected a string or a row with a 'prompt' column; got dict"),
    (lambda: from_prompts([{"prompt": [{"role": "user", "content": "hi"}]}], exact_match),
     TypeError, "prompts[0]: the prompt must be a string; conversational prompts"),
    (lambda: from_prompts(["ab", "ba"], answers=["ba"]), ValueError, "1 answers for 2 prompts"),
    (lambda: from_prompts([{"prompt": "a", "answer": "a"}], answers=["a"]), ValueError,
     "prompts[0] has an 'answer' column and answers were given too"),
    (lambda: from_prompts(["ab"]), ValueError, "give reward_funcs, or answers"),
    (lambda: from_prompts(["ab", "ax"], exact_match, tokenizer="ab"), ValueError,
     "prompts[1]: CharTokenizer: character 'x' at position 1 of 'ax' is not in the alphabet"),
    (lambda: from_prompts(["ab"], [exact_match, 3]), TypeError, "reward function 1: expected a "
                                                                "callable"),
    (lambda: from_prompts(["ab"], exact_match, reward_weights=[1, 2]), ValueError,
     "reward_weights: one finite weight per reward function (1)"),
    (lambda: from_prompts(["ab"], exact_match, max_new_tokens=0), ValueError,
     "max_new_tokens must be >= 1"),
    (lambda: from_prompts({"text": ["a"]}, exact_match), ValueError,
     "a mapping of columns needs a 'prompt' column"),
    (lambda: from_prompts(5, exact_match), TypeError, "prompts must be an iterable"),
])
def test_bad_builder_input_is_one_line(call, error, fragment):
    with pytest.raises(error) as err:
        call()
    assert fragment in str(err.value) and "\n" not in str(err.value), str(err.value)
