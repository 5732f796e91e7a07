"""A causal Transformer over token contexts, with a key/value cache for acting token by token.

:class:`CausalTransformer` maps token ids ``[N, P]`` (``P <= L``, the context length) to
features ``[N, P, d_model]``: token + learned position embeddings, ``num_layers`` pre-norm blocks
and a final LayerNorm (GPT-2's layout)::

    x = tok[ids] + pos[0..P-1]
    x = x + Wo attn(LN1(x))            # causal multi-head self-attention
    x = x + W2 gelu(W1 LN2(x))         # the MLP, ffn_dim = mlp_ratio * d_model
    features = LN(x)

Position ``p`` reads positions ``0..p`` only, so the zeros padding a left-aligned context after
its end cannot change the features of the context itself.

Acting generates one token per env step. The full forward pass costs ``O(L^2 d)`` per token;
with a cache of every layer's keys and values, ``[layers, 2, N, heads, L, head_dim]`` float32,
one step costs ``O(L d)``: :meth:`CausalTransformer.prefill` computes the cache of a prompt,
:meth:`CausalTransformer.step` reads one token per row at that row's own position, writes its
keys and values there, and attends to positions ``<= pos`` only (what lies beyond, stale or
zero, is masked out). Both have fixed shapes, so they trace once inside a ``tf.function``. The
cache is a speed-up, not a state: the features equal the full forward pass's to float32
round-off (tested), and a row whose env starts again is simply prefilled again.

Every weight sits in a Keras ``Dense``, ``Embedding`` or ``LayerNormalization`` layer, so the
engine's per-layer taps (:mod:`pgrad.core.taps`) give exact per-step gradients from one batched
pass; attention itself has no weights.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

#: Added to the attention scores of masked positions: ``exp`` of it is exactly 0 in float32.
MASKED = -1e9


def _positive(name: str, value, where: str) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) < 1:
        raise ValueError(f"{where}: {name} must be a positive integer; got {value!r}")
    return int(value)


def token_ids(tokens) -> tf.Tensor:
    """Token ids as int32 (observations arrive as float32 from the flat preprocessing, exact
    for ids below 2**24)."""
    tokens = tf.convert_to_tensor(tokens)
    return tokens if tokens.dtype == tf.int32 else tf.cast(tokens, tf.int32)


def _dense(units: int, seed: int, std: float, name: str, activation=None) -> keras.layers.Dense:
    return keras.layers.Dense(units, activation=activation, name=name,
                              kernel_initializer=keras.initializers.RandomNormal(0.0, std, seed))


class CausalBlock(keras.layers.Layer):
    """One pre-norm block on ``[N, P, d]``: ``x + attn(LN1(x))``, then ``x + mlp(LN2(x))``.

    Args:
      d_model, num_heads, ffn_dim: widths (``d_model`` divisible by ``num_heads``).
      dropout: on the attention weights and each residual branch, in training only.
      num_layers: of the whole model: the residual output projections start at GPT-2's
        ``0.02 / sqrt(2 num_layers)``.
      seed: initialiser seed.
    """

    def __init__(self, d_model: int, num_heads: int, ffn_dim: int, dropout: float = 0.0,
                 num_layers: int = 1, seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.num_heads = d_model, num_heads
        self.head_dim = d_model // num_heads
        out_std = 0.02 / math.sqrt(2 * num_layers)
        self.norm1 = keras.layers.LayerNormalization(epsilon=1e-5, name="norm1")
        self.qkv = _dense(3 * d_model, seed, 0.02, "qkv")
        self.proj = _dense(d_model, seed + 1, out_std, "proj")
        self.norm2 = keras.layers.LayerNormalization(epsilon=1e-5, name="norm2")
        self.fc1 = _dense(ffn_dim, seed + 2, 0.02, "fc1", activation="gelu")
        self.fc2 = _dense(d_model, seed + 3, out_std, "fc2")
        self.drop = keras.layers.Dropout(dropout)

    def build(self, input_shape):
        d = self.d_model
        self.norm1.build((None, None, d))
        self.qkv.build((None, None, d))
        self.proj.build((None, None, d))
        self.norm2.build((None, None, d))
        self.fc1.build((None, None, d))
        self.fc2.build((None, None, self.fc1.units))
        self.built = True

    def _heads(self, x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """``[N, ..., d]`` normalised input -> ``q, k, v`` each ``[N, ..., heads, head_dim]``."""
        qkv = self.qkv(x)  # [N, ..., 3 d]
        shape = tf.concat([tf.shape(qkv)[:-1], [3, self.num_heads, self.head_dim]], 0)
        qkv = tf.reshape(qkv, shape)
        return qkv[..., 0, :, :], qkv[..., 1, :, :], qkv[..., 2, :, :]

    def _mlp(self, x: tf.Tensor, training) -> tf.Tensor:
        return x + self.drop(self.fc2(self.fc1(self.norm2(x))), training=training)

    def call(self, x: tf.Tensor, training=None) -> tf.Tensor:
        """``[N, P, d] -> [N, P, d]`` with causal attention."""
        return self.forward(x, training)[0]

    def forward(self, x: tf.Tensor, training=None) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """``[N, P, d]`` -> ``(out [N, P, d], k [N, heads, P, head_dim], v [same])``."""
        q, k, v = self._heads(self.norm1(x))  # [N, P, H, hd] each
        q, k, v = (tf.transpose(t, [0, 2, 1, 3]) for t in (q, k, v))  # [N, H, P, hd]
        scores = tf.einsum("nhqd,nhkd->nhqk", q, k) / math.sqrt(self.head_dim)
        length = tf.shape(x)[1]
        causal = tf.range(length)[None, :] <= tf.range(length)[:, None]  # [P(q), P(k)]
        scores = tf.where(causal, scores, MASKED)
        weights = self.drop(tf.nn.softmax(scores, axis=-1), training=training)
        att = tf.transpose(tf.einsum("nhqk,nhkd->nhqd", weights, v), [0, 2, 1, 3])  # [N,P,H,hd]
        att = tf.reshape(att, tf.concat([tf.shape(x)[:2], [self.d_model]], 0))
        if x.shape[1] is not None:  # keep the length static: the Dense taps need it
            att = tf.ensure_shape(att, [None, x.shape[1], self.d_model])
        x = x + self.drop(self.proj(att), training=training)
        return self._mlp(x, training), k, v

    def step(self, x: tf.Tensor, k_cache: tf.Tensor, v_cache: tf.Tensor, pos: tf.Tensor
             ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """One position per row: ``x [N, d]`` at ``pos [N]`` int32, caches ``[N, H, L, hd]``
        -> ``(out [N, d], k_cache, v_cache)`` with this position's keys and values written."""
        q, k, v = self._heads(self.norm1(x))  # [N, H, hd]
        length = tf.shape(k_cache)[2]
        at = tf.range(length)[None, :] == pos[:, None]  # [N, L]
        here = at[:, None, :, None]
        k_cache = tf.where(here, k[:, :, None, :], k_cache)
        v_cache = tf.where(here, v[:, :, None, :], v_cache)
        scores = tf.einsum("nhd,nhkd->nhk", q, k_cache) / math.sqrt(self.head_dim)  # [N, H, L]
        seen = tf.range(length)[None, :] <= pos[:, None]  # [N, L]
        scores = tf.where(seen[:, None, :], scores, MASKED)
        att = tf.einsum("nhk,nhkd->nhd", tf.nn.softmax(scores, axis=-1), v_cache)
        x = x + self.proj(tf.reshape(att, [-1, self.d_model]))
        return self._mlp(x, False), k_cache, v_cache


class CausalTransformer(keras.Model):
    """Token ids ``[N, P]`` (``P <= context_length``) -> features ``[N, P, d_model]``.

    Args:
      vocab_size: ``V``, token ids in ``[0, V)`` (0 is the padding id of the token envs).
      context_length: ``L``, the most positions (the size of the position table and cache).
      d_model, num_heads, num_layers: widths and depth (``d_model`` divisible by
        ``num_heads``).
      mlp_ratio: the MLP's hidden width is ``mlp_ratio * d_model`` unless ``ffn_dim`` is given.
      dropout: rate on embeddings, attention weights and residual branches (training only).
      seed: initialiser seed (GPT-2's: normal 0.02, residual projections 0.02/sqrt(2 layers),
        zero biases, unit LayerNorms).

    Raises:
      ValueError: a size that is not a positive integer, ``d_model`` not divisible by
        ``num_heads``, or ``dropout`` outside ``[0, 1)``.
    """

    def __init__(self, vocab_size: int, context_length: int, d_model: int = 64,
                 num_heads: int = 4, num_layers: int = 2, mlp_ratio: int = 4,
                 ffn_dim: int | None = None, dropout: float = 0.0, seed: int = 0,
                 name: str = "transformer", **kwargs):
        super().__init__(name=name, **kwargs)
        where = "CausalTransformer"
        self.vocab_size = _positive("vocab_size", vocab_size, where)
        self.context_length = _positive("context_length", context_length, where)
        self.d_model = _positive("d_model", d_model, where)
        self.num_heads = _positive("num_heads", num_heads, where)
        self.num_layers = _positive("num_layers", num_layers, where)
        ffn = ffn_dim if ffn_dim is not None else _positive("mlp_ratio", mlp_ratio, where) * d_model
        self.ffn_dim = _positive("ffn_dim", ffn, where)
        if self.d_model % self.num_heads:
            raise ValueError(f"{where}: d_model ({d_model}) must be divisible by num_heads "
                             f"({num_heads})")
        if not 0.0 <= float(dropout) < 1.0:
            raise ValueError(f"{where}: dropout must be in [0, 1); got {dropout!r}")
        self.head_dim = self.d_model // self.num_heads
        normal = keras.initializers.RandomNormal
        self.token_embedding = keras.layers.Embedding(
            self.vocab_size, self.d_model, embeddings_initializer=normal(0.0, 0.02, seed),
            name="token_embedding")
        self.position_embedding = keras.layers.Embedding(
            self.context_length, self.d_model, embeddings_initializer=normal(0.0, 0.01, seed + 1),
            name="position_embedding")
        self.blocks = [CausalBlock(self.d_model, self.num_heads, self.ffn_dim, float(dropout),
                                   self.num_layers, seed + 10 * (i + 1), name=f"block{i}")
                       for i in range(self.num_layers)]
        self.final_norm = keras.layers.LayerNormalization(epsilon=1e-5, name="final_norm")
        self.drop = keras.layers.Dropout(float(dropout))
        self(tf.zeros([1, self.context_length], tf.int32))  # builds every weight

    @property
    def cache_shape(self) -> tuple:
        """``(layers, 2, N, heads, L, head_dim)`` with ``N`` open (None)."""
        return (self.num_layers, 2, None, self.num_heads, self.context_length, self.head_dim)

    def empty_cache(self, rows: int | tf.Tensor) -> tf.Tensor:
        """``[layers, 2, rows, heads, L, head_dim]`` zeros."""
        return tf.zeros([self.num_layers, 2, rows, self.num_heads, self.context_length,
                         self.head_dim], tf.float32)

    def _embed(self, ids: tf.Tensor, training=None) -> tf.Tensor:
        positions = tf.broadcast_to(tf.range(tf.shape(ids)[1]), tf.shape(ids))  # [N, P]
        x = self.token_embedding(ids) + self.position_embedding(positions)
        return self.drop(x, training=training)

    def _check_length(self, ids: tf.Tensor) -> None:
        if ids.shape.rank != 2:
            raise ValueError(f"CausalTransformer takes token ids [N, P]; got shape "
                             f"{ids.shape.as_list() if ids.shape.rank is not None else '?'}")
        length = ids.shape[1]
        if length is not None and length > self.context_length:
            raise ValueError(f"CausalTransformer: {length} positions exceed context_length "
                             f"{self.context_length}")

    def call(self, tokens, training=None) -> tf.Tensor:
        """``[N, P]`` token ids (any numeric dtype) -> ``[N, P, d_model]`` causal features."""
        ids = token_ids(tokens)
        self._check_length(ids)
        x = self._embed(ids, training)
        for block in self.blocks:
            x = block(x, training=training)
        return self.final_norm(x)

    def prefill(self, tokens) -> tuple[tf.Tensor, tf.Tensor]:
        """``[N, P]`` prompt ids -> ``(features [N, P, d_model], cache [layers, 2, N, heads, L,
        head_dim])`` holding positions ``0..P-1`` (zeros after). Rows may be prompts of
        different lengths, left-aligned and padded: only a row's own prompt positions are ever
        read, the rest is overwritten as :meth:`step` goes on."""
        ids = token_ids(tokens)
        self._check_length(ids)
        x = self._embed(ids)
        pad = [[0, 0], [0, 0], [0, self.context_length - tf.shape(ids)[1]], [0, 0]]
        cache = []
        for block in self.blocks:
            x, k, v = block.forward(x)
            cache.append(tf.stack([tf.pad(k, pad), tf.pad(v, pad)]))  # [2, N, H, L, hd]
        return self.final_norm(x), tf.stack(cache)

    def step(self, token, cache: tf.Tensor, pos) -> tuple[tf.Tensor, tf.Tensor]:
        """One token per row: ``token [N]`` at position ``pos [N]`` (each row its own) ->
        ``(features [N, d_model], cache)`` with that position's keys and values written.

        Equals ``call(context)[:, pos]`` for the row's context ``0..pos`` when the cache holds
        the row's positions ``0..pos-1`` (from :meth:`prefill` and earlier steps).
        """
        ids, pos = token_ids(token), token_ids(pos)
        x = self.token_embedding(ids) + self.position_embedding(pos)  # [N, d]
        out = []
        for i, block in enumerate(self.blocks):
            x, k, v = block.step(x, cache[i, 0], cache[i, 1], pos)
            out.append(tf.stack([k, v]))
        return self.final_norm(x), tf.stack(out)
