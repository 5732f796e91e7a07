"""A batch of token steps as one causal pass per completion (the GRPO family's update).

An update sees a token task's steps as rows: row ``r`` holds the context acting saw, ``ids
[L]`` (left-aligned, padded with 0), the token it chose, and the completion it belongs to
(``sequence_ids``, from :class:`agents.update.targets.GroupTargets`). Encoding each row's
context on its own costs one forward pass of ``L`` positions per generated token. A causal
model gives every token of a completion from ONE pass over the completion's final context
(prompt, then every token generated): the features at position ``p`` are those of the prefix
``0..p``, i.e. of the context row ``r`` saw when ``p = len_r - 1``.

:func:`row_logits` builds those final contexts from the rows themselves -- each completion's
longest context with its token written after it -- runs the model once over them, and reads
each row's logits at its own last position. That is exact when a row's context is a prefix of
its completion's final context (the token-task protocol: the observation is the context so
far); a row whose context is not (or is empty) gets its own context in the same pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from pgrad.rl.models.token_encoder import context_lengths
from pgrad.rl.models.transformer import token_ids


def final_contexts(ids: tf.Tensor, actions: tf.Tensor, sequence_ids: tf.Tensor
                   ) -> tuple[tf.Tensor, tf.Tensor]:
    """Each completion's final context from its rows.

    Args:
      ids: ``[M, L]`` int32 contexts, left-aligned, padded with 0.
      actions: ``[M]`` the token each row chose.
      sequence_ids: ``[M]`` int32 in ``[0, S)``, the row's completion.

    Returns:
      ``(contexts [S, L], lengths [M])``: completion ``s``'s longest row's context with that
      row's token written at its first free position (dropped when the context is full); and
      each row's context length. A completion without rows gets an all-pad context.
    """
    lengths = context_lengths(ids)  # [M]
    rows = tf.shape(ids, out_type=tf.int64)[0]
    num = tf.reduce_max(sequence_ids) + 1
    # the longest row of each completion: max of (length, row) packed into one int64 key
    key = tf.cast(lengths, tf.int64) * rows + tf.range(rows, dtype=tf.int64)
    best = tf.math.unsorted_segment_max(key, sequence_ids, num)  # [S]; empty: the dtype's min
    present = best >= 0
    last = tf.cast(tf.where(present, best % tf.maximum(rows, 1), 0), tf.int32)  # [S] row
    contexts = tf.gather(ids, last)  # [S, L]
    end = tf.gather(lengths, last)  # [S] its first free position
    token = tf.cast(tf.gather(actions, last), tf.int32)
    pos = tf.range(tf.shape(ids)[1])[None, :]
    contexts = tf.where(pos == end[:, None], token[:, None], contexts)
    return tf.where(present[:, None], contexts, 0), lengths


def row_logits(logits_fn: Callable[[tf.Tensor], tf.Tensor], tokens, actions, sequence_ids
               ) -> tuple[tf.Tensor, tf.Tensor]:
    """Every row's next-token logits from one causal pass per completion, exactly.

    Args:
      logits_fn: ``ids [N, L] -> logits [N, L, V]`` of a causal policy
        (:func:`pgrad.rl.models.token_encoder.policy_logits_fn`).
      tokens: ``[M, L]`` each row's context (ids in any numeric dtype).
      actions: ``[M]`` each row's token.
      sequence_ids: ``[M]`` each row's completion, ``0 <= id < S``.

    Returns:
      ``(logits [M, V], alone [M] bool)``: the logits acting computed for each row. A row whose
      context is non-empty and a prefix of its completion's final context reads them at
      position ``len_r - 1`` of that context; any other row (``alone``: a context the env did
      not build by appending tokens, or an empty one) gets its own context in the same pass,
      read as acting read it.
    """
    ids = token_ids(tokens)
    seq = token_ids(sequence_ids)
    contexts, lengths = final_contexts(ids, actions, seq)
    pos = tf.range(tf.shape(ids)[1])[None, :]
    prefix = tf.where(pos < lengths[:, None], tf.gather(contexts, seq), 0)  # [M, L]
    alone = tf.logical_not(tf.logical_and(tf.reduce_all(tf.equal(prefix, ids), axis=1),
                                          lengths >= 1))
    own = tf.boolean_mask(ids, alone)  # [K, L], usually K = 0
    slot = tf.where(alone, tf.shape(contexts)[0] + tf.cumsum(tf.cast(alone, tf.int32)) - 1,
                    seq)
    logits = logits_fn(tf.concat([contexts, own], axis=0))  # [S + K, L, V]
    at = tf.stack([slot, tf.maximum(lengths - 1, 0)], axis=1)  # [M, 2]
    return tf.gather_nd(logits, at), alone


def token_row_log_prob_fn(net: Any, head: Any) -> Callable[..., tuple[tf.Tensor, dict]]:
    """``fn(obs [M, L], actions [M], sequence_ids [M]) -> ([M] log-probs, {"entropy": [M]})``
    of a token policy, from one causal pass per completion (:func:`row_logits`).

    Args:
      net: an ``ActorCritic`` whose encoder is a :class:`~pgrad.rl.models.token_encoder.
        TokenEncoder` (:func:`~pgrad.rl.models.token_encoder.policy_logits_fn` checks it).
      head: its action head (``log_prob_and_entropy(params, actions, mask)``).
    """
    from pgrad.rl.models.token_encoder import policy_logits_fn

    logits_fn = policy_logits_fn(net)

    def fn(obs, actions, sequence_ids):
        logits = row_logits(logits_fn, obs, actions, sequence_ids)[0]
        log_prob, entropy = head.log_prob_and_entropy(logits, actions, None)
        return log_prob, {"entropy": entropy}

    return fn


def is_token_policy(net: Any) -> bool:
    """The network acts on token contexts through a causal
    :class:`~pgrad.rl.models.token_encoder.TokenEncoder` and nothing between it and the actor
    (feed-forward: the context is the observation)."""
    from pgrad.rl.models.token_encoder import TokenEncoder

    own = getattr(getattr(net, "encoder", None), "own", None)
    return (isinstance(own, TokenEncoder) and getattr(net, "trunk", None) is None
            and not getattr(net, "recurrent", False))
