"""Stateful TensorFlow code as a pure function of its variables' values.

``with variables_as_values({var: tensor, ...}) as state:`` makes, in this thread only, every read
of one of those variables return its current tensor and every ``assign`` / ``assign_add`` /
``assign_sub`` replace that tensor instead of writing the variable; ``state.value(var)`` is the
tensor after the code ran. Keras 3 variables (TensorFlow backend) hold a ``tf.Variable`` and
read and write through it, so a Keras model's call, a tape's gradients and a Keras optimizer's
``apply`` all run unchanged on values (Keras' own ``StatelessScope`` does not cover the
TensorFlow optimizer, whose ``stateless_apply`` raises).

What it is for: code traced this way touches no variable, so ``tf.vectorized_map`` can run it
over a leading member axis of stacked values (JAX's ``vmap`` of a pure update, as PureJaxRL runs
many seeds): :mod:`agents.update.vectorized`.

Gradients: a read records the same tape entry as ``ResourceVariable``'s own read (the variable's
handle to the value, identity backward), so ``tape.gradient(loss, variables)`` and automatic
watching of trainable variables work as they do on variables.

How: while at least one block is open in any thread, ``BaseResourceVariable``'s and
``ResourceVariable``'s read and assign methods are wrapped (reference-counted under a lock, as
pgrad's layer taps wrap Keras layers); the wrapper goes through the state only for a variable
mapped in its own thread's open block and is TensorFlow's method for anything else. When the
last block closes, TensorFlow's own methods are put back.

What it does not cover (an error, never a silent read of the variable): code that assigns inside
``tf.cond`` / ``tf.while_loop`` branches (the new value would live in the branch's graph: use
:func:`select` for a conditional update and :func:`while_loop` for a loop), and the sparse
reads of embedding lookups.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import tensorflow as tf
from tensorflow.python.eager import record
from tensorflow.python.ops import resource_variable_ops

#: ``(variable, value)`` pairs (``tf.Variable`` is not hashable), or a mapping.
Pairs = Mapping[Any, Any] | Iterable[tuple[Any, Any]]

_local = threading.local()
_lock = threading.Lock()
_Base = resource_variable_ops.BaseResourceVariable


def _inner(var: Any) -> Any:
    """The ``tf.Variable`` behind ``var`` (a Keras 3 variable holds one as ``.value``)."""
    if isinstance(var, tf.Variable):
        return var
    inner = getattr(var, "_value", None)
    if isinstance(inner, tf.Variable):
        return inner
    raise TypeError(f"variables_as_values: {type(var).__name__} is not a variable.")


class ValueState:
    """The current value of each mapped variable (by the inner ``tf.Variable``'s id)."""

    def __init__(self, values: Pairs):
        self._vars: dict[int, Any] = {}
        self._values: dict[int, tf.Tensor] = {}
        #: The ids of the inner ``tf.Variable`` s read or assigned so far.
        self.accessed: set[int] = set()
        pairs = values.items() if isinstance(values, Mapping) else values
        for var, value in pairs:
            inner = _inner(var)
            self._vars[id(inner)] = inner
            self._values[id(inner)] = tf.convert_to_tensor(value, dtype=inner.dtype)

    def holds(self, inner: Any) -> bool:
        return id(inner) in self._values

    def value_by_key(self, key: int) -> tf.Tensor:
        return self._values[key]

    def value(self, var: Any) -> tf.Tensor:
        """``var``'s value now (after the assignments made so far)."""
        return self._values[id(_inner(var))]

    def read(self, inner: Any) -> tf.Tensor:
        self.accessed.add(id(inner))
        value = tf.identity(self._values[id(inner)])
        resource_variable_ops.variable_accessed(inner)  # a tape watches trainable reads
        # The read as ResourceVariable records it: d value / d handle is the identity, so a
        # tape's gradient with respect to the variable reaches this value.
        record.record_operation("ReadVariableOp", [value], [inner.handle],
                                backward_function=lambda x: [x],
                                forward_function=lambda x: [x])
        return value

    def write(self, inner: Any, value: Any) -> tf.Tensor:
        self.accessed.add(id(inner))
        value = tf.convert_to_tensor(value, dtype=inner.dtype)
        old = self._values[id(inner)]
        if not old.shape.is_compatible_with(value.shape):
            raise ValueError(f"variables_as_values: {inner.name} of shape {old.shape} "
                             f"assigned a value of shape {value.shape}.")
        if old.shape.is_fully_defined() and not value.shape.is_fully_defined():
            value = tf.ensure_shape(value, old.shape)  # a runtime check only where needed
        self._values[id(inner)] = value
        return value

    def keys(self) -> list[int]:
        return list(self._values)

    def load(self, keys: list[int], values: Sequence[tf.Tensor]) -> None:
        for key, value in zip(keys, values):
            self._values[key] = value

    def snapshot(self) -> dict[int, tf.Tensor]:
        return dict(self._values)

    def restore_where(self, keep_new: tf.Tensor, before: dict[int, tf.Tensor]) -> None:
        """Every value changed since ``before`` becomes ``where(keep_new, new, old)``."""
        for key, new in list(self._values.items()):
            old = before[key]
            if new is not old:
                self._values[key] = tf.where(keep_new, new, old)


def _state_for(var: Any) -> ValueState | None:
    for state in reversed(getattr(_local, "stack", ())):
        if state.holds(var):
            return state
    return None


def _wrapped(original: Callable, name: str) -> Callable:
    """``original`` (a ``BaseResourceVariable`` method) that goes through this thread's state
    for a mapped variable and is ``original`` for any other."""
    if name == "_read_variable_op":
        def read(self, *args, **kwargs):
            state = _state_for(self)
            return original(self, *args, **kwargs) if state is None else state.read(self)
        return read
    if name in ("sparse_read", "gather_nd"):
        def refuse(self, *args, **kwargs):
            if _state_for(self) is not None:
                raise NotImplementedError(
                    f"variables_as_values: a sparse read of {self.name} (an embedding lookup) "
                    "is not supported.")
            return original(self, *args, **kwargs)
        return refuse
    combine = {"assign": lambda old, v, dt: v,
               "assign_add": lambda old, v, dt: old + tf.cast(v, dt),
               "assign_sub": lambda old, v, dt: old - tf.cast(v, dt)}[name]

    def write(self, value, use_locking=None, name=None, read_value=True):
        state = _state_for(self)
        if state is None:
            return original(self, value, use_locking=use_locking, name=name,
                            read_value=read_value)
        new = state.write(self, combine(state.value(self), value, self.dtype))
        return new if read_value else new.op
    return write


#: The methods wrapped while a block is open (ResourceVariable defines its own assign methods
#: over BaseResourceVariable's).
_METHODS = ("_read_variable_op", "assign", "assign_add", "assign_sub", "sparse_read",
            "gather_nd")
_originals: list[tuple[type, str, Any]] = []
_open_blocks = 0


def _open() -> None:
    """Wraps the read and assign methods when the first block in any thread opens."""
    global _open_blocks
    with _lock:
        if _open_blocks == 0:
            for cls in (_Base, resource_variable_ops.ResourceVariable):
                for name in _METHODS:
                    if name in cls.__dict__:
                        original = cls.__dict__[name]
                        _originals.append((cls, name, original))
                        setattr(cls, name, _wrapped(original, name))
        _open_blocks += 1


def _close() -> None:
    """Puts TensorFlow's own methods back when the last open block closes."""
    global _open_blocks
    with _lock:
        _open_blocks -= 1
        if _open_blocks == 0:
            while _originals:
                cls, name, original = _originals.pop()
                setattr(cls, name, original)


@contextlib.contextmanager
def variables_as_values(values: Pairs) -> Iterator[ValueState]:
    """Within the block, in this thread, the variables of ``values`` (``(variable, tensor)``
    pairs, or a mapping of Keras variables; ``tf.Variable`` or Keras) read and assign tensors
    (module docstring)."""
    state = ValueState(values)
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    _open()
    stack.append(state)
    try:
        yield state
    finally:
        stack.pop()
        _close()


def active() -> ValueState | None:
    """This thread's innermost state, or None outside :func:`variables_as_values`."""
    stack = getattr(_local, "stack", ())
    return stack[-1] if stack else None


def while_loop(cond: Callable, body: Callable, loop_vars: Sequence[Any], **kwargs: Any) -> Any:
    """``tf.while_loop(cond, body, loop_vars)`` whose body may assign variables: under an active
    state, every value rides along as a loop variable (a body's assignment would otherwise
    live in the loop's graph); outside one, ``tf.while_loop`` itself."""
    state = active()
    if state is None:
        return tf.while_loop(cond, body, loop_vars, **kwargs)
    keys = state.keys()

    def carried_cond(user, values):
        state.load(keys, values)
        return cond(*user)

    def carried_body(user, values):
        state.load(keys, values)
        out = body(*user)
        return tuple(out), [state.value_by_key(k) for k in keys]

    user, values = tf.while_loop(carried_cond, carried_body,
                                 (tuple(loop_vars), [state.value_by_key(k) for k in keys]),
                                 **kwargs)
    state.load(keys, values)
    return user


def select(condition: tf.Tensor, fn: Callable[[], Any]) -> Any:
    """``fn()`` under the active state, every variable it changed kept only where ``condition``
    ``[]`` is true (the value form of ``tf.cond(condition, fn, no-op)``, which cannot return
    values assigned inside its branch). Returns what ``fn`` returns."""
    state = active()
    if state is None:
        raise RuntimeError("select: no variables_as_values block is active.")
    before = state.snapshot()
    out = fn()
    state.restore_where(tf.cast(condition, tf.bool), before)
    return out
