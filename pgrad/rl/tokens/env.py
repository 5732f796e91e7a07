"""The generic token task: prompts in, a completion written token by token, rewards at the end.

:class:`TokenTaskEnv` keeps the protocol of :mod:`pgrad.rl.tokens.protocol`: it draws a prompt
from its sampler (seeded by ``reset``'s seed, else from its own ``np_random``), appends each
action to the context, ends the episode on the end-of-sequence token (or the pad) -- terminated --
or after ``max_new_tokens`` tokens -- terminated and truncated both: the reward is paid and
nothing follows, and ``truncated`` marks the completion as cut -- and pays the reward at the end:
the weighted sum of its reward functions' values on ``(prompt text, completion text)``. The
last step's info has ``is_success``, ``prompt``, ``completion``, ``rewards`` (each function's
value by name) and ``stop`` (``"eos"`` or ``"length"``, as a completion's finish reason).

Reward functions (:mod:`pgrad.rl.tokens.rewards`) are per-sample ``f(prompt, completion,
**columns) -> float`` or TRL's batched form; :func:`from_prompts` builds this env from a list or
dataset of prompts the way TRL's ``GRPOTrainer`` takes them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from pgrad.rl.tokens.rewards import (
    Prompt,
    RewardFunctionError,
    as_reward_funcs,
    clip,
    exact_match,
    score,
)
from pgrad.rl.tokens.vocab import PAD_ID, Tokenizer, as_tokenizer

__all__ = ["Prompt", "PromptSampler", "RewardFunctionError", "TokenTaskEnv", "exact_answer",
           "from_prompts"]


#: ``sample(rng) -> Prompt``: draws one prompt with the env's ``np_random``.
PromptSampler = Callable[[np.random.Generator], Prompt]


def exact_answer(prompt: Prompt, completion: str, reward: float) -> bool:
    """The default success test: the completion is the prompt's ``answer`` column, whitespace
    at the ends aside (False where the prompt has no answer)."""
    answer = prompt.columns.get("answer")
    return answer is not None and completion.strip() == str(answer).strip()


class TokenTaskEnv(gym.Env):
    """A token task (Discrete(V) actions; Box(0, V-1, (L,), int64) context, L = max_prompt_tokens
    + max_new_tokens).

    Args:
      sample_prompt: draws a prompt from a ``np.random.Generator`` (:data:`PromptSampler`).
      reward_funcs: one reward function or a sequence (:func:`pgrad.rl.tokens.rewards.score`).
      tokenizer: a :class:`pgrad.rl.tokens.vocab.Tokenizer` (pad id 0).
      max_new_tokens: the longest completion, end-of-sequence token included.
      max_prompt_tokens: the longest prompt the sampler draws, in tokens.
      reward_weights: one weight per reward function (None: all 1).
      is_success: ``f(prompt, completion, reward) -> bool`` (default :func:`exact_answer`).
      dense_rewards: pay the reward as it accrues: each token earns the change of the
        weighted reward functions' value on the completion so far (the first token: its value
        minus the empty completion's). The episode's rewards sum to the same final value;
        process-supervised GRPO (``supervision="process"``) reads which token earned it. The
        reward functions are then called on every prefix of a completion.
    """

    metadata = {"render_modes": []}

    def __init__(self, sample_prompt: PromptSampler, reward_funcs: Any, tokenizer: Tokenizer,
                 max_new_tokens: int, max_prompt_tokens: int,
                 reward_weights: Sequence[float] | None = None,
                 is_success: Callable[[Prompt, str, float], bool] = exact_answer,
                 dense_rewards: bool = False):
        if int(max_new_tokens) < 1 or int(max_prompt_tokens) < 0:
            raise ValueError(f"TokenTaskEnv: max_new_tokens must be >= 1 and max_prompt_tokens "
                             f">= 0; got {max_new_tokens} and {max_prompt_tokens}.")
        self.sample_prompt = sample_prompt
        self.reward_funcs = as_reward_funcs(reward_funcs)
        self.reward_weights = _weights(reward_weights, len(self.reward_funcs))
        self.tokenizer = tokenizer
        self.is_success = is_success
        self.dense_rewards = bool(dense_rewards)
        self._paid = 0.0  # dense rewards: the value paid so far this episode
        self.max_new_tokens = int(max_new_tokens)
        self.max_prompt_tokens = int(max_prompt_tokens)
        self.context_len = self.max_prompt_tokens + self.max_new_tokens  # L
        self.vocab_size = int(tokenizer.vocab_size)  # V
        self.eos_id = int(tokenizer.eos_id)
        self.action_space = gym.spaces.Discrete(self.vocab_size)
        self.observation_space = gym.spaces.Box(0, self.vocab_size - 1, (self.context_len,),
                                                np.int64)
        self._context = np.zeros(self.context_len, np.int64)  # [L]
        self._prompt: Prompt | None = None
        self._generated: list[int] = []
        self._done = True

    @property
    def prompt(self) -> Prompt | None:
        """The current episode's prompt (None before the first reset)."""
        return self._prompt

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        prompt = self.sample_prompt(self.np_random)
        ids = np.asarray(prompt.ids, np.int64)
        if ids.ndim != 1 or len(ids) > self.max_prompt_tokens:
            raise ValueError(f"{type(self).__name__}: {prompt.label()} has {len(ids)} tokens, "
                             f"more than max_prompt_tokens = {self.max_prompt_tokens}.")
        if np.any((ids <= PAD_ID) | (ids >= self.vocab_size)):
            bad = int(ids[np.flatnonzero((ids <= PAD_ID) | (ids >= self.vocab_size))[0]])
            raise ValueError(f"{type(self).__name__}: {prompt.label()} holds the token id "
                             f"{bad}; prompt ids are in [1, {self.vocab_size}) (0 is the pad).")
        self._prompt = prompt
        self._generated = []
        self._done = False
        self._paid = self._value_so_far(prompt) if self.dense_rewards else 0.0
        self._context[:] = PAD_ID
        self._context[: len(ids)] = ids
        info: dict[str, Any] = {"prompt": prompt.text}
        if prompt.row is not None:
            info["prompt_index"] = prompt.row
        return self._context.copy(), info

    def step(self, action: Any):
        prompt = self._prompt
        if self._done or prompt is None:
            raise RuntimeError(f"{type(self).__name__}: step after the episode ended; call "
                               f"reset first.")
        a = np.asarray(action)
        if a.shape != () or a.dtype.kind not in "iu" or not 0 <= int(a) < self.vocab_size:
            raise ValueError(f"{type(self).__name__}: the action {action!r} at step "
                             f"{len(self._generated) + 1} is not a token id in the vocabulary "
                             f"[0, {self.vocab_size}).")
        token = int(a)
        # the context grows by the token (the pad shows as padding); [L] has room for it: an
        # episode ends once max_new_tokens tokens are written
        self._context[len(prompt.ids) + len(self._generated)] = token
        stop = None
        if token in (PAD_ID, self.eos_id):
            stop = "eos"
        else:
            self._generated.append(token)
            if len(self._generated) == self.max_new_tokens:
                stop = "length"
        if stop is None:
            if not self.dense_rewards:
                return self._context.copy(), 0.0, False, False, {}
            value = self._value_so_far(prompt)
            earned, self._paid = value - self._paid, value
            return self._context.copy(), earned, False, False, {}
        self._done = True
        completion = self.tokenizer.decode(self._generated)
        reward, terms = score(self.reward_funcs, self.reward_weights, prompt, completion,
                              self._generated)
        success = self._success(prompt, completion, reward)
        if self.dense_rewards:  # the rest of the final value; info["rewards"] keeps the terms
            reward, self._paid = reward - self._paid, reward
        info = {"is_success": success,
                "prompt": prompt.text, "completion": completion, "rewards": terms, "stop": stop}
        if prompt.row is not None:
            info["prompt_index"] = prompt.row
        return self._context.copy(), reward, True, stop == "length", info

    def _value_so_far(self, prompt: Prompt) -> float:
        """The weighted reward functions' value on the completion written so far."""
        return score(self.reward_funcs, self.reward_weights, prompt,
                     self.tokenizer.decode(self._generated), self._generated)[0]

    def _success(self, prompt: Prompt, completion: str, reward: float) -> bool:
        """``is_success(prompt, completion, reward)`` as a bool; a test that raises or gives no
        bool is a :class:`RewardFunctionError` naming it, the prompt and the completion."""
        fn = self.is_success
        where = (f"is_success function {getattr(fn, '__name__', type(fn).__name__)!r} on "
                 f"{prompt.label()} (completion {clip(completion)})")
        try:
            out = fn(prompt, completion, reward)
        except Exception as err:
            text = " ".join(str(err).split()) or "(no message)"
            raise RewardFunctionError(f"{where} raised {type(err).__name__}: "
                                      f"{text[:200]}") from None
        if not isinstance(out, (bool, np.bool_)):
            shown = repr(out) if len(repr(out)) <= 60 else repr(out)[:57] + "..."
            raise RewardFunctionError(f"{where} returned {shown}; it must return True or "
                                      "False.")
        return bool(out)


def _weights(weights: Sequence[float] | None, n: int) -> tuple[float, ...]:
    if weights is None:
        return (1.0,) * n
    out = tuple(float(w) for w in weights)
    if len(out) != n or not all(np.isfinite(out)):
        raise ValueError(f"reward_weights: one finite weight per reward function ({n}); got "
                         f"{list(weights)!r}.")
    return out


class _PromptPool:
    """Draws one of a fixed list of prompts, uniformly (with replacement)."""

    def __init__(self, prompts: Sequence[Prompt]):
        self.prompts = tuple(prompts)

    def __call__(self, rng: np.random.Generator) -> Prompt:
        return self.prompts[int(rng.integers(len(self.prompts)))]


def from_prompts(prompts: Any, reward_funcs: Any = None, tokenizer: Any = None,
                 max_new_tokens: int = 16, answers: Sequence[Any] | None = None,
                 reward_weights: Sequence[float] | None = None,
                 success_reward: float | None = None) -> TokenTaskEnv:
    """A :class:`TokenTaskEnv` over a list or dataset of prompts, as TRL's ``GRPOTrainer`` takes
    them.

    Each reset draws one prompt uniformly (with replacement) with the env's ``np_random``; the
    same seed gives the same prompt. Every prompt is tokenized here, once, so a bad row is an
    error now rather than mid-training.

    Args:
      prompts: strings, or rows with a ``"prompt"`` string and extra columns (passed to reward
        functions by name, as TRL does): a list, any iterable of them (a ``datasets.Dataset``),
        a mapping of columns (``{"prompt": [...], "answer": [...]}``) or a pandas DataFrame.
      reward_funcs: one reward function or a list (:mod:`pgrad.rl.tokens.rewards`: per sample
        ``f(prompt, completion, **columns) -> float``, or TRL's batched form). None with answers:
        :func:`~pgrad.rl.tokens.rewards.exact_match` (1 for the exact answer, else 0).
      tokenizer: None (characters: every character of the prompts and answers), an alphabet
        string, a ``tokenizers.Tokenizer`` or a :class:`~pgrad.rl.tokens.vocab.Tokenizer`.
      max_new_tokens: the longest completion, end-of-sequence token included.
      answers: one answer per prompt (the ``answer`` column; or give rows an ``answer`` column).
        With answers, ``is_success`` is the completion equal to the answer (ends' whitespace
        aside).
      reward_weights: one weight per reward function (TRL's ``reward_weights``).
      success_reward: without answers, ``is_success`` is ``reward >= success_reward`` (None:
        never a success).

    Raises:
      ValueError / TypeError: one line naming the bad prompt row, tokenizer or reward function.
    """
    rows = _rows(prompts, answers)
    answered = [r for r in rows if r.get("answer") is not None]
    texts = [r["prompt"] for r in rows] + [str(r["answer"]) for r in answered]
    tok = as_tokenizer(tokenizer, texts)
    pool = []
    for i, row in enumerate(rows):
        try:
            ids = tok.encode(row["prompt"])
        except ValueError as err:
            raise ValueError(f"prompts[{i}]: {' '.join(str(err).split())}") from None
        columns = {k: v for k, v in row.items() if k != "prompt"}
        pool.append(Prompt(row["prompt"], tuple(int(t) for t in ids), columns, i))
    if reward_funcs is None or (not callable(reward_funcs) and len(reward_funcs) == 0):
        if not answered:
            raise ValueError("from_prompts: give reward_funcs, or answers (the default reward "
                             "is then exact_match).")
        reward_funcs = [exact_match]
    if answered:
        success = exact_answer
    elif success_reward is not None:
        threshold = float(success_reward)

        def success(prompt: Prompt, completion: str, reward: float) -> bool:
            return reward >= threshold
    else:
        def success(prompt: Prompt, completion: str, reward: float) -> bool:
            return False
    return TokenTaskEnv(_PromptPool(pool), reward_funcs, tok, max_new_tokens,
                        max(len(p.ids) for p in pool), reward_weights, success)


def _rows(prompts: Any, answers: Sequence[Any] | None) -> list[dict[str, Any]]:
    """Prompts in any of :func:`from_prompts`' forms as a list of row dicts."""
    if isinstance(prompts, (str, bytes)):
        raise TypeError("from_prompts: prompts is a list (or dataset) of prompts, not one "
                        "string; wrap it: [prompt].")
    if hasattr(prompts, "to_dict") and hasattr(prompts, "columns"):  # a pandas DataFrame
        prompts = prompts.to_dict("records")
    elif isinstance(prompts, Mapping):  # columns
        if "prompt" not in prompts:
            raise ValueError(f"from_prompts: a mapping of columns needs a 'prompt' column; got "
                             f"{sorted(prompts)}.")
        names = list(prompts)
        prompts = [dict(zip(names, values)) for values in zip(*(prompts[k] for k in names))]
    try:
        items = list(prompts)
    except TypeError:
        raise TypeError(f"from_prompts: prompts must be an iterable of strings or rows; got "
                        f"{type(prompts).__name__}.") from None
    if not items:
        raise ValueError("from_prompts: no prompts.")
    rows = []
    for i, item in enumerate(items):
        row = {"prompt": item} if isinstance(item, str) else item
        if not isinstance(row, Mapping) or "prompt" not in row:
            raise TypeError(f"prompts[{i}]: expected a string or a row with a 'prompt' column; "
                            f"got {type(item).__name__}.")
        if not isinstance(row["prompt"], str):
            kind = ("conversational prompts (lists of messages) need a chat template; pass the "
                    "prompt's text" if isinstance(row["prompt"], (list, tuple)) else
                    f"got {type(row['prompt']).__name__}")
            raise TypeError(f"prompts[{i}]: the prompt must be a string; {kind}.")
        rows.append(dict(row))
    if answers is not None:
        answers = list(answers)
        if len(answers) != len(rows):
            raise ValueError(f"from_prompts: {len(answers)} answers for {len(rows)} prompts.")
        for i, (row, answer) in enumerate(zip(rows, answers)):
            if "answer" in row:
                raise ValueError(f"prompts[{i}] has an 'answer' column and answers were given "
                                 f"too; give one.")
            row["answer"] = answer
    return rows

