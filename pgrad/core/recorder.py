"""What one recorded pass collects: the :class:`Recorder` and the taps it holds.

The layer taps (:mod:`pgrad.core.conv_taps`, :mod:`pgrad.core.layer_taps`) append to a
:class:`Recorder`; :mod:`pgrad.core.recording` opens one and routes the tapped layers' calls to
those taps. Both import this module, which imports neither.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import tensorflow as tf


class DenseTap(NamedTuple):
    """One recorded call of a Dense layer."""

    kernel: Any  # the layer's kernel variable, [in, out]
    bias: Any  # its bias variable [out], or None
    x: tf.Tensor  # [N, in] layer input
    z: tf.Tensor  # [N, out] pre-activation output (watched)


class StepTap(NamedTuple):
    """One per-step copy of a variable (see :func:`pgrad.core.recording.per_step_variable`)."""

    variable: Any
    value: tf.Tensor  # [N, *variable.shape] (watched)


class Recorder:
    """Collects taps for one batched pass; see :func:`pgrad.core.recording.recording`.

    Args:
      tape: the tape the pass runs under (tapped pre-activations are watched on it).
      variables: only layers whose variables are among these are tapped (``None``: all).
    """

    def __init__(self, tape: tf.GradientTape, variables: Sequence[Any] | None = None):
        self.tape = tape
        self.eager = tf.executing_eagerly()
        self.graph = None if self.eager else tf.compat.v1.get_default_graph()
        self.keys = None if variables is None else set().union(*map(var_keys, variables))
        self.dense: list[DenseTap] = []
        self.step: list[StepTap] = []
        self.layers: list = []  # PatchTap, EmbeddingTap, LayerNormTap

    def active_here(self) -> bool:
        """True if ops created now belong to the pass being recorded (not a nested graph)."""
        if tf.executing_eagerly():
            return self.eager
        return not self.eager and tf.compat.v1.get_default_graph() is self.graph

    def wants(self, variable: Any) -> bool:
        return self.keys is None or not self.keys.isdisjoint(var_keys(variable))


def var_keys(variable: Any) -> set[int]:
    """Identities under which a variable may appear (a Keras variable and its backing tf one)."""
    keys = {id(variable)}
    inner = getattr(variable, "_value", None)
    if inner is not None:
        keys.add(id(inner))
    return keys
