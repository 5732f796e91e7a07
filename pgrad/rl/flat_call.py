"""Calling a traced ``tf.function``'s concrete function through its flat entry point.

A compiled call made many times a second (the agent's update, a CNN policy's acting call) pays
for ``tf.function``'s argument binding on every call; :func:`flat_caller` skips it where the
private entry point has the signature this was written for, and is the public call otherwise.
"""

from __future__ import annotations

from typing import Any

#: Call concrete functions through their flat entry point (see flat_caller); False: the public
#: call (the tests compare the two).
FLAT_CALLS = True


def flat_caller(concrete: Any) -> Any:
    """A callable running ``concrete(*args)`` for tensors-or-None ``args``, without re-binding
    them to its structured signature on every call.

    The public call binds the arguments to the traced signature each time (~50 us of a ~270 us
    CartPole update here); this goes straight to ``ConcreteFunction._call_flat``, TensorFlow's
    own next step (tape and variable handling kept). ``_call_flat`` is private and its signature
    has changed across TensorFlow 2.x releases, so it is used only when it has the shape this
    was written for (``(tensor_inputs, captured_inputs)``, TensorFlow 2.16-2.21): otherwise, or
    with ``FLAT_CALLS = False``, this is the public call. A mismatch that shows only when called
    (a ``TypeError`` while binding, before anything runs) falls back to the public call too.
    """
    call_flat: Any = getattr(concrete, "_call_flat", None)
    if not FLAT_CALLS or not flat_call_supported(concrete):
        return concrete
    state = {"flat": True}

    def call(*args):
        if state["flat"]:
            try:  # None (no mask) is not a graph input, as in the public binding
                return call_flat([a for a in args if a is not None], concrete.captured_inputs)
            except TypeError:  # a binding error: raised before the graph ran
                state["flat"] = False
        return concrete(*args)

    return call


def flat_call_supported(concrete: Any) -> bool:
    """Whether ``concrete._call_flat`` has the signature :func:`flat_caller` relies on."""
    import inspect

    call_flat: Any = getattr(concrete, "_call_flat", None)
    if call_flat is None or not hasattr(concrete, "captured_inputs"):
        return False
    try:
        params = list(inspect.signature(call_flat).parameters)
    except (TypeError, ValueError):
        return False
    return params == ["tensor_inputs", "captured_inputs"]
