"""One causal pass per completion (pgrad.rl.models.token_rows) against each row's own pass."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

import agents
from agents.update import minibatch
from pgrad.rl.models.token_encoder import policy_logits_fn
from pgrad.rl.models.token_rows import final_contexts, is_token_policy, row_logits
from pgrad.rl.tokens import register

register()
TINY = {"num_envs": 8, "group_size": 4, "d_model": 16, "num_heads": 2, "num_layers": 1}


def rows_of_completions(rng, num, length, vocab):
    """Rows ``(ids [M, L], actions [M], sequence_ids [M])`` of ``num`` completions, each row's
    context its completion's prefix (prompt then tokens), shuffled as a masked batch is not."""
    ids, actions, seqs = [], [], []
    for s in range(num):
        prompt = rng.integers(1, vocab, rng.integers(1, 4))
        tokens = rng.integers(1, vocab, rng.integers(1, length - len(prompt) + 1))
        full = np.concatenate([prompt, tokens])
        for t in range(len(tokens)):
            ctx = np.zeros(length, np.int32)
            ctx[:len(prompt) + t] = full[:len(prompt) + t]
            ids.append(ctx)
            actions.append(tokens[t])
            seqs.append(s)
    order = rng.permutation(len(ids))
    return (np.stack(ids)[order], np.asarray(actions, np.int32)[order],
            np.asarray(seqs, np.int32)[order])


def token_agent():
    env = lambda: gym.make("pgrad/Reversal-v0", min_digits=2, max_digits=4)  # noqa: E731
    return agents.make("grpo", env, seed=0, encoder="transformer", **TINY)


def test_final_contexts_write_each_completions_last_token_after_its_longest_row():
    ids = np.array([[3, 0, 0, 0], [3, 5, 0, 0], [7, 0, 0, 0], [3, 5, 6, 2]], np.int32)
    contexts, lengths = final_contexts(tf.constant(ids), tf.constant([5, 6, 9, 4]),
                                       tf.constant([0, 0, 1, 2]))
    np.testing.assert_array_equal(contexts.numpy(), [[3, 5, 6, 0], [7, 9, 0, 0], [3, 5, 6, 2]])
    np.testing.assert_array_equal(lengths.numpy(), [1, 2, 1, 4])  # a full context keeps its


def test_row_logits_equal_each_rows_own_pass():
    agent = token_agent()
    rng = np.random.default_rng(0)
    space = gym.make("pgrad/Reversal-v0", min_digits=2, max_digits=4).observation_space
    length, vocab = space.shape[0], int(space.high[0]) + 1
    ids, actions, seqs = rows_of_completions(rng, 8, length, vocab)
    got, alone = row_logits(policy_logits_fn(agent.net), ids, actions, seqs)
    want = agent.net.params(tf.constant(ids, tf.float32))
    assert not np.any(alone.numpy())  # every row read from its completion's one pass
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    # a context that is not its completion's prefix (or an empty one) is read on its own
    s = next(s for s in range(8) if np.sum(seqs == s) > 2)
    rows = np.flatnonzero(seqs == s)
    rows = rows[np.argsort((ids[rows] > 0).sum(1))]  # shortest context first
    bad = ids.copy()
    bad[rows[0], 0] = bad[rows[0], 0] % (vocab - 1) + 1  # no longer its completion's prefix
    bad[rows[1]] = 0  # and one empty context
    got, alone = row_logits(policy_logits_fn(agent.net), bad, actions, seqs)
    assert sorted(np.flatnonzero(alone.numpy())) == sorted(rows[:2])
    want = agent.net.params(tf.constant(bad, tf.float32))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    agent.close()


@pytest.mark.parametrize("loss_type", ["dapo", "gspo"])
def test_an_update_by_completions_equals_the_update_row_by_row(loss_type, monkeypatch):
    def weights_after_two_updates(by_completion):
        monkeypatch.setattr(minibatch, "TOKEN_ROWS", by_completion)
        agent = token_agent() if loss_type == "dapo" else agents.make(
            "grpo", lambda: gym.make("pgrad/Reversal-v0", min_digits=2, max_digits=4), seed=0,
            encoder="transformer", loss_type=loss_type, epochs=2, **TINY)
        assert is_token_policy(agent.net)
        agent.step()
        agent.step()
        out = np.concatenate([v.numpy().ravel() for v in agent.net.policy_variables])
        agent.close()
        return out

    fast, slow = weights_after_two_updates(True), weights_after_two_updates(False)
    np.testing.assert_allclose(fast, slow, rtol=1e-4, atol=1e-5)
