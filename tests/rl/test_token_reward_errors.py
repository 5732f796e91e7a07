"""A token task's user functions that fail: one line naming the function, the prompt index and
the completion (cut to 40 characters), through the env and through a training collector."""

from __future__ import annotations

import numpy as np
import pytest

from pgrad.rl.collection import rollout
from pgrad.rl.envs.vector import EnvError
from pgrad.rl.tokens import RewardFunctionError, TokenTaskEnv, from_prompts
from pgrad.rl.tokens.rewards import clip

PROMPTS = ["ab", "ba", "abba"]
LONG = "ab" * 30  # a completion longer than the 40 characters an error line shows


def write(env: TokenTaskEnv, text: str):
    """Steps ``text`` and the end of sequence; returns the last step's output."""
    for token in env.tokenizer.encode(text) + [env.tokenizer.eos_id]:
        out = env.step(token)
    return out


def zero_division(prompt, completion):
    return 1 / 0


def failing(fn, completion: str = "ab", **kw) -> tuple[str, dict]:
    env = from_prompts(PROMPTS, fn, max_new_tokens=64, **kw)
    _, info = env.reset(seed=3)
    with pytest.raises(RewardFunctionError) as err:
        write(env, completion)
    text = str(err.value)
    assert "\n" not in text, text
    return text, info


@pytest.mark.parametrize("fn, says", [
    (zero_division, "raised ZeroDivisionError: division by zero"),
    (lambda prompt, completion: float("nan"), "returned nan; rewards must be finite"),
    (lambda prompt, completion: -np.inf, "returned -inf; rewards must be finite"),
    (lambda prompt, completion: "0.5", "returned '0.5', not a number"),
    (lambda prompt, completion: [1.0], "returned [1.0], not a number"),
    (lambda prompt, completion: {"score": 1}, "returned {'score': 1}, not a number"),
    (lambda prompts, completions, **kw: [float("nan")], "returned nan; rewards must be finite"),
    (lambda prompts, completions, **kw: [1.0, 2.0], "returns a list of one value per completion"),
])
def test_a_failing_reward_function_names_itself_the_prompt_and_the_completion(fn, says):
    name = fn.__name__
    for completion in ("ab", LONG):
        text, info = failing(fn, completion)
        index = info["prompt_index"]
        assert text.startswith(f"reward function {name!r} on prompt #{index} "
                               f"{PROMPTS[index]!r} (completion {clip(completion)})"), text
        assert says in text, text
    assert clip(LONG) == repr(LONG[:37] + "...") and clip("ab") == "'ab'"


def test_a_long_multiline_exception_message_is_one_short_line():
    def grader(prompt, completion):
        raise RuntimeError("grader offline\n" + "x" * 500)

    text, _ = failing(grader)
    assert "raised RuntimeError: grader offline xxx" in text and len(text) < 400, text


def test_weights_that_overflow_the_sum_are_named():
    text, info = failing([lambda prompt, completion: 1e308, lambda prompt, completion: 1e308])
    assert text.startswith(f"the weighted sum of the reward functions on prompt "
                           f"#{info['prompt_index']}") and "is inf" in text, text


@pytest.mark.parametrize("success, says", [
    (lambda prompt, completion, reward: 1 / 0, "raised ZeroDivisionError"),
    (lambda prompt, completion, reward: 1, "returned 1; it must return True or False"),
    (lambda prompt, completion, reward: None, "returned None; it must return True or False"),
])
def test_a_failing_is_success_function_is_one_line(success, says):
    env = from_prompts(PROMPTS, lambda prompt, completion: 1.0, max_new_tokens=8)
    env = TokenTaskEnv(env.sample_prompt, env.reward_funcs[0].fn, env.tokenizer, 8,
                       env.max_prompt_tokens, is_success=success)
    _, info = env.reset(seed=1)
    with pytest.raises(RewardFunctionError) as err:
        write(env, "ba")
    text = str(err.value)
    assert text.startswith(f"is_success function '<lambda>' on prompt #{info['prompt_index']}"
                           f" {info['prompt']!r} (completion 'ba')") and says in text, text


def test_good_functions_still_pay():
    env = from_prompts(PROMPTS, [lambda prompt, completion: np.float32(0.5),
                                 lambda prompt, completion: None,  # TRL: does not apply -> 0
                                 lambda prompts, completions, **kw: [True]],
                       max_new_tokens=8, reward_weights=[2.0, 1.0, 1.0])
    env.reset(seed=0)
    _, reward, terminated, _, info = write(env, "ab")
    assert terminated and reward == 2.0 and list(info["rewards"].values()) == [0.5, 0.0, 1.0]


def test_through_a_training_collector_the_line_names_env_step_function_and_prompt():
    def make():
        return from_prompts(PROMPTS, zero_division, max_new_tokens=3)

    letter = make().tokenizer.encode("a")[0]
    col = rollout.Collector(rollout.make_vec_env(make, 2), "tokens")
    col.reset(seed=0)

    def policy_fn(obs):
        a = np.full(2, letter, np.int32)  # 'a' each step: the completion ends at 3 tokens
        return a, a.astype(np.int64), np.zeros(2, np.float32), None

    with pytest.raises(EnvError) as err:
        col.collect(policy_fn, 5)
    col.close()
    text = str(err.value)
    assert "\n" not in text and text.startswith("env 'tokens' failed at env step 6"), text
    assert "RewardFunctionError: reward function 'zero_division' on prompt #" in text, text
    assert "(completion 'aaa')" in text and "raised ZeroDivisionError" in text, text
