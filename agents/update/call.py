"""How the compiled update is traced and called (:class:`TracedUpdate`).

:class:`agents.update.compiled.CompiledUpdate` says what one update computes; this module says how
that
Python function becomes the ``tf.function`` each agent step calls:

* fixed-shape batches call the traced concrete function directly (``tf.function``'s per-call
  signature matching cost about as much as the small update graph itself: ~1 ms of ~3 ms);
* no autograph at first (converting the update's source cost ~2.4 s per process, and pgrad's own
  code has no tensor-dependent Python control flow); a transform that needs it (``if tensor:``)
  raises ``OperatorNotAllowedInGraphError`` while tracing, and the update is traced again with
  autograph on;
* ``jit_compile``: fixed-shape updates as one XLA computation; whole-episode batches (a new
  shape every update) keep the plain graph, which XLA would compile again for each. Until a
  call has run with XLA, a TensorFlow error falls back to the plain graph with one warning (XLA
  compiles before it runs, so the failed call changed nothing; an error of the update itself
  shows up again without XLA).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from pgrad.rl.flat_call import flat_caller


def needs_autograph(err: BaseException | None) -> bool:
    """Whether ``err`` (or an exception behind it) is a graph tensor used as a Python bool."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, tf.errors.OperatorNotAllowedInGraphError):
            return True
        err = err.__cause__ or err.__context__
    return False


def _first_line(err: BaseException) -> str:
    """The first line of ``err``'s message (TensorFlow's run on with graph details)."""
    text = str(getattr(err, "message", None) or err).strip()
    return text.splitlines()[0][:200] if text else ""


class TracedUpdate:
    """``update(*args)`` as the ``tf.function`` an agent step calls.

    Args:
      update: the update's Python function (traced once per shape).
      signature: ``signature(args) -> specs`` of a fixed-shape call's arguments.
      jit_compile: fixed-shape updates as one XLA computation.
    """

    def __init__(self, update: Callable, signature: Callable[[tuple], Any], jit_compile: bool):
        self._update, self._signature = update, signature
        self.autograph = False
        self.jit = bool(jit_compile)
        self._jit_ran = False
        self.concrete: dict[tuple, Any] = {}  # fixed shapes -> the concrete function's caller
        self.fn, self.fn_varying = self._functions()

    def _functions(self) -> tuple:
        """``(fixed-shape update, varying-shape update)``: one function unless XLA is on."""
        def make(jit: bool):
            return tf.function(self._update, reduce_retracing=True, autograph=self.autograph,
                               jit_compile=jit or None)

        fn = make(self.jit)
        return fn, (make(False) if self.jit else fn)

    def tracing_count(self) -> int:
        """How many times the update has been traced (a retrace per call would be a bug)."""
        count = self.fn.experimental_get_tracing_count()
        if self.fn_varying is not self.fn:
            count += self.fn_varying.experimental_get_tracing_count()
        return count

    def __call__(self, args: tuple, fixed_shape: bool):
        try:
            out = self._run(args, fixed_shape)
        except Exception as err:  # re-raised unless autograph or leaving XLA is the fix
            # Only the first, autograph-free trace can fail this way (pgrad wraps a transform's
            # error in a TransformError, so look through the causes).
            if not self.autograph and needs_autograph(err):
                self.autograph = True
            elif (self.jit and fixed_shape and not self._jit_ran
                  and isinstance(err, tf.errors.OpError)):
                self.jit = False
                warnings.warn(
                    "jit_compile: XLA could not compile this update "
                    f"({type(err).__name__}: {_first_line(err)}); it runs without XLA.",
                    RuntimeWarning, stacklevel=3)
            else:
                raise
            self.fn, self.fn_varying = self._functions()
            self.concrete.clear()
            return self(args, fixed_shape)
        self._jit_ran = self._jit_ran or (self.jit and fixed_shape)
        return out

    def _run(self, args: tuple, fixed_shape: bool):
        if not fixed_shape:
            return self.fn_varying(*args)
        key = (tuple(args[0].shape), tuple(args[1].shape), tuple(args[3].shape), len(args))
        fn = self.concrete.get(key)
        if fn is None:
            fn = self.concrete[key] = flat_caller(
                self.fn.get_concrete_function(*self._signature(args)))
        return fn(*args)
