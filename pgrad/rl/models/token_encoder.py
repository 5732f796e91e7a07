"""A causal sequence model as a policy encoder on token observations, and per-token log-probs.

A token task observes its context so far (prompt, then generated tokens) as ``[L]`` ids,
left-aligned and padded with 0, and acts with the next token. A causal model's features at the
context's last filled position, ``number of non-pad tokens - 1``, are what the policy heads
read (:func:`last_position_features`): observation ``[N, L]`` -> features ``[N, d]`` with no
state, the context being the observation. :class:`TokenEncoder` is that encoder, around
:class:`pgrad.rl.models.transformer.CausalTransformer` or the user's own Keras causal language
model (:class:`CausalLM`: ids ``[N, L]``, or keras-hub's ``{"token_ids", "padding_mask"}``, to
features or logits ``[N, L, d]``); :func:`transformer_encoder` builds it from an observation
space as a user's own encoder (``encoder=fn(observation_space) -> keras.Model``).

At update time a whole completion's log-probs come from one forward pass over the final context
(:func:`per_token_log_probs`): the logits at position ``p`` predict token ``p + 1``, and causal
attention makes them those of the prefix ``0..p``, i.e. of the observation acting saw.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf

from pgrad.rl.models.transformer import CausalTransformer, token_ids

#: The token id that pads a context after its end.
PAD_ID = 0


def context_lengths(tokens) -> tf.Tensor:
    """``[N, L]`` left-aligned contexts padded with :data:`PAD_ID` -> ``[N]`` int32 lengths
    (the number of non-pad tokens)."""
    ids = token_ids(tokens)
    return tf.reduce_sum(tf.cast(tf.not_equal(ids, PAD_ID), tf.int32), axis=1)


def last_position_features(features: tf.Tensor, tokens) -> tf.Tensor:
    """``features [N, L, d]`` of contexts ``tokens [N, L]`` -> ``[N, d]`` at each context's last
    filled position ``context_lengths - 1`` (position 0 for an empty context)."""
    last = tf.maximum(context_lengths(tokens) - 1, 0)
    return tf.gather(features, last, axis=1, batch_dims=1)


def token_space_sizes(space: gym.Space, where: str = "the observation space") -> tuple[int, int]:
    """``(vocab_size V, context_length L)`` of a token observation space: a 1-D integer ``Box``
    with bounds ``0 .. V-1``.

    Raises:
      ValueError: any other space (naming it).
    """
    if (not isinstance(space, gym.spaces.Box) or len(space.shape) != 1
            or not np.issubdtype(space.dtype, np.integer) or np.any(space.low != 0)
            or not np.all(space.high == space.high.flat[0])):
        raise ValueError(f"a token encoder needs {where} to be a 1-D integer Box(0, V-1, (L,)) "
                         f"of token ids; got {space}")
    return int(space.high.flat[0]) + 1, int(space.shape[0])


class CausalLM(keras.layers.Layer):
    """The user's Keras causal language model as ``ids [N, L] -> [N, L, d]`` features.

    Args:
      model: maps ids ``[N, L]`` -- or a dict ``{"token_ids", "padding_mask"}`` (keras-hub's
        backbones, e.g. ``GPT2Backbone``) -- to ``[N, L, d]`` features or ``[N, L, V]`` logits.
      inputs: ``"ids"``, ``"dict"``, or ``"auto"`` (a model whose ``input`` is a dict gets the
        dict; the padding mask is ``ids != 0`` as int32).
      output_key: the entry to read when the model returns a dict.

    Raises:
      ValueError: ``inputs`` unknown, or a dict input without ``"token_ids"``.
    """

    def __init__(self, model: Any, inputs: str = "auto", output_key: str | None = None,
                 name: str = "causal_lm", **kwargs):
        super().__init__(name=name, **kwargs)
        if inputs not in ("auto", "ids", "dict"):
            raise ValueError(f"CausalLM: inputs must be 'auto', 'ids' or 'dict'; got {inputs!r}")
        spec = getattr(model, "input", None) if inputs == "auto" else None
        self.model, self.output_key = model, output_key
        self.dict_keys: tuple[str, ...] = ()
        if inputs == "dict" or isinstance(spec, dict):
            keys = tuple(spec) if isinstance(spec, dict) else ("token_ids", "padding_mask")
            if "token_ids" not in keys:
                raise ValueError(f"CausalLM: a model with dict inputs needs a 'token_ids' entry; "
                                 f"{getattr(model, 'name', model)!r} takes {sorted(keys)}")
            self.dict_keys = keys

    def call(self, tokens) -> tf.Tensor:
        """``[N, L]`` ids -> the model's ``[N, L, d]``."""
        ids = token_ids(tokens)
        if self.dict_keys:
            feed = {"token_ids": ids}
            if "padding_mask" in self.dict_keys:
                feed["padding_mask"] = tf.cast(tf.not_equal(ids, PAD_ID), tf.int32)
            out = self.model(feed)
        else:
            out = self.model(ids)
        if isinstance(out, dict):
            if self.output_key is None or self.output_key not in out:
                raise ValueError(f"CausalLM: the model returns a dict ({sorted(out)}); pass "
                                 "output_key= naming the [N, L, d] entry")
            out = out[self.output_key]
        return out


def check_causal(sequence_model: Callable, vocab_size: int, context_length: int,
                 where: str = "the sequence model") -> int:
    """Checks ``sequence_model(ids [N, L]) -> [N, L, d]`` is causal; returns ``d``.

    Two contexts that differ only at the last position must give the same features at every
    earlier one (the padding after a context's end must not reach into it).

    Raises:
      ValueError: a wrong output shape, or a position that changed (naming the first).
    """
    rng = np.random.default_rng(0)
    low = 1 if vocab_size > 2 else 0
    ids = rng.integers(low, vocab_size, (1, context_length)).astype(np.int32)
    other = ids.copy()
    other[0, -1] = low + (ids[0, -1] - low + 1) % (vocab_size - low)
    out = tf.convert_to_tensor(sequence_model(tf.constant(np.concatenate([ids, other]))))
    if out.shape.rank != 3 or out.shape[:2] != (2, context_length):
        raise ValueError(f"{where} must map ids [N, {context_length}] to [N, {context_length}, d]; "
                         f"for [2, {context_length}] it returned shape {out.shape.as_list()}")
    a, b = out.numpy()[0, :-1], out.numpy()[1, :-1]
    bad = np.where(~np.isclose(a, b, rtol=1e-4, atol=1e-5).all(axis=-1))[0]
    if bad.size:
        raise ValueError(f"{where} is not causal: its features at position {int(bad[0])} changed "
                         f"when only the token at position {context_length - 1} did")
    return int(out.shape[2])


class TokenEncoder(keras.Model):
    """Token observations ``[N, L]`` -> ``[N, d]`` features at each context's last position.

    Args:
      sequence_model: a :class:`CausalTransformer`, a :class:`CausalLM`, or any causal Keras
        model ``ids [N, L] -> [N, L, d]`` (a user's model is wrapped in :class:`CausalLM`).
      vocab_size, context_length: ``V`` and ``L`` of the observations (checked for causality
        on them).

    Raises:
      ValueError: the model is not causal or its output is not ``[N, L, d]``.
    """

    def __init__(self, sequence_model: Any, vocab_size: int, context_length: int,
                 name: str = "token_encoder", **kwargs):
        super().__init__(name=name, **kwargs)
        if not isinstance(sequence_model, (CausalTransformer, CausalLM)):
            sequence_model = CausalLM(sequence_model)
        self.sequence_model = sequence_model
        self.vocab_size, self.context_length = int(vocab_size), int(context_length)
        self.feature_dim = check_causal(sequence_model, self.vocab_size, self.context_length,
                                        f"the sequence model {sequence_model.name!r}")

    def sequence(self, tokens, training=None) -> tf.Tensor:
        """``[N, L]`` ids -> ``[N, L, d]`` features at every position."""
        return self.sequence_model(token_ids(tokens), training=training)

    def call(self, obs, training=None) -> tf.Tensor:
        """``[N, L]`` observations (ids in any numeric dtype) -> ``[N, d]``."""
        ids = token_ids(obs)
        return last_position_features(self.sequence(ids, training), ids)


def transformer_encoder(observation_space: gym.Space, d_model: int = 64, num_heads: int = 4,
                        num_layers: int = 2, context_length: int | None = None,
                        mlp_ratio: int = 4, dropout: float = 0.0, seed: int = 0,
                        ffn_dim: int | None = None) -> TokenEncoder:
    """A :class:`CausalTransformer` encoder sized from the token space (``V``, ``L``) and the
    config -- the form of ``encoder=fn(observation_space) -> keras.Model``
    (``functools.partial`` it for other sizes).

    Args:
      context_length: the model's positions (position table and KV cache); None: the
        observation's ``L``; else at least ``L``.
      ffn_dim: the MLP's hidden width; None: ``mlp_ratio * d_model``.

    Raises:
      ValueError: not a token space, ``context_length`` below ``L``, or a bad size.
    """
    vocab, length = token_space_sizes(observation_space)
    positions = length if context_length is None else int(context_length)
    if positions < length:
        raise ValueError(f"transformer_encoder: context_length {context_length} is shorter than "
                         f"the observations' {length} positions")
    model = CausalTransformer(vocab, positions, d_model, num_heads, num_layers, mlp_ratio,
                              ffn_dim=ffn_dim, dropout=dropout, seed=seed)
    return TokenEncoder(model, vocab, length)


def policy_logits_fn(net: Any) -> Callable[[tf.Tensor], tf.Tensor]:
    """``ids [N, L] -> logits [N, L, V]`` of a policy network (an ``ActorCritic`` of
    :mod:`pgrad.rl.models.networks`) whose encoder holds a :class:`TokenEncoder`: its actor
    layers on every position's features, for :func:`per_token_log_probs`. Position ``p``'s
    logits are those the policy acts with on the observation ``tokens[:p + 1]``.

    Raises:
      ValueError: the network's encoder is not a token encoder.
    """
    own = getattr(getattr(net, "encoder", None), "own", None)
    if not isinstance(own, TokenEncoder) or getattr(net, "trunk", None) is not None:
        raise ValueError("policy_logits_fn needs a policy network whose encoder is a "
                         "TokenEncoder (encoder=transformer_encoder, or TokenEncoder(your model))")

    def logits(ids):
        x = own.sequence(ids)  # [N, L, d]
        for layer in net.actor.layers:  # Dense layers, each on every position
            x = layer(x)
        return x

    return logits


def completion_mask(prompt_lengths, completion_lengths, context_length: int) -> tf.Tensor:
    """``[N, L]`` bool: the positions ``prompt .. prompt + completion - 1`` of each row."""
    pos = tf.range(context_length)[None, :]
    start = token_ids(prompt_lengths)[:, None]
    return (pos >= start) & (pos < start + token_ids(completion_lengths)[:, None])


def per_token_log_probs(logits_fn: Callable[[tf.Tensor], tf.Tensor], tokens, prompt_lengths,
                        completion_lengths) -> tf.Tensor:
    """Every generated token's log-prob from ONE forward pass over the whole context.

    Args:
      logits_fn: ``ids [N, L] -> logits [N, L, V]`` of a causal policy (e.g. the actor head on
        :meth:`TokenEncoder.sequence`); the logits at position ``p`` give token ``p + 1``.
      tokens: ``[N, L]`` prompt then completion, left-aligned, padded with 0.
      prompt_lengths: ``[N]``, ``>= 0``. An empty prompt's first token is read, as acting read
        it, from the empty context (all pad: the features at position 0): one more pass over
        one row of zeros, made unless every prompt length is known to be at least 1.
      completion_lengths: ``[N]``, ``>= 0``, with ``prompt + completion <= L``.

    Returns:
      ``[N, L]`` float32: at completion positions ``p``, ``log pi(tokens[p] | tokens[:p])``;
      0 elsewhere (:func:`completion_mask` says where).

    Raises:
      ValueError: known lengths out of range, or logits not ``[N, L, V]``.
    """
    ids = token_ids(tokens)
    length = ids.shape[1]
    prompt, completion = token_ids(prompt_lengths), token_ids(completion_lengths)
    p_val, c_val = tf.get_static_value(prompt), tf.get_static_value(completion)
    if (p_val is not None and np.any(p_val < 0)) or (c_val is not None and np.any(c_val < 0)):
        raise ValueError(f"per_token_log_probs: prompt and completion lengths must be >= 0; "
                         f"got {p_val} and {c_val}")
    if p_val is not None and c_val is not None and np.any(p_val + c_val > length):
        raise ValueError(f"per_token_log_probs: prompt + completion lengths exceed the {length} "
                         f"positions of tokens: {p_val + c_val}")
    logits = tf.convert_to_tensor(logits_fn(ids))
    if logits.shape.rank != 3:
        raise ValueError(f"per_token_log_probs: logits_fn must return [N, L, V]; got shape "
                         f"{logits.shape.as_list()}")
    log_p = tf.nn.log_softmax(logits[:, :-1])  # [N, L-1, V]: position p predicts p + 1
    taken = tf.gather(log_p, ids[:, 1:], axis=2, batch_dims=2)  # [N, L-1]
    if p_val is not None and np.all(p_val >= 1):  # position 0 is never generated
        first = tf.zeros_like(taken[:, :1])
    else:  # the empty context's logits: position 0 of a row of pads
        empty = tf.nn.log_softmax(logits_fn(tf.zeros_like(ids[:1]))[0, 0])  # [V]
        first = tf.gather(empty, ids[:, :1])  # [N, 1]
    taken = tf.concat([first, taken], axis=1)  # [N, L]: entry p is token p's log-prob
    return tf.where(completion_mask(prompt, completion, length), taken, 0.0)
