"""Observation encoders: what turns an observation into the features the policy heads read.

A policy is ``encoder -> heads`` (a recurrent core will sit between them). The encoder is chosen
by name, or is the user's own Keras model:

* ``"mlp"`` -- Dense layers (``hidden``, ``activation``) on the flat vector. On vector
  observations this is the MLP policy as it always was
  (:class:`pgrad.rl.models.networks.ActorCritic`
  without an encoder); images, if any, are scaled, flattened and joined to the vector first.
* ``"nature_cnn"`` -- Mnih et al. (2015), as Stable-Baselines3's ``NatureCNN``: Conv 32 8x8
  stride 4, Conv 64 4x4 stride 2, Conv 64 3x3 stride 1 (ReLU), Flatten, Dense 512 ReLU. Needs
  images of at least 36 x 36.
* ``"impala_cnn"`` -- Espeholt et al. (2018), as CleanRL's procgen/Atari network: three stacks
  of [Conv 3x3 (16, 32, 32 channels), max-pool 3x3 stride 2, two residual blocks
  ``x + conv(relu(conv(relu(x))))``], then ReLU, Flatten, Dense 256 ReLU.
* ``"minatar_cnn"`` -- Young & Tian (2019): Conv 16 3x3 stride 1 ReLU, Flatten, Dense 128 ReLU.
  Needs images of at least 3 x 3 (MinAtar's are 10 x 10).
* ``"transformer"`` -- on token observations (:mod:`pgrad.rl.tokens.protocol`: a 1-D integer
  ``Box(0, V-1, (L,))`` of ids, 0 the pad), a causal Transformer
  (:class:`pgrad.rl.models.transformer.CausalTransformer`, ``V`` and ``L`` from the space; sizes
  ``d_model``, ``num_heads``, ``num_layers``, ``ffn_dim`` from ``transformer=``) read at each
  context's last position (:class:`pgrad.rl.models.token_encoder.TokenEncoder`): ``[N, L]`` ->
  ``[N, d_model]``. Refused on any other space.
* ``"auto"`` -- a CNN where the observations hold images (``nature_cnn`` for images of at least
  36 x 36, ``minatar_cnn`` for smaller ones), ``"transformer"`` on token observations, else
  ``"mlp"``.
* own -- from Python, a function ``fn(observation_space) -> keras.Model`` (called once more for
  the critic's copy when the encoder is not shared) or a built ``keras.Model`` / ``Layer``.
  It is called on the parts of :class:`pgrad.rl.observations.spaces.ObsLayout` with images already
  scaled to float32 in [0, 1], channel-last (one tensor, or a list in part order), and must return
  ``[N, features]``. On token observations a causal language model -- a
  :class:`~pgrad.rl.models.token_encoder.CausalLM`, a ``CausalTransformer``, or any Keras model
  mapping ids ``[N, L]`` (or keras-hub's ``{"token_ids", "padding_mask"}``) to ``[N, L, d]`` --
  is wrapped in a ``TokenEncoder``, which checks it is causal.

With a CNN, every image part gets its own CNN and the vector part of a ``Dict`` observation the
MLP of ``hidden`` (passed through flat when ``hidden`` is empty); the features are
concatenated. The heads (a Dense layer each for the policy and the value) read them directly,
as in Stable-Baselines3's ``CnnPolicy`` and CleanRL's Atari agents.

Images arrive in their own dtype and are scaled here, inside the network: uint8 ``/ 255``, bool
cast to 0/1, channel-first images transposed to channel-last. Initialisation is orthogonal as in
SB3/CleanRL (gain sqrt 2 for convolutions and hidden layers; the heads' gains are set by
:mod:`pgrad.rl.models.networks`), biases zero; ``ortho_init=False`` uses PyTorch's default kernel
init.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from pgrad.rl.models import token_encoder
from pgrad.rl.models.dense import mlp
from pgrad.rl.models.transformer import CausalTransformer
from pgrad.rl.observations.spaces import ObsLayout, Part

#: Names accepted for the ``encoder`` setting.
NAMES = ("auto", "mlp", "nature_cnn", "impala_cnn", "minatar_cnn", "transformer")
#: The sizes ``transformer=`` may give the ``"transformer"`` encoder (as the agents' config).
TRANSFORMER_SIZES = ("d_model", "num_heads", "num_layers", "ffn_dim")
#: Smallest image (height and width) each CNN accepts.
MIN_SIZE = {"nature_cnn": 36, "impala_cnn": 1, "minatar_cnn": 3}


def _init(gain: float, seed: int | None, ortho_init: bool):
    if not ortho_init:  # PyTorch's default: uniform in +-1/sqrt(fan_in), as for Dense layers
        return keras.initializers.VarianceScaling(1 / 3, "fan_in", "uniform", seed=seed)
    return keras.initializers.Orthogonal(gain, seed=seed)


class _Seeds:
    """Successive layer seeds ``seed, seed + 1, ...`` (``None``: Keras' global seed)."""

    def __init__(self, seed: int | None):
        self.next = seed

    def __call__(self) -> int | None:
        if self.next is None:
            return None
        self.next += 1
        return self.next - 1


def nature_cnn(shape: tuple[int, int, int], seed: int | None = None, ortho_init: bool = True,
               name: str = "nature_cnn") -> keras.Sequential:
    """``[N, H, W, C]`` float32 -> ``[N, 512]``: Mnih et al. (2015), SB3's ``NatureCNN``."""
    seeds, gain = _Seeds(seed), np.sqrt(2.0)

    def conv(filters, size, stride, i):
        return keras.layers.Conv2D(filters, size, stride, activation="relu", name=f"{name}_conv{i}",
                                   kernel_initializer=_init(gain, seeds(), ortho_init))

    return keras.Sequential([
        keras.layers.Input(shape), conv(32, 8, 4, 0), conv(64, 4, 2, 1), conv(64, 3, 1, 2),
        keras.layers.Flatten(name=f"{name}_flatten"),
        keras.layers.Dense(512, "relu", name=f"{name}_dense",
                           kernel_initializer=_init(gain, seeds(), ortho_init)),
    ], name=name)


def minatar_cnn(shape: tuple[int, int, int], seed: int | None = None, ortho_init: bool = True,
                name: str = "minatar_cnn") -> keras.Sequential:
    """``[N, H, W, C]`` float32 -> ``[N, 128]``: Young & Tian (2019)'s MinAtar network."""
    seeds, gain = _Seeds(seed), np.sqrt(2.0)
    return keras.Sequential([
        keras.layers.Input(shape),
        keras.layers.Conv2D(16, 3, 1, activation="relu", name=f"{name}_conv0",
                            kernel_initializer=_init(gain, seeds(), ortho_init)),
        keras.layers.Flatten(name=f"{name}_flatten"),
        keras.layers.Dense(128, "relu", name=f"{name}_dense",
                           kernel_initializer=_init(gain, seeds(), ortho_init)),
    ], name=name)


def impala_cnn(shape: tuple[int, int, int], seed: int | None = None, ortho_init: bool = True,
               name: str = "impala_cnn", channels: Sequence[int] = (16, 32, 32)) -> keras.Model:
    """``[N, H, W, C]`` float32 -> ``[N, 256]``: Espeholt et al. (2018)'s residual network, as
    CleanRL's ``ppo_procgen`` (max-pool "same" padding = PyTorch's padding 1 at stride 2)."""
    seeds, gain = _Seeds(seed), np.sqrt(2.0)
    layers = keras.layers

    def conv(ch, label):
        return layers.Conv2D(ch, 3, padding="same", name=f"{name}_{label}",
                             kernel_initializer=_init(gain, seeds(), ortho_init))

    inputs = layers.Input(shape)
    x = inputs
    for s, ch in enumerate(channels):
        x = conv(ch, f"s{s}_conv")(x)
        x = layers.MaxPooling2D(3, 2, padding="same", name=f"{name}_s{s}_pool")(x)
        for r in range(2):
            y = layers.ReLU()(x)
            y = conv(ch, f"s{s}_res{r}_conv0")(y)
            y = layers.ReLU()(y)
            y = conv(ch, f"s{s}_res{r}_conv1")(y)
            x = layers.Add()([x, y])
    x = layers.Flatten(name=f"{name}_flatten")(layers.ReLU()(x))
    x = layers.Dense(256, "relu", name=f"{name}_dense",
                     kernel_initializer=_init(gain, seeds(), ortho_init))(x)
    return keras.Model(inputs, x, name=name)


CNNS: dict[str, Callable[..., keras.Model]] = {
    "nature_cnn": nature_cnn, "impala_cnn": impala_cnn, "minatar_cnn": minatar_cnn}


def check_name(encoder: Any, field: str = "encoder") -> None:
    """Raises ValueError unless ``encoder`` is a built-in name, a callable or a Keras layer."""
    if isinstance(encoder, str):
        if encoder not in NAMES:
            images, tokens = ", ".join(NAMES[:5]), NAMES[5]
            raise ValueError(
                f"{field} must be one of {images} (images or vectors), {tokens} (token "
                "observations) (or, from Python, a function observation_space -> keras.Model, "
                f"or a keras.Model); got {encoder!r}")
    elif not (callable(encoder) or isinstance(encoder, keras.layers.Layer)):
        raise ValueError(f"{field} must be a name ({', '.join(NAMES)}), a function "
                         f"observation_space -> keras.Model or a keras.Model; got "
                         f"{type(encoder).__name__}")


def is_token_space(space: Any) -> bool:
    """Whether ``space`` holds token contexts (:mod:`pgrad.rl.tokens.protocol`): a 1-D integer
    ``Box`` with bounds ``0 .. V-1`` (the same ``V - 1 >= 1`` at every position)."""
    try:
        vocab, _ = token_encoder.token_space_sizes(space)
    except ValueError:
        return False
    return vocab >= 2


def resolve(encoder: Any, layout: ObsLayout, where: str = "the env") -> Any:
    """The concrete encoder for ``layout``: ``"auto"`` decided, CNNs checked against the images,
    the Transformer against token observations.

    Returns ``"mlp"``, a CNN name, ``"transformer"``, or the user's callable / layer.

    Raises:
      ValueError: an unknown name, a CNN on observations without images, images too small
        for the chosen CNN (one sentence naming the image, its size and what fits), or the
        Transformer on observations that are not token contexts.
    """
    check_name(encoder)
    if not isinstance(encoder, str):
        return encoder
    images = layout.images
    tokens = is_token_space(layout.space)
    if encoder == "transformer" and not tokens:
        raise ValueError(
            f"encoder 'transformer' needs token observations (a 1-D integer Box(0, V-1, (L,)) "
            f"of token ids, pgrad.rl.tokens.protocol); {where} observes {layout.space}; use "
            "encoder='mlp' (or 'auto')")
    if encoder == "auto":
        if tokens:
            return "transformer"
        if not images:
            return "mlp"
        small = min(min(p.image_size()[:2]) for p in images)
        return "nature_cnn" if small >= MIN_SIZE["nature_cnn"] else "minatar_cnn"
    if encoder in CNNS:
        if not images:
            raise ValueError(
                f"encoder {encoder!r} needs image observations (a rank-3 Box of uint8 with bounds "
                f"0..255, or of bool); {where} observes {layout.space}; use encoder='mlp' "
                "(or 'auto')")
        for p in images:
            h, w, c = p.image_size()
            if min(h, w) < MIN_SIZE[encoder]:
                fits = [n for n, m in MIN_SIZE.items() if min(h, w) >= m]
                raise ValueError(
                    f"encoder {encoder!r} needs images of at least {MIN_SIZE[encoder]}x"
                    f"{MIN_SIZE[encoder]}; {where}'s image {p.name!r} is {h}x{w}x{c}; use "
                    f"encoder={fits[-1]!r} (or 'auto')")
    return encoder


def scale_image(x: tf.Tensor, part: Part) -> tf.Tensor:
    """``[N, *part.shape]`` image in its own dtype -> ``[N, H, W, C]`` float32: uint8 ``/ 255``,
    bool cast to 0/1, channel-first transposed to channel-last."""
    if part.channels_first:
        x = tf.transpose(x, [0, 2, 3, 1])
    if part.dtype == np.uint8:
        return tf.cast(x, tf.float32) / 255.0
    return tf.cast(x, tf.float32)


class ObservationEncoder(keras.layers.Layer):
    """``observation parts -> [N, feature_dim]`` float32 (see the module docstring).

    Args:
      layout: the observation layout (:func:`pgrad.rl.observations.spaces.obs_layout`).
      encoder: ``"mlp"``, a CNN name, ``"transformer"``, or the user's function / Keras model
        (as :func:`resolve` returns).
      hidden, activation: the MLP's widths and activation (the vector part; with ``"mlp"``
        everything; unused by the Transformer).
      transformer: the Transformer's sizes, any of :data:`TRANSFORMER_SIZES` (``ffn_dim``
        None or 0: ``4 d_model``); None: the defaults of
        :func:`pgrad.rl.models.token_encoder.transformer_encoder`.
      seed: initialiser seed (``None``: Keras' global seed).
      ortho_init: orthogonal initialisation (else PyTorch's default).
    """

    def __init__(self, layout: ObsLayout, encoder: Any, hidden: Sequence[int] = (64, 64),
                 activation: str = "tanh", seed: int | None = 0, ortho_init: bool = True,
                 transformer: dict[str, Any] | None = None, name: str = "encoder"):
        super().__init__(name=name)

        self.layout, self.kind = layout, encoder if isinstance(encoder, str) else "own"
        self.parts = layout.parts
        hidden = tuple(int(h) for h in hidden)
        self.cnns: list = []
        self.vector_mlp = None
        self.own = None
        if self.kind == "own":
            self.own = _own_model(encoder, layout)
        elif self.kind == "transformer":
            self.own = _transformer(layout, transformer, seed)
        elif self.kind == "mlp":
            width = sum(int(np.prod(p.shape)) for p in self.parts)
            if hidden:
                self.vector_mlp = mlp(width, hidden, None, activation, name=f"{name}_mlp",
                                      seed=seed, ortho_init=ortho_init)
        else:
            build = CNNS[self.kind]
            for i, p in enumerate(layout.images):
                self.cnns.append(build(p.image_size(), seed=None if seed is None else seed + 10 * i,
                                       ortho_init=ortho_init, name=f"{name}_{self.kind}{i}"))
            if layout.vector_index is not None and hidden:
                self.vector_mlp = mlp(layout.vector_dim, hidden, None, activation,
                                      name=f"{name}_mlp", seed=None if seed is None else seed + 500,
                                      ortho_init=ortho_init)
        out = self(layout.join(tf.zeros([1, *p.shape], tf.as_dtype(p.dtype))
                               for p in self.parts))
        if out.shape.rank != 2 or out.shape[0] != 1:
            raise ValueError(f"the encoder must return [N, features]; for a batch of one "
                             f"observation it returned shape {out.shape.as_list()}")
        self.feature_dim = int(out.shape[1])

    def call(self, obs: Any) -> tf.Tensor:
        parts = self.layout.split(obs)
        scaled = [scale_image(x, p) if p.image else tf.cast(x, tf.float32)
                  for x, p in zip(parts, self.parts)]
        if self.own is not None:
            return self.own(scaled[0] if len(scaled) == 1 else list(scaled))
        if self.kind == "mlp":
            flat = [tf.reshape(x, [tf.shape(x)[0], -1]) for x in scaled]
            x = flat[0] if len(flat) == 1 else tf.concat(flat, axis=1)
            return x if self.vector_mlp is None else self.vector_mlp(x)
        feats, cnns = [], iter(self.cnns)
        for x, p in zip(scaled, self.parts):
            if p.image:
                feats.append(next(cnns)(x))
            else:
                feats.append(x if self.vector_mlp is None else self.vector_mlp(x))
        return feats[0] if len(feats) == 1 else tf.concat(feats, axis=1)


def _transformer(layout: ObsLayout, sizes: dict[str, Any] | None, seed: int | None
                 ) -> token_encoder.TokenEncoder:
    """The ``"transformer"`` encoder: a :class:`CausalTransformer` sized from the token space
    (``V``, ``L``) and ``sizes``, in a :class:`~pgrad.rl.models.token_encoder.TokenEncoder`."""
    sizes = dict(sizes or {})
    unknown = sorted(set(sizes) - set(TRANSFORMER_SIZES))
    if unknown:
        raise ValueError(f"transformer sizes must be among {', '.join(TRANSFORMER_SIZES)}; got "
                         f"{', '.join(unknown)}")
    if not sizes.get("ffn_dim"):
        sizes.pop("ffn_dim", None)
    return token_encoder.transformer_encoder(layout.space, seed=0 if seed is None else seed,
                                             **sizes)


def _is_sequence_model(model: keras.layers.Layer, length: int) -> bool:
    """Whether a user's model on token observations is a causal LM (``ids [N, L] -> [N, L, d]``,
    or keras-hub's dict input) to read at each context's last position."""
    if isinstance(model, token_encoder.TokenEncoder):
        return False
    if isinstance(model, (token_encoder.CausalLM, CausalTransformer)):
        return True
    if isinstance(getattr(model, "input", None), dict):
        return True
    try:  # anything else: by what it returns for a batch of one context of ids
        out = model(tf.zeros([1, length], tf.int32))
    except Exception:  # not a model of ids: it is called on the observations as they are
        return False
    return getattr(out, "shape", None) is not None and len(out.shape) == 3


def _own_model(encoder: Any, layout: ObsLayout):
    """The user's encoder as a Keras layer (a function is called with the observation space).
    On token observations a causal LM is wrapped in a ``TokenEncoder`` (checked causal)."""
    if isinstance(encoder, keras.layers.Layer):
        model = encoder
    else:
        model = encoder(layout.space)
        if not isinstance(model, keras.layers.Layer):
            raise ValueError(f"the encoder function {getattr(encoder, '__name__', encoder)!r} "
                             f"must return a keras.Model (or Layer); it returned "
                             f"{type(model).__name__}")
    if is_token_space(layout.space):
        vocab, length = token_encoder.token_space_sizes(layout.space)
        if _is_sequence_model(model, length):
            return token_encoder.TokenEncoder(model, vocab, length)
    return model


def encoder_copy(encoder: Any, layout: ObsLayout, **kwargs: Any) -> ObservationEncoder:
    """A second, independent encoder like ``encoder`` (the critic's, when not shared).

    Raises:
      ValueError: ``encoder`` is a Keras model instance (its weights cannot be duplicated
        safely; pass a function that builds it instead).
    """
    if isinstance(encoder, keras.layers.Layer):
        raise ValueError("share_encoder=False needs a second encoder: pass a function "
                         "observation_space -> keras.Model (called once for the actor and once "
                         "for the critic) instead of a model instance")
    return ObservationEncoder(layout, encoder, **kwargs)
