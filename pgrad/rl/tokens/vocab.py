"""Tokenizers for token tasks: text <-> token ids, with the pad id 0 that observations pad with.

Every tokenizer here has the same small interface (:class:`Tokenizer`): ``vocab_size`` (V, the
size of the action space), ``pad_id`` (always 0: the observation pads the context with it),
``eos_id`` (the token that ends a completion), ``encode(text) -> list[int]`` (no special tokens
added) and ``decode(ids) -> str`` (pad and end-of-sequence tokens dropped).

* :class:`CharTokenizer` -- one token per character of an alphabet string: id 0 is the pad,
  id 1 the end of sequence, then the characters in the alphabet's order (``V = len(alphabet) +
  2``). Built in, no dependency.
* :class:`HFTokenizer` -- a Hugging Face ``tokenizers.Tokenizer`` (the ``tokenizers`` package,
  optional): its pad token takes id 0 and the token that had id 0 takes the pad's old id (the
  two ids swap; every other id is the tokenizer's own).

:func:`as_tokenizer` turns what a user hands the builder (None, an alphabet string, one of the
above, a ``tokenizers.Tokenizer``) into one of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["PAD_ID", "CharTokenizer", "HFTokenizer", "Tokenizer", "as_tokenizer"]

#: The pad id of every token task: observations are the context padded with it.
PAD_ID = 0

_PAD_NAMES = ("[PAD]", "<pad>", "<|pad|>", "<PAD>")
_EOS_NAMES = ("[EOS]", "</s>", "<|endoftext|>", "<eos>", "<|eos|>", "[SEP]", "<EOS>")


@runtime_checkable
class Tokenizer(Protocol):
    """What a token task needs of a tokenizer (ids are ints in ``[0, vocab_size)``)."""

    vocab_size: int
    pad_id: int  # always 0
    eos_id: int

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``, no special tokens added."""

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``; pad and end-of-sequence ids are dropped."""


class CharTokenizer:
    """One token per character: id 0 pad, id 1 end of sequence, then the alphabet in order.

    Args:
      alphabet: the characters, each once (``"0123456789+="`` gives ``V = 14``).
      pad_token, eos_token: how :meth:`token` shows the two special ids (never encoded).
    """

    pad_id = PAD_ID
    eos_id = 1

    def __init__(self, alphabet: str, pad_token: str = "<pad>", eos_token: str = "<eos>"):
        if not isinstance(alphabet, str) or not alphabet:
            raise ValueError(f"CharTokenizer: the alphabet is a non-empty string of characters; "
                             f"got {alphabet!r}.")
        repeated = sorted({c for c in alphabet if alphabet.count(c) > 1})
        if repeated:
            raise ValueError(f"CharTokenizer: the alphabet {alphabet!r} repeats "
                             f"{''.join(repeated)!r}; each character once.")
        self.alphabet = alphabet
        self.pad_token, self.eos_token = pad_token, eos_token
        self._ids = {c: i + 2 for i, c in enumerate(alphabet)}
        self.vocab_size = len(alphabet) + 2

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> CharTokenizer:
        """The tokenizer of every character in ``texts`` (sorted, so the ids do not depend on
        the order of the texts)."""
        chars = sorted(set().union(*(set(str(t)) for t in texts)))
        return cls("".join(chars))

    def encode(self, text: str) -> list[int]:
        """``[len(text)]`` ids; a character outside the alphabet is a ValueError naming it."""
        try:
            return [self._ids[c] for c in text]
        except KeyError:
            pos = next(i for i, c in enumerate(text) if c not in self._ids)
            raise ValueError(f"CharTokenizer: character {text[pos]!r} at position {pos} of "
                             f"{_short(text)!r} is not in the alphabet "
                             f"{_short(self.alphabet)!r}.") from None

    def decode(self, ids: Iterable[int]) -> str:
        """The characters of ``ids`` (pad and end of sequence dropped); an id outside
        ``[0, vocab_size)`` is a ValueError."""
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"CharTokenizer: token id {i} is outside the vocabulary "
                                 f"[0, {self.vocab_size}).")
            if i > 1:
                out.append(self.alphabet[i - 2])
        return "".join(out)

    def token(self, i: int) -> str:
        """The text of one id (the special ones by their names)."""
        return (self.pad_token, self.eos_token)[i] if i < 2 else self.alphabet[i - 2]

    def __repr__(self) -> str:
        return f"CharTokenizer({self.alphabet!r})"


class HFTokenizer:
    """A Hugging Face ``tokenizers.Tokenizer`` with the pad at id 0.

    The tokenizer's pad token and the token at id 0 swap ids (every other id is unchanged), so
    the ids this adapter gives are a permutation of the tokenizer's own.

    Args:
      tokenizer: a ``tokenizers.Tokenizer``.
      pad_token: its pad token (default: the first of ``[PAD]``, ``<pad>``, ``<|pad|>``, ``<PAD>``
        in its vocabulary).
      eos_token: its end-of-sequence token (default: the first of ``[EOS]``, ``</s>``,
        ``<|endoftext|>``, ``<eos>``, ``<|eos|>``, ``[SEP]``, ``<EOS>`` in its vocabulary).
    """

    pad_id = PAD_ID

    def __init__(self, tokenizer: Any, pad_token: str | None = None,
                 eos_token: str | None = None):
        if not _is_hf_tokenizer(tokenizer):
            raise TypeError(f"HFTokenizer wraps a tokenizers.Tokenizer; got "
                            f"{type(tokenizer).__name__}.")
        self.tokenizer = tokenizer
        self.vocab_size = int(tokenizer.get_vocab_size(with_added_tokens=True))
        self._hf_pad = self._find(pad_token, _PAD_NAMES, "pad")
        self.eos_id = self._to_ours(self._find(eos_token, _EOS_NAMES, "end-of-sequence"))
        if self.eos_id == PAD_ID:
            raise ValueError("HFTokenizer: the pad and end-of-sequence tokens must differ.")
        self.pad_token = tokenizer.id_to_token(self._hf_pad)
        self.eos_token = tokenizer.id_to_token(self._to_ours(self.eos_id))

    def _find(self, name: str | None, names: Sequence[str], what: str) -> int:
        for candidate in [name] if name is not None else names:
            i = self.tokenizer.token_to_id(candidate)
            if i is not None:
                return int(i)
        wanted = repr(name) if name is not None else ", ".join(names)
        keyword = "pad_token" if what == "pad" else "eos_token"
        raise ValueError(f"HFTokenizer: the tokenizer has no {what} token ({wanted}); pass "
                         f"{keyword}=... naming one in its vocabulary.")

    def _to_ours(self, i: int) -> int:  # the swap is its own inverse
        return PAD_ID if i == self._hf_pad else self._hf_pad if i == PAD_ID else i

    def encode(self, text: str) -> list[int]:
        """The ids of ``text`` (no special tokens added), pad at 0."""
        try:
            ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        except Exception as err:  # the Rust library's errors, e.g. a missing [UNK]
            raise ValueError(f"HFTokenizer: cannot encode {_short(text)!r}: "
                             f"{' '.join(str(err).split())}") from None
        return [self._to_ours(int(i)) for i in ids]

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids`` (pad and end of sequence dropped), by the tokenizer's decoder."""
        kept = []
        for i in ids:
            i = int(i)
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"HFTokenizer: token id {i} is outside the vocabulary "
                                 f"[0, {self.vocab_size}).")
            if i not in (PAD_ID, self.eos_id):
                kept.append(self._to_ours(i))
        return self.tokenizer.decode(kept, skip_special_tokens=False)

    def __repr__(self) -> str:
        return (f"HFTokenizer(vocab_size={self.vocab_size}, pad={self.pad_token!r}, "
                f"eos={self.eos_token!r})")


def _is_hf_tokenizer(obj: Any) -> bool:
    try:
        from tokenizers import Tokenizer as HF
    except ImportError:
        return False
    return isinstance(obj, HF)


def as_tokenizer(tokenizer: Any, texts: Iterable[str] = ()) -> Tokenizer:
    """What the builder takes as a tokenizer, as a :class:`Tokenizer`.

    Args:
      tokenizer: None (a :class:`CharTokenizer` of every character in ``texts``), an alphabet
        string (a :class:`CharTokenizer` of it), a ``tokenizers.Tokenizer`` (an
        :class:`HFTokenizer`), or anything with the :class:`Tokenizer` interface.
      texts: the texts the default alphabet is taken from (prompts and answers).

    Raises:
      TypeError: none of the above.
    """
    if tokenizer is None:
        return CharTokenizer.from_texts(texts)
    if isinstance(tokenizer, str):
        return CharTokenizer(tokenizer)
    if _is_hf_tokenizer(tokenizer):
        return HFTokenizer(tokenizer)
    if isinstance(tokenizer, Tokenizer):
        if tokenizer.pad_id != PAD_ID:
            raise ValueError(f"tokenizer {tokenizer!r}: the pad id must be {PAD_ID} (token "
                             f"tasks pad their observations with it); got {tokenizer.pad_id}.")
        return tokenizer
    raise TypeError(f"tokenizer: expected None, an alphabet string, a tokenizers.Tokenizer or "
                    f"an object with vocab_size, pad_id, eos_id, encode and decode; got "
                    f"{type(tokenizer).__name__}.")


def _short(text: str, n: int = 40) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."
