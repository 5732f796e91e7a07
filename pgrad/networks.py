"""Small Keras networks for policies and critics."""

from __future__ import annotations

from collections.abc import Sequence

import keras
import numpy as np


def mlp(
    input_dim: int,
    hidden: Sequence[int],
    output_dim: int,
    activation: str = "tanh",
    output_gain: float = 1.0,
    name: str = "mlp",
) -> keras.Sequential:
    """``[N, input_dim] -> [N, output_dim]`` multilayer perceptron of ``Dense`` layers.

    Orthogonal initialisation as in SB3/CleanRL: gain sqrt(2) for hidden layers, ``output_gain``
    for the last (0.01 for policy logits, 1 for values), zero biases.
    """
    layers = [keras.layers.Input((input_dim,))]
    for i, width in enumerate(hidden):
        layers.append(
            keras.layers.Dense(
                width,
                activation=activation,
                kernel_initializer=keras.initializers.Orthogonal(np.sqrt(2.0)),
                name=f"{name}_hidden{i}",
            )
        )
    layers.append(
        keras.layers.Dense(
            output_dim,
            kernel_initializer=keras.initializers.Orthogonal(output_gain),
            name=f"{name}_out",
        )
    )
    return keras.Sequential(layers, name=name)
