"""Token tasks shipped with pgrad: small, exactly verifiable, registered as Gymnasium ids.

All three share one character vocabulary, :data:`ALPHABET` = ``"0123456789+="`` (V = 14: pad,
end of sequence, ten digits, ``+``, ``=``), and answer with digits then the end-of-sequence
token. ``is_success`` is the exact answer; the reward is 1 for it and 0 otherwise, or with
``shaping=True`` the partial credit of :func:`partial_credit` (still 1 exactly for the exact
answer, in [0, 1] always).

============================  =================  ==================  ============  =====
id                            prompt             answer              default L     V
============================  =================  ==================  ============  =====
``pgrad/Reversal-v0``         ``"3141="``        ``"1413"``          12 (3-5)      14
``pgrad/Addition-v0``         ``"47+85="``       ``"132"``           10 (2 + 2)    14
``pgrad/Sort-v0``             ``"3141="``        ``"1134"``          12 (3-5)      14
============================  =================  ==================  ============  =====

:func:`register` registers the ids (once); ``gymnasium.make("pgrad/Reversal-v0",
max_digits=6)`` passes options to the class.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from pgrad.rl.tokens.env import Prompt, TokenTaskEnv
from pgrad.rl.tokens.rewards import exact_match
from pgrad.rl.tokens.vocab import CharTokenizer

__all__ = ["ALPHABET", "IDS", "Addition", "Reversal", "Sort", "partial_credit", "register"]

#: The characters of every shipped task (ids 2..13; 0 pad, 1 end of sequence).
ALPHABET = "0123456789+="
#: Gymnasium id -> class name in this module.
IDS = {"pgrad/Reversal-v0": "Reversal", "pgrad/Addition-v0": "Addition",
       "pgrad/Sort-v0": "Sort"}


def partial_credit(prompt: str, completion: str, answer: Any) -> float:
    """The fraction of positions where completion and answer agree, over the longer of the two:
    ``sum_i [c_i == a_i] / max(len(c), len(a))``. 1 exactly for the exact answer; a completion
    too long or too short loses the positions it misses. In [0, 1]."""
    answer = str(answer)
    hits = sum(c == a for c, a in zip(completion, answer))
    return hits / max(len(completion), len(answer), 1)


class _DigitTask(TokenTaskEnv):
    """A task whose prompt is ``text`` and answer ``answer`` (both over :data:`ALPHABET`)."""

    def __init__(self, max_prompt_chars: int, max_answer_chars: int, shaping: bool,
                 dense_rewards: bool = False):
        self.tokenizer = CharTokenizer(ALPHABET)
        self.shaping = bool(shaping)
        super().__init__(self._sample, partial_credit if shaping else exact_match,
                         self.tokenizer, max_new_tokens=max_answer_chars + 1,
                         max_prompt_tokens=max_prompt_chars, dense_rewards=dense_rewards)

    def _sample(self, rng: np.random.Generator) -> Prompt:
        text, answer = self.draw(rng)
        return Prompt(text, tuple(self.tokenizer.encode(text)), {"answer": answer})

    def draw(self, rng: np.random.Generator) -> tuple[str, str]:
        """``(prompt text, answer text)`` drawn with ``rng``."""
        raise NotImplementedError


def _lengths(name: str, low: int, high: int) -> tuple[int, int]:
    if not 1 <= int(low) <= int(high):
        raise ValueError(f"{name}: need 1 <= min_digits <= max_digits; got {low} and {high}.")
    return int(low), int(high)


def _digits(rng: np.random.Generator, low: int, high: int) -> str:
    n = int(rng.integers(low, high + 1))
    return "".join(str(d) for d in rng.integers(0, 10, n))


class Reversal(_DigitTask):
    """Write a digit string backwards: ``"3141="`` -> ``"1413"``.

    Args:
      min_digits, max_digits: the prompt's digit count is uniform in this range (leading zeros
        allowed).
      shaping: partial credit (:func:`partial_credit`) instead of 0/1.
      dense_rewards: pay the credit as it accrues, token by token
        (:class:`~pgrad.rl.tokens.env.TokenTaskEnv`); the episode's sum is unchanged.
    """

    def __init__(self, min_digits: int = 3, max_digits: int = 5, shaping: bool = False,
                 dense_rewards: bool = False):
        self.min_digits, self.max_digits = _lengths("Reversal", min_digits, max_digits)
        super().__init__(self.max_digits + 1, self.max_digits, shaping, dense_rewards)

    def draw(self, rng: np.random.Generator) -> tuple[str, str]:
        digits = _digits(rng, self.min_digits, self.max_digits)
        return digits + "=", digits[::-1]


class Sort(_DigitTask):
    """Write a digit string's digits in ascending order: ``"3141="`` -> ``"1134"``.

    Args:
      min_digits, max_digits: the prompt's digit count is uniform in this range.
      shaping: partial credit (:func:`partial_credit`) instead of 0/1.
      dense_rewards: pay the credit as it accrues, token by token
        (:class:`~pgrad.rl.tokens.env.TokenTaskEnv`); the episode's sum is unchanged.
    """

    def __init__(self, min_digits: int = 3, max_digits: int = 5, shaping: bool = False,
                 dense_rewards: bool = False):
        self.min_digits, self.max_digits = _lengths("Sort", min_digits, max_digits)
        super().__init__(self.max_digits + 1, self.max_digits, shaping, dense_rewards)

    def draw(self, rng: np.random.Generator) -> tuple[str, str]:
        digits = _digits(rng, self.min_digits, self.max_digits)
        return digits + "=", "".join(sorted(digits))


class Addition(_DigitTask):
    """Add two ``digits``-digit numbers: ``"47+85="`` -> ``"132"``.

    Args:
      digits: each operand has exactly this many digits (no leading zero; 1: 0-9).
      shaping: partial credit (:func:`partial_credit`) instead of 0/1.
      dense_rewards: pay the credit as it accrues, token by token
        (:class:`~pgrad.rl.tokens.env.TokenTaskEnv`); the episode's sum is unchanged.
      reverse_answer: write the sum least significant digit first (``"231"``), the order in
        which carries are computed: easier for a model that writes left to right.
    """

    def __init__(self, digits: int = 2, shaping: bool = False, reverse_answer: bool = False,
                 dense_rewards: bool = False):
        if int(digits) < 1:
            raise ValueError(f"Addition: digits must be >= 1; got {digits}.")
        self.digits = int(digits)
        self.reverse_answer = bool(reverse_answer)
        super().__init__(2 * self.digits + 2, self.digits + 1, shaping, dense_rewards)

    def draw(self, rng: np.random.Generator) -> tuple[str, str]:
        low = 10 ** (self.digits - 1) if self.digits > 1 else 0
        a, b = (int(x) for x in rng.integers(low, 10 ** self.digits, 2))
        answer = str(a + b)
        return f"{a}+{b}=", answer[::-1] if self.reverse_answer else answer


def register() -> None:
    """Registers :data:`IDS` with Gymnasium (once; options go to the class as keywords)."""
    for env_id, cls in IDS.items():
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=f"{__name__}:{cls}")
