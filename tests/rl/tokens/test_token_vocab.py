"""Tokenizers of token tasks: the built-in characters, HF tokenizers built here (never
downloaded), and what the builder accepts as a tokenizer."""

from __future__ import annotations

import pytest

from pgrad.rl.tokens import (
    PAD_ID,
    CharTokenizer,
    HFTokenizer,
    Tokenizer,
    as_tokenizer,
    check_token_env,
    from_prompts,
)

try:
    import tokenizers
except ImportError:  # the test extra installs it
    tokenizers = None
needs_hf = pytest.mark.skipif(tokenizers is None, reason="the tokenizers package is not installed")


def test_char_tokenizer_ids_pad_eos_then_characters():
    tok = CharTokenizer("ab+")
    assert (tok.pad_id, tok.eos_id, tok.vocab_size) == (0, 1, 5)
    assert tok.encode("ba+a") == [3, 2, 4, 2]
    assert tok.decode([3, 2, 1, 0, 4]) == "ba+"  # pad and end of sequence dropped
    assert [tok.token(i) for i in range(5)] == ["<pad>", "<eos>", "a", "b", "+"]
    assert tok.decode(tok.encode("a+b+")) == "a+b+"
    assert isinstance(tok, Tokenizer)


def test_char_tokenizer_from_texts_is_sorted_and_order_free():
    assert CharTokenizer.from_texts(["ba", "c"]).alphabet == "abc"
    assert CharTokenizer.from_texts(["c", "ab"]).alphabet == "abc"


@pytest.mark.parametrize("call, fragment", [
    (lambda: CharTokenizer("01").encode("0x1"), "character 'x' at position 1 of '0x1' is not in "
                                                "the alphabet '01'"),
    (lambda: CharTokenizer("01").decode([2, 4]), "token id 4 is outside the vocabulary [0, 4)"),
    (lambda: CharTokenizer("0110"), "repeats '01'"),
    (lambda: CharTokenizer(""), "non-empty string"),
])
def test_char_tokenizer_errors_are_one_line(call, fragment):
    with pytest.raises(ValueError) as err:
        call()
    assert fragment in str(err.value) and "\n" not in str(err.value)


def _word_level():
    """A word-level tokenizer whose pad is NOT at id 0 (the adapter swaps it there)."""
    vocab = {"[UNK]": 0, "[PAD]": 1, "[EOS]": 2, "one": 3, "two": 4, "three": 5}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    return tok


@needs_hf
def test_hf_word_level_pad_swaps_to_zero():
    tok = HFTokenizer(_word_level())
    assert (tok.vocab_size, tok.pad_id, tok.eos_id) == (6, 0, 2)
    assert (tok.pad_token, tok.eos_token) == ("[PAD]", "[EOS]")
    assert tok.encode("one two") == [3, 4]
    assert tok.encode("four") == [1]  # [UNK]: HF id 0, moved to the pad's old id 1
    assert tok.decode([4, 3, 2, 0]) == "two one"  # end of sequence and pad dropped
    assert "[UNK]" in tok.decode([1])


@needs_hf
def test_hf_char_bpe_trained_here_round_trips():
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="[UNK]"))
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=30, show_progress=False,
                                             special_tokens=["[PAD]", "[EOS]", "[UNK]"])
    bpe.train_from_iterator(["12+34=46", "5+5=10", "reverse 123"], trainer)
    bpe.decoder = tokenizers.decoders.BPEDecoder()
    tok = as_tokenizer(bpe)
    assert isinstance(tok, HFTokenizer) and (tok.pad_id, tok.eos_id) == (0, 1)
    ids = tok.encode("12+34=")
    assert PAD_ID not in ids and tok.decode(ids) == "12+34="


@needs_hf
def test_hf_missing_special_tokens_are_one_line():
    plain = tokenizers.Tokenizer(tokenizers.models.WordLevel({"a": 0, "b": 1}))
    with pytest.raises(ValueError, match=r"no pad token \(\[PAD\], <pad>.*pass pad_token=") as e:
        HFTokenizer(plain)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="no end-of-sequence token \\('</s>'\\); pass eos_"):
        HFTokenizer(_word_level(), eos_token="</s>")
    with pytest.raises(ValueError, match="pad and end-of-sequence tokens must differ"):
        HFTokenizer(_word_level(), eos_token="[PAD]")
    tok = HFTokenizer(plain, pad_token="a", eos_token="b")
    with pytest.raises(ValueError, match="cannot encode 'c': WordLevel error: Missing"):
        tok.encode("c")
    with pytest.raises(TypeError, match="wraps a tokenizers.Tokenizer; got str"):
        HFTokenizer("abc")


def test_as_tokenizer_dispatch():
    assert as_tokenizer(None, ["ba", "c"]).alphabet == "abc"
    assert as_tokenizer("xy").vocab_size == 4
    char = CharTokenizer("z")
    assert as_tokenizer(char) is char

    class PadAtOne:
        vocab_size, pad_id, eos_id = 4, 1, 2

        def encode(self, text):
            return []

        def decode(self, ids):
            return ""

    with pytest.raises(ValueError, match="the pad id must be 0 .* got 1"):
        as_tokenizer(PadAtOne())
    with pytest.raises(TypeError, match="expected None, an alphabet string"):
        as_tokenizer(3)


@needs_hf
def test_builder_with_a_word_level_tokenizer():
    env = from_prompts(["one two", "two three"], answers=["two one", "three two"],
                       tokenizer=_word_level(), max_new_tokens=3)
    check_token_env(env, group_size=2, seeds=range(4))
    tok = env.tokenizer
    obs, info = env.reset(seed=0)
    answer = {"one two": "two one", "two three": "three two"}[info["prompt"]]
    for token in tok.encode(answer) + [tok.eos_id]:
        obs, reward, terminated, truncated, info = env.step(token)
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["is_success"] and info["completion"] == answer
