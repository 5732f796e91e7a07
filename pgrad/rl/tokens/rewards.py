"""Reward functions of token tasks: how they are called, and their failures as one line.

Two forms, told apart by the parameter name TRL calls by keyword:

* per sample -- ``f(prompt, completion, **columns) -> float``: the prompt's text and the
  completion's text (the tokens before the end of sequence, decoded);
* TRL's batched form -- any function with a parameter named ``completions`` (TRL's
  ``GRPOTrainer`` always passes it by that name): called as ``f(prompts=[prompt],
  completions=[completion], completion_ids=[ids], **{column: [value]})`` and returning a list
  of one number. A TRL reward function works unchanged.

``columns`` are the prompt's extra dataset columns (everything but ``prompt``, ``completion`` and
``completion_ids``, as TRL passes them); a function without ``**kwargs`` gets only the columns it
names. A value of None means "does not apply to this prompt" (TRL's convention) and counts 0.
A function that raises, or returns NaN, an infinity or no number (or weighted values whose sum
overflows), is a :class:`RewardFunctionError`: one line naming the function, the prompt (its row
index where it has one) and the completion (its first 40 characters).
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np


class Prompt(NamedTuple):
    """One prompt, as a sampler draws it."""

    text: str  # the prompt as the reward functions see it
    ids: tuple[int, ...]  # [P] its tokens, no pad (0) among them
    columns: Mapping[str, Any]  # extra columns: keyword arguments of the reward functions
    row: int | None = None  # its row in a dataset (None: a generated prompt)

    def label(self) -> str:
        """``prompt #i 'text'`` (or ``prompt 'text'``) for error messages."""
        text = self.text if len(self.text) <= 40 else self.text[:37] + "..."
        return f"prompt #{self.row} {text!r}" if self.row is not None else f"prompt {text!r}"


__all__ = ["RewardFunc", "RewardFunctionError", "as_reward_funcs", "exact_match", "score"]

#: Dataset columns never passed to reward functions (TRL's exclusions).
RESERVED = ("prompt", "completion", "completion_ids")


class RewardFunctionError(ValueError):
    """A reward function raised or returned no finite number; one line naming it and the prompt."""


class RewardFunc(NamedTuple):
    """A reward function with how it is called."""

    fn: Callable[..., Any]
    name: str  # unique among the env's reward functions (its key in info["rewards"])
    batched: bool  # TRL's form: lists in, a list out
    accepts: frozenset[str] | None  # the keyword arguments it names (None: it takes **kwargs)


def exact_match(prompt: str, completion: str, answer: Any = None) -> float:
    """1.0 where the completion is the answer (whitespace at the ends aside), else 0.0 (also
    for a prompt without an answer)."""
    return float(answer is not None and completion.strip() == str(answer).strip())


def as_reward_funcs(funcs: Any) -> tuple[RewardFunc, ...]:
    """One callable or a sequence of them, as :class:`RewardFunc` s (names made unique)."""
    items = [funcs] if callable(funcs) else list(funcs or ())
    out: list[RewardFunc] = []
    for i, fn in enumerate(items):
        if not callable(fn):
            raise TypeError(f"reward function {i}: expected a callable f(prompt, completion) "
                            f"-> float; got {type(fn).__name__}.")
        name = getattr(fn, "__name__", None) or type(fn).__name__
        taken = {r.name for r in out}
        unique, n = name, 2
        while unique in taken:
            unique, n = f"{name}_{n}", n + 1
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):  # a built-in without a signature: per sample, no columns
            out.append(RewardFunc(fn, unique, False, frozenset()))
            continue
        kinds = {p.kind for p in params.values()}
        accepts = None if inspect.Parameter.VAR_KEYWORD in kinds else frozenset(params)
        out.append(RewardFunc(fn, unique, "completions" in params, accepts))
    return tuple(out)


def score(funcs: Sequence[RewardFunc], weights: Sequence[float], prompt: Prompt,
          completion: str, completion_ids: Sequence[int]) -> tuple[float, dict[str, float]]:
    """``(sum of weight * value, {name: value})`` of the reward functions on one completion.

    Raises:
      RewardFunctionError: a function raised, or returned NaN, an infinity or no number.
    """
    columns = {k: v for k, v in prompt.columns.items() if k not in RESERVED}
    total, terms = 0.0, {}
    for rf, weight in zip(funcs, weights):
        kwargs = columns if rf.accepts is None else {
            k: v for k, v in columns.items() if k in rf.accepts}
        where = f"reward function {rf.name!r} on {prompt.label()} (completion {clip(completion)})"
        try:
            if rf.batched:
                kwargs = {k: [v] for k, v in kwargs.items()}
                if rf.accepts is None or "completion_ids" in rf.accepts:
                    kwargs["completion_ids"] = [list(completion_ids)]
                if rf.accepts is None or "prompts" in rf.accepts:
                    kwargs["prompts"] = [prompt.text]
                value = rf.fn(completions=[completion], **kwargs)
            else:
                value = rf.fn(prompt.text, completion, **kwargs)
        except Exception as err:
            text = " ".join(str(err).split()) or "(no message)"
            raise RewardFunctionError(f"{where} raised {type(err).__name__}: "
                                      f"{text[:200]}") from None
        if rf.batched:
            if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) \
                    or len(value) != 1:
                raise RewardFunctionError(f"{where}: a function with a 'completions' parameter "
                                          f"is called TRL's way and returns a list of one value "
                                          f"per completion (here 1); got {_short(value)}.")
            value = value[0]
        terms[rf.name] = _number(value, where)
        total += weight * terms[rf.name]
    if not math.isfinite(total):  # finite values, finite weights, an overflowing sum
        raise RewardFunctionError(f"the weighted sum of the reward functions on {prompt.label()} "
                                  f"(completion {clip(completion)}) is {total} ({terms}); "
                                  "rewards must be finite.")
    return total, terms


def clip(completion: str, limit: int = 40) -> str:
    """``repr`` of a completion cut to ``limit`` characters (``'abc...'``), for error lines."""
    return repr(completion if len(completion) <= limit else completion[: limit - 3] + "...")


def _number(value: Any, where: str) -> float:
    if value is None:  # TRL: the function does not apply to this prompt
        return 0.0
    if isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind in "biuf":
        value = value.item()
    if not isinstance(value, numbers.Real):  # numpy scalars are registered as Real
        raise RewardFunctionError(f"{where} returned {_short(value)}, not a number.")
    if not math.isfinite(float(value)):
        raise RewardFunctionError(f"{where} returned {float(value)}; rewards must be finite.")
    return float(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
