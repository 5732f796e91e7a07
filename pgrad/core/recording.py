"""Recording taps: the context under which one batched pass records what each layer needs.

How the taps are captured: :func:`pgrad.core.taps.capture` runs ``fn`` once under a
:class:`Recorder` (:func:`recording`). While a recorder is active (on this thread, in the graph
it was opened in), the ``call`` of the tapped Keras layers -- ``Dense``, ``Conv1D``, ``Conv2D``,
``Embedding``, ``LayerNormalization`` -- computes the layer's output with its variables cut from
the tape (``stop_gradient``) and records what the per-step gradients of those variables need:
``x`` and the (watched) pre-activation ``z`` of a Dense layer (:class:`DenseTap`; on
``[T, ..., in]`` inputs a :class:`pgrad.core.conv_taps.PatchTap`), the input and ``z`` of a
convolution (:mod:`pgrad.core.conv_taps`), the ids and output of an Embedding and ``xhat`` and
the output of a LayerNormalization (:mod:`pgrad.core.layer_taps`). Because the tapped uses are
cut from the tape, the batched gradient with respect to a variable is *unconnected* exactly
when every use of it was tapped. Any variable that is also used in another way (shared with an
untapped layer, a LoRA/quantised layer, a channels_first convolution, a layer inside a nested
``tf.function`` or loop body), whose tap rows are not the steps, or whose tap the tape cannot
connect to the output (unused, or hidden inside a ``tf.custom_gradient``), is reported as *not
covered*; callers compute those with the generic vectorised path, so results are always exact.

Nothing global changes outside a recording: the layers' ``call`` methods are wrapped when the
first recording opens and restored when the last one closes (a class that inherited ``call``
inherits it again); while wrapped, a call on another thread, in another graph, or of a layer
whose variables are not being differentiated runs the original ``call`` unchanged.

Limitation (documented in ``docs/performance.md``): a layer whose input has exactly ``T``
rows is taken to be applied row-per-step. Disable the taps (``use_taps=False`` arguments, or
``with pgrad.core.taps.disabled():``) for a model that applies a layer to a ``T``-row tensor
whose rows are not the steps.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import keras
import tensorflow as tf

from pgrad.core import conv_taps, layer_taps
from pgrad.core.recorder import DenseTap, Recorder, StepTap, var_keys

__all__ = ["DenseTap", "Recorder", "StepTap", "disabled", "enabled", "per_step_variable",
           "recording", "var_keys"]

_local = threading.local()
_patch_lock = threading.Lock()
_open_recordings = 0  # recordings open on any thread; the layers' call is wrapped while > 0
_original_dense_call: Callable | None = None
_saved_calls: list[tuple[type, Any]] = []  # (class, its own call or _INHERITED), while wrapped
_INHERITED = object()


def _active() -> Recorder | None:
    rec = getattr(_local, "recorder", None)
    return rec if rec is not None and rec.active_here() else None


def _tappable(layer, inputs, rec: Recorder) -> bool:
    dense = keras.layers.Dense
    if type(layer).kernel is not dense.kernel or getattr(layer, "lora_enabled", False):
        return False
    if getattr(layer, "quantization_mode", None) is not None:
        return False
    kernel = getattr(layer, "_kernel", None)
    if kernel is None or not isinstance(inputs, tf.Tensor) or (inputs.shape.rank or 0) < 2:
        return False
    return inputs.dtype == kernel.dtype and rec.wants(kernel)


def _dense_call(self, inputs, training=None):
    """``keras.layers.Dense.call``, recording taps while a :class:`Recorder` is active."""
    rec = _active()
    original = _original_dense_call
    assert original is not None  # set by _open before Dense.call is wrapped
    if rec is None or not _tappable(self, inputs, rec):
        return original(self, inputs, training=training)
    if inputs.shape.rank > 2:  # [T, ..., in]: one matmul per position, as a convolution
        out = conv_taps.record_dense(rec, self, inputs)
        return out if out is not None else original(self, inputs, training=training)
    # Cut the tapped use of the variables from the tape: a variable whose batched gradient is
    # still connected afterwards is used elsewhere too, and is left to the generic path.
    z = tf.matmul(inputs, tf.stop_gradient(tf.convert_to_tensor(self._kernel)))  # [N, out]
    if self.bias is not None:
        z = z + tf.stop_gradient(tf.convert_to_tensor(self.bias))
    rec.tape.watch(z)
    rec.dense.append(DenseTap(self._kernel, self.bias, inputs, z))
    return self.activation(z) if self.activation is not None else z


def _tapped_call(original: Callable, record: Callable) -> Callable:
    """``original`` (a layer's ``call(self, inputs)``) recording through ``record`` while a
    recording is active; ``record`` returns ``None`` where it cannot tap exactly."""

    @functools.wraps(original)
    def call(self, *args, **kwargs):
        rec = _active()
        if rec is not None and len(args) == 1 and not kwargs:
            out = record(rec, self, args[0])
            if out is not None:
                return out
        return original(self, *args, **kwargs)

    return call


def _taps_by_class() -> list[tuple[type, Callable]]:
    layers = keras.layers
    return [(layers.Conv1D, conv_taps.record_conv), (layers.Conv2D, conv_taps.record_conv),
            (layers.Embedding, layer_taps.record_embedding),
            (layers.LayerNormalization, layer_taps.record_layer_norm)]


def _open() -> None:
    """Wraps the tapped layers' ``call`` when the first recording opens."""
    global _open_recordings, _original_dense_call
    with _patch_lock:
        if _open_recordings == 0:
            _original_dense_call = keras.layers.Dense.call
            keras.layers.Dense.call = functools.wraps(_original_dense_call)(_dense_call)
            for cls, record in _taps_by_class():
                _saved_calls.append((cls, cls.__dict__.get("call", _INHERITED)))
                setattr(cls, "call", _tapped_call(getattr(cls, "call"), record))  # noqa: B009,B010
        _open_recordings += 1


def _close() -> None:
    """Restores every wrapped ``call`` when the last recording closes."""
    global _open_recordings
    with _patch_lock:
        _open_recordings -= 1
        if _open_recordings == 0:
            keras.layers.Dense.call = _original_dense_call
            while _saved_calls:
                cls, own = _saved_calls.pop()
                if own is _INHERITED:
                    delattr(cls, "call")
                else:
                    setattr(cls, "call", own)  # noqa: B010 (a class that mypy sees as plain type)


@contextlib.contextmanager
def recording(tape: tf.GradientTape, variables: Sequence[Any] | None = None
              ) -> Iterator[Recorder]:
    """Records taps of the computation run inside, on this thread, into a :class:`Recorder`.

    Open it inside ``tape``'s context. Only layers whose variables are in ``variables`` are
    tapped (all tappable layers if ``None``). Nested recordings are not supported (the inner one
    wins).
    """
    rec = Recorder(tape, variables)
    _open()
    previous = getattr(_local, "recorder", None)
    _local.recorder = rec
    try:
        yield rec
    finally:
        _local.recorder = previous
        _close()


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """No taps inside: for a ``fn`` that feeds a layer ``T`` rows that are not the steps."""
    previous = getattr(_local, "disabled", False)
    _local.disabled = True
    try:
        yield
    finally:
        _local.disabled = previous


def enabled() -> bool:
    """False inside :func:`disabled`."""
    return not getattr(_local, "disabled", False)


def per_step_variable(variable: Any, num_steps: tf.Tensor | int) -> tf.Tensor:
    """``[num_steps, *variable.shape]``: ``variable`` repeated once per step.

    Use it where a state-independent parameter meets per-step tensors (a Gaussian head's
    log-std): outside a recording it is a plain ``tf.broadcast_to``; inside one it is a tap, so
    the variable's per-step gradients come from the same batched pass as the layers'.
    """
    value = tf.convert_to_tensor(variable)
    shape = tf.concat([tf.reshape(tf.cast(num_steps, tf.int32), [1]), tf.shape(value)], 0)
    rec = _active()
    if rec is None or not rec.wants(variable):
        return tf.broadcast_to(value, shape)
    out = tf.broadcast_to(tf.stop_gradient(value), shape)
    rec.tape.watch(out)
    rec.step.append(StepTap(variable, out))
    return out
