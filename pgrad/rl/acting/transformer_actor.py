"""Acting for a Transformer token policy with a key/value cache: one token per env per step.

A token policy is feed-forward (:mod:`pgrad.rl.models.token_encoder`: the observation is the
context), and :class:`pgrad.rl.acting.compiled_actor.CompiledActor` can act with it as with any
encoder, recomputing the whole context each step: ``O(L^2 d)`` per token. When the encoder is a
:class:`pgrad.rl.models.transformer.CausalTransformer`, :class:`CachedTransformerActor` keeps
each env's keys and values ``[layers, 2, B, heads, L, head_dim]`` between calls and runs one
:meth:`~pgrad.rl.models.transformer.CausalTransformer.step` per row instead, ``O(L d)``.

The cache is an acting speed-up, never a semantic state. Each call compares each row's
observation with the context the cache holds for that row: a row whose context is the cached
one plus one token is stepped; every other row (an env that started again, a first call, a
batch from elsewhere such as ``predict``) is prefilled from its observation. The features are
therefore those of the full forward pass on the observation (to float32 round-off; tested), and
the cache is dropped whenever the weights change (:meth:`sync`, :meth:`load_update_output`,
:meth:`load_flat`) or the batch size does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from pgrad.rl.acting.compiled_actor import CompiledActor
from pgrad.rl.flat_call import flat_caller
from pgrad.rl.models.networks import ActorCritic
from pgrad.rl.models.token_encoder import TokenEncoder, context_lengths, last_position_features
from pgrad.rl.models.transformer import CausalTransformer, token_ids
from pgrad.rl.observations.spaces import ObsLayout


def transformer_of(net: ActorCritic) -> CausalTransformer | None:
    """The :class:`CausalTransformer` a network's actor encodes with, or None."""
    own = getattr(net.encoder, "own", None)
    model = getattr(own, "sequence_model", None) if isinstance(own, TokenEncoder) else None
    return model if isinstance(model, CausalTransformer) else None


class CachedTransformerActor(CompiledActor):
    """:class:`CompiledActor` for a :class:`CausalTransformer` token policy, with a KV cache.

    Args:
      net: a feed-forward network whose encoder is a :class:`TokenEncoder` around a
        :class:`CausalTransformer` (:func:`transformer_of`), with a categorical head.
      layout: the observation layout (one vector part: the ``[L]`` context).

    Raises:
      ValueError: any other network.
    """

    def __init__(self, net: ActorCritic, layout: ObsLayout, jit_compile: bool | None = None):
        self._state: tuple | None = None  # (cache, ids [B, L], lengths [B]) of the last call
        #: ``[B]`` bool: the rows the last :meth:`forward` stepped (the others were prefilled).
        self.last_stepped = np.zeros(0, bool)
        model = transformer_of(net)
        if model is None or net.recurrent or net.head.uses_latent:
            raise ValueError("CachedTransformerActor acts for a feed-forward policy whose encoder "
                             "is a TokenEncoder around a CausalTransformer")
        shape = layout.parts[0].shape
        if not layout.single or len(shape) != 1 or shape[0] > model.context_length:
            raise ValueError(f"CachedTransformerActor: observations must be [N, L] contexts "
                             f"with L <= {model.context_length}; the layout has "
                             f"{[p.shape for p in layout.parts]}")
        self.model, self.length = model, int(shape[0])
        super().__init__(net, layout, jit_compile)
        cache = tf.TensorSpec(model.cache_shape, tf.float32)
        length = self.length
        fn = tf.function(self._cached, autograph=False)
        self._cached_call = flat_caller(fn.get_concrete_function(
            tf.TensorSpec([None, length], tf.float32), cache,
            tf.TensorSpec([None, length], tf.int32), tf.TensorSpec([None], tf.int32)))

    @property
    def fused_values(self) -> bool:
        net = self.net
        return net.critic is not None and net.critic_encoder is None

    def _cached(self, obs, cache, prev_ids, prev_len):
        """``(obs [B, L], cache, ids [B, L] and lengths [B] the cache holds)`` -> ``(params,
        values [B] (zeros without a shared critic), stepped [B] bool, cache, ids, lengths)``."""
        model, net = self.model, self.net
        ids = token_ids(obs)
        n = context_lengths(ids)
        last = tf.maximum(n - 1, 0)
        earlier = tf.range(self.length)[None, :] < prev_len[:, None]
        same = tf.reduce_all(~earlier | tf.equal(ids, prev_ids), axis=1)
        step = same & tf.equal(n, prev_len + 1) & (prev_len > 0)  # [B]: one token on
        token = tf.gather(ids, last, axis=1, batch_dims=1)
        feat, stepped = model.step(token, cache, last)
        fresh = tf.where(~step)[:, 0]  # rows prefilled from their observation

        def refill():
            sub = tf.gather(ids, fresh)
            feats, sub_cache = model.prefill(sub)  # [M, L, d], [layers, 2, M, H, L, hd]
            rows = fresh[:, None]
            out = tf.tensor_scatter_nd_update(feat, rows, last_position_features(feats, sub))
            by_row = tf.transpose(sub_cache, [2, 0, 1, 3, 4, 5])  # [M, layers, 2, H, L, hd]
            shape = tf.concat([tf.shape(ids, tf.int64)[:1], tf.shape(by_row, tf.int64)[1:]], 0)
            full = tf.transpose(tf.scatter_nd(rows, by_row, shape), [1, 2, 0, 3, 4, 5])
            return out, tf.where((~step)[None, None, :, None, None, None], full, stepped)

        feat, cache = tf.cond(tf.size(fresh) > 0, refill, lambda: (feat, stepped))
        params = net.actor(feat)
        values = (net.critic(feat)[:, 0] if self.fused_values  # type: ignore[misc]
                  else tf.zeros(tf.shape(feat)[:1]))
        return params, values, step, cache, ids, n

    def forward(self, obs: Any, with_value: bool = False
                ) -> tuple[np.ndarray, np.ndarray | None]:
        """Contexts ``[B, L]`` -> ``([B, param_size]``, ``[B]`` values or None)``, stepping the
        rows that continue the cached contexts and prefilling the others."""
        x = np.asarray(obs, np.float32)
        rows = x.shape[0]
        if self._state is None or int(self._state[2].shape[0]) != rows:
            self._state = (self.model.empty_cache(rows), tf.zeros([rows, x.shape[1]], tf.int32),
                           tf.zeros([rows], tf.int32))
        params, values, stepped, *state = self._cached_call(tf.constant(x), *self._state)
        self._state = tuple(state)
        self.last_stepped = stepped.numpy()
        value = None
        if with_value and self.net.critic is not None:
            value = (values.numpy() if self.fused_values
                     else self.net.value(tf.constant(x)).numpy())
        return params.numpy(), value

    def reset_cache(self) -> None:
        """Drops the cache: the next call prefills every row."""
        self._state = None

    def sync(self) -> None:
        self.reset_cache()
        super().sync()

    def load_update_output(self, out: np.ndarray) -> None:
        self.reset_cache()
        super().load_update_output(out)

    def load_flat(self, flat: np.ndarray) -> None:
        self.reset_cache()
        super().load_flat(flat)
