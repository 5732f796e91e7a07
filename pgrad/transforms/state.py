"""Transform state held in ``tf.Variable`` s, so that it is saved with checkpoints and models."""

from __future__ import annotations

from typing import Any

import tensorflow as tf


class TransformState(tf.Module):
    """A transform's state (a nest of tensors) held in ``tf.Variable`` s so it checkpoints."""

    def __init__(self, state: Any):
        super().__init__(name="transform_state")
        self.template = tf.nest.map_structure(lambda _: 0, state)  # the nest, without values
        self.values = [
            tf.Variable(t, trainable=False, name=f"state_{i}")
            for i, t in enumerate(tf.nest.flatten(state))
        ]

    def read(self) -> Any:
        """The state as the transform expects it (same nest as ``init`` returned)."""
        return tf.nest.pack_sequence_as(self.template, [v.read_value() for v in self.values])

    def write(self, state: Any) -> None:
        """Assigns a new state of the same structure."""
        for v, t in zip(self.values, tf.nest.flatten(state)):
            v.assign(tf.cast(t, v.dtype))
