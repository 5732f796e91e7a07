"""The reward and credit path of reversed 2-digit addition: what each token
of a completion is paid with ``shaping`` and ``dense_rewards``, and the per-token advantages
process-supervised GRPO gives them with the per-position baseline and ``gamma=0``, against
plain Python references, for answers of 2 digits (sums < 100) and of 3 (sums >= 100)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from agents.update.targets import GroupTargets
from pgrad.rl.tokens.tasks import Addition, partial_credit


def reference_credit(answer: str, written: str, eos: bool) -> list[float]:
    """Each token's pay by hand: the partial credit of the completion so far minus that of the
    one before it (the end-of-sequence token: the final credit minus what was paid)."""
    def credit(text):
        hits = sum(c == a for c, a in zip(text, answer))
        return hits / max(len(text), len(answer))
    pay = [credit(written[:k + 1]) - credit(written[:k]) for k in range(len(written))]
    return pay + [0.0] if eos else pay


def play(env: Addition, seed: int, written: str) -> tuple[str, list[float], dict]:
    """Resets with ``seed``, writes ``written`` then the end-of-sequence token (unless the
    episode ends first at max_new_tokens); returns the answer, each step's reward and the last
    info."""
    env.reset(seed=seed)
    answer = env.prompt.columns["answer"]
    rewards, info = [], {}
    for ch in [*written, None]:
        action = env.eos_id if ch is None else env.tokenizer.encode(ch)[0]
        _, r, term, _, info = env.step(np.int64(action))
        rewards.append(r)
        if term:
            break
    return answer, rewards, info


def completions(answer: str) -> list[str]:
    """The answer, one digit short, one extra digit, a wrong first / middle digit, all wrong."""
    wrong = {c: str((int(c) + 1) % 10) for c in "0123456789"}
    return [answer, answer[:-1], answer + "1", wrong[answer[0]] + answer[1:],
            answer[0] + wrong[answer[1]] + answer[2:], "".join(wrong[c] for c in answer), ""]


def test_reversed_answers_are_the_sum_least_significant_digit_first_in_both_lengths():
    env = Addition(digits=2, shaping=True, dense_rewards=True, reverse_answer=True)
    lengths = set()
    for seed in range(300):
        env.reset(seed=seed)
        a, b = (int(x) for x in env.prompt.text[:-1].split("+"))
        assert 10 <= a <= 99 and 10 <= b <= 99
        assert env.prompt.columns["answer"] == str(a + b)[::-1]
        lengths.add(len(str(a + b)))
    assert lengths == {2, 3}
    assert env.max_new_tokens == 4  # 3 digits and the end-of-sequence token fit


def test_dense_partial_credit_pays_each_digit_its_own_share_and_the_end_token_nothing():
    env = Addition(digits=2, shaping=True, dense_rewards=True, reverse_answer=True)
    seen = set()
    for seed in range(200):
        env.reset(seed=seed)
        answer = env.prompt.columns["answer"]
        for written in completions(answer):
            got, rewards, info = play(env, seed, written)
            assert got == answer
            eos = len(written) < env.max_new_tokens
            expected = reference_credit(answer, written, eos)
            assert rewards == pytest.approx(expected, abs=1e-12), (answer, written)
            assert sum(rewards) == pytest.approx(partial_credit("", written, answer))
            assert info["is_success"] is (written == answer)
            seen.add(len(answer))
        # a right digit earns 1 / (answer length) wherever it stands; the end token after the
        # exact answer earns 0, an extra digit after it loses
        _, rewards, _ = play(env, seed, answer)
        assert rewards == pytest.approx([1 / len(answer)] * len(answer) + [0.0])
        _, extra, _ = play(env, seed, answer + "1")
        assert extra[len(answer)] < 0
    assert seen == {2, 3}


def loop_position_gamma0(rewards: np.ndarray, live: np.ndarray, G: int, eps: float = 1e-4):
    """Each live token's own reward minus the mean over its group's live tokens at the same
    position, over their sample std (+ eps); 0 where fewer than two are live."""
    T, B = rewards.shape
    adv = np.zeros((T, B))
    for g in range(B // G):
        for t in range(T):
            cols = [b for b in range(g * G, (g + 1) * G) if live[t, b]]
            if len(cols) < 2:
                continue
            here = np.array([rewards[t, b] for b in cols])
            for b in cols:
                adv[t, b] = (rewards[t, b] - here.mean()) / (here.std(ddof=1) + eps)
    return adv


@pytest.mark.parametrize("seed", [0, 3, 7])
def test_position_baseline_credits_each_addition_token_against_its_position(seed):
    """A group of completions of one prompt, laid out as the collector does ([T, B], the steps
    after an episode's end padded with the next episode's zeros): the targets part's per-token
    advantages equal the Python loop, and a right digit is credited wherever it stands."""
    env = Addition(digits=2, shaping=True, dense_rewards=True, reverse_answer=True)
    env.reset(seed=seed)
    answer = env.prompt.columns["answer"]
    group = completions(answer)  # 7 completions of the same prompt
    G, T = len(group), env.max_new_tokens
    rewards = np.zeros((T, G), np.float32)
    done = np.zeros((T, G), bool)
    for b, written in enumerate(group):
        _, paid, _ = play(env, seed, written)
        rewards[:len(paid), b] = paid
        done[len(paid) - 1, b] = True
    zeros = tf.zeros((T, G))
    adv, _, extra = GroupTargets(G, supervision="process", gamma=0.0,
                                 process_baseline="position")(
        tf.constant(rewards), tf.constant(done), tf.constant(done), zeros, zeros)
    live = extra["completion_mask"].numpy()
    for b, written in enumerate(group):
        steps = min(len(written) + 1, T)
        np.testing.assert_array_equal(live[:, b], [1.0] * steps + [0.0] * (T - steps))
    np.testing.assert_allclose(adv.numpy(), loop_position_gamma0(rewards, live, G), atol=1e-5)
    # the first digit: right in the completions that kept it, wrong in the two that changed it
    first = adv.numpy()[0]
    right = [b for b, w in enumerate(group) if w[:1] == answer[0]]
    wrong = [b for b, w in enumerate(group) if w[:1] != answer[0]]
    assert min(first[right]) > 0 > max(first[wrong])
