"""Dense stacks with SB3/CleanRL's orthogonal initialisation: the MLP of actors, critics,
trunks and an encoder's vector part (:mod:`pgrad.rl.models.networks`,
:mod:`pgrad.rl.models.encoders`)."""

from __future__ import annotations

from collections.abc import Sequence

import keras
import numpy as np


def mlp(
    input_dim: int,
    hidden: Sequence[int],
    output_dim: int | None,
    activation: str = "tanh",
    output_gain: float = 1.0,
    name: str = "mlp",
    seed: int | None = None,
    ortho_init: bool = True,
) -> keras.Sequential:
    """``[N, input_dim] -> [N, output_dim]`` multilayer perceptron of ``Dense`` layers.

    Orthogonal initialisation as in SB3/CleanRL: gain sqrt(2) for hidden layers, ``output_gain``
    for the last (0.01 for policy logits, 1 for values), zero biases. ``output_dim=None`` leaves
    out the output layer (a trunk). With ``seed`` the initialisers are seeded (hidden layer ``i``
    with ``seed + i``, the output with ``seed + 100``); without, they follow Keras' global seed.
    ``ortho_init=False`` uses PyTorch's default ``nn.Linear`` kernel init instead (uniform in
    +-1/sqrt(fan_in), as Stable-Baselines3's ``ortho_init=False``), biases still zero.
    """
    def init(gain, offset):
        layer_seed = None if seed is None else seed + offset
        if not ortho_init:
            return keras.initializers.VarianceScaling(1 / 3, "fan_in", "uniform", seed=layer_seed)
        return keras.initializers.Orthogonal(gain, seed=layer_seed)

    layers: list = [keras.layers.Input((input_dim,))]
    for i, width in enumerate(hidden):
        layers.append(keras.layers.Dense(width, activation, name=f"{name}_hidden{i}",
                                         kernel_initializer=init(np.sqrt(2.0), i)))
    if output_dim is not None:
        layers.append(keras.layers.Dense(output_dim, kernel_initializer=init(output_gain, 100),
                                         name=f"{name}_out"))
    return keras.Sequential(layers, name=name)
