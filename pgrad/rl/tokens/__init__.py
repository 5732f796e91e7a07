"""Token tasks: Gymnasium envs in which a policy writes a completion token by token.

The protocol and its checks (:mod:`~pgrad.rl.tokens.protocol`), tokenizers
(:mod:`~pgrad.rl.tokens.vocab`), the generic env and the builder from prompts and reward
functions (:mod:`~pgrad.rl.tokens.env`, :mod:`~pgrad.rl.tokens.rewards`), and the shipped tasks
(:mod:`~pgrad.rl.tokens.tasks`: ``pgrad/Reversal-v0``, ``pgrad/Addition-v0``, ``pgrad/Sort-v0``).
"""

from pgrad.rl.tokens.env import Prompt, TokenTaskEnv, exact_answer, from_prompts
from pgrad.rl.tokens.protocol import (
    TokenGuard,
    TokenProtocolError,
    check_token_env,
    prompt_length,
    token_shape,
)
from pgrad.rl.tokens.rewards import RewardFunctionError, exact_match
from pgrad.rl.tokens.tasks import Addition, Reversal, Sort, partial_credit, register
from pgrad.rl.tokens.vocab import PAD_ID, CharTokenizer, HFTokenizer, Tokenizer, as_tokenizer

__all__ = [
    "PAD_ID", "Addition", "CharTokenizer", "HFTokenizer", "Prompt", "Reversal",
    "RewardFunctionError", "Sort", "TokenGuard", "TokenProtocolError", "TokenTaskEnv", "Tokenizer",
    "as_tokenizer", "check_token_env", "exact_answer", "exact_match", "from_prompts",
    "partial_credit", "prompt_length", "register", "token_shape",
]
