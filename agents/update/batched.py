"""Many agents' compiled updates as one traced graph (a population: :mod:`agents.population`).

Where the members' updates differ only in their variables (the usual case), the graph calls one
member's traced update once per member with that member's variables
(:class:`agents.update.shared_trace.SharedTrace`: one trace instead of N). Otherwise:

:class:`BatchedUpdate` traces, inside ONE outer ``tf.function``, each agent's own update function
(:meth:`agents.update.compiled.CompiledUpdate._update`, the very Python function a single agent's
update traces) on that agent's own inputs. Nothing crosses between the agents' subgraphs: each
reads and writes only its own variables (weights, optimizer slots, chain state, counters,
normaliser statistics), so one call runs N independent updates. The call overhead (argument
binding, the executor's start) is paid once per round instead of N times, and TensorFlow's
inter-op executor is free to run the N subgraphs side by side on the machine's cores.

Each agent's part computes what its own update computes, op for op; the tests compare the
weights of a population with those of separately trained agents (tests/agents/
test_population.py). What a single agent's :class:`agents.update.call.TracedUpdate` adds is
kept where it matters: fixed shapes call a concrete function through its flat entry point, an
update that needs autograph (a transform's ``if tensor:``) is traced again with it. XLA
(``jit_compile``) is not used for the batched graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from agents.update import vectorized
from agents.update.call import needs_autograph
from agents.update.shared_trace import SharedTrace
from pgrad.rl.flat_call import flat_caller

#: Members' updates vectorized over a member axis where the update allows
#: (:mod:`agents.update.vectorized`); False: the shared trace run once per member, which gives
#: each member its own run's numbers bit for bit.
VECTORIZE = True
#: Where vectorizing pays (measured Dec 7, 2 cores, one intra-op thread; docs/populations.md):
#: groups of at least this many members (groups of 2 ran no faster, and PPO's vectorized trace
#: costs seconds more than the shared one) ...
VECTORIZE_MIN_MEMBERS = 4
#: ... whose updates take at most this many env steps each (``n_steps x num_envs``): the
#: update's ops are then too small for TensorFlow to run two members' at once on two cores
#: any faster than one batched op on one; on larger ones (TRPO's 2 x 512 steps, groups of
#: five) the members' own updates side by side ran twice as fast as the batched ones.
VECTORIZE_MAX_STEPS = 256


class BatchedUpdate:
    """One traced call that updates a chosen subset of ``updaters`` on their own inputs.

    Args:
      updaters: each agent's :class:`agents.update.compiled.CompiledUpdate`.

    ``batched(rows, args, fixed_shape)`` with ``rows`` the agents' indices ``[n]``, ``args``
    their :meth:`~agents.update.compiled.CompiledUpdate.inputs` (one tuple each; as numpy
    arrays with ``host=True``, which saves a conversion per input and member where the shared
    trace runs: each position's ``[n, ...]`` stack is converted once and unstacked in the
    graph) returns each one's update result (``(out [K + P], *extra)``, as its own update
    returns it).
    """

    def __init__(self, updaters: Sequence[Any], variables: Sequence[list] | None = None):
        self.updaters = list(updaters)
        self.autograph = False
        self._variables = variables
        #: One member's trace shared by all (:mod:`agents.update.shared_trace`); None: each
        #: member's update traced into the outer graph.
        self.shared: SharedTrace | None = None
        if variables is not None and len(self.updaters) > 1:
            self.shared = SharedTrace(self.updaters, variables, self.autograph)
        self._functions: dict[tuple, Any] = {}  # (rows, arg counts, varying) -> tf.function
        self._concrete: dict[tuple, Any] = {}  # + shapes -> the concrete function's caller
        #: Run the shared trace's members as one vectorized set of ops
        #: (:mod:`agents.update.vectorized`) where the update allows and it pays (:meth:`_pays`);
        #: the reason a group's did not in ``not_vectorized``.
        self.vectorize = VECTORIZE
        self.not_vectorized: str | None = None
        self._pure: dict[tuple, vectorized.PureUpdate] = {}  # (n, input shapes) -> its trace

    @property
    def vectorized(self) -> bool:
        """Whether a vectorized update (:mod:`agents.update.vectorized`) has been built."""
        return bool(self._pure) and self.vectorize

    def tracing_count(self) -> int:
        """Traces of the members' update code so far: the shared one's, the vectorized ones'
        (one per group size and shape), and those of outer functions that trace each member's
        (one per subset and shape, never per call)."""
        shared = self.shared.tracing_count() if self.shared is not None else 0
        return shared + len(self._pure) + sum(f.experimental_get_tracing_count() for k, f in
                            self._functions.items() if k[-1] != "shared")

    def _function(self, rows: tuple[int, ...], counts: tuple[int, ...], varying: bool):
        key = (rows, counts, varying)
        fn = self._functions.get(key)
        if fn is None:
            updaters = [self.updaters[i] for i in rows]

            def update_all(*flat):
                out, at = [], 0
                for updater, n in zip(updaters, counts):
                    out.append(tuple(updater._update(*flat[at: at + n])))
                    at += n
                return tuple(out)

            fn = self._functions[key] = tf.function(
                update_all, autograph=self.autograph, reduce_retracing=varying)
        return fn

    def __call__(self, rows: Sequence[int], args: Sequence[tuple], fixed_shape: bool) -> list:
        rows = tuple(int(i) for i in rows)
        try:
            return list(self._run(rows, args, fixed_shape))
        except Exception as err:  # a transform that needs autograph: traced again with it
            if self.autograph or not needs_autograph(err):
                raise
            self.autograph = True
            self._functions.clear()
            self._concrete.clear()
            self._pure.clear()
            if self.shared is not None:
                self.shared = SharedTrace(self.updaters, self.shared.variables, True)
            return list(self._run(rows, args, fixed_shape))

    def _run(self, rows: tuple[int, ...], args: Sequence[tuple], fixed_shape: bool):
        if fixed_shape and self.shared is not None and len(rows) > 1:
            stacked = _stacked(args)
            if stacked is not None:  # numpy inputs of one shape: one conversion per position
                call = self._stacked_call(rows, args, stacked)
                if call is not None:
                    return call(*[tf.constant(x) for x in stacked if x is not None])
        args = [tuple(tf.constant(x) if isinstance(x, np.ndarray) else x for x in a)
                for a in args]
        counts = tuple(len(a) for a in args)
        flat = [x for a in args for x in a]
        fn = self._function(rows, counts, not fixed_shape)
        if not fixed_shape:  # whole-episode batches: a new shape each round (relaxed once)
            return fn(*flat)
        key = (rows, counts, tuple(None if x is None else tuple(x.shape) for x in flat))
        call = self._concrete.get(key)
        if call is None and self.shared is not None:
            call = self._shared_call(rows, args, counts, key)
        if call is None:
            specs = [s for a, i in zip(args, rows) for s in self.updaters[i].io.signature(a)]
            call = self._concrete[key] = flat_caller(fn.get_concrete_function(*specs))
        return call(*flat)  # one tuple per agent, as the outer function returns them

    def _shared_call(self, rows: tuple[int, ...], args: Sequence[tuple], counts: tuple,
                     key: tuple) -> Any:
        """The caller of one outer graph that runs the shared trace once per member of
        ``rows`` on its own inputs and variables; None (and no sharing from now on) if a
        member's inputs or captures do not fit the template's."""
        assert self.shared is not None
        shapes = {tuple(None if x is None else tuple(x.shape) for x in a) for a in args}
        conc = self.shared.concrete(args[0]) if len(shapes) == 1 else None
        captures: list[list] = []
        for i in rows:
            got = None if conc is None else self.shared.captures(conc, i)
            if got is None:
                self.shared = None  # each member's own trace from now on
                return None
            captures.append(got)
        assert conc is not None

        def update_all(*flat):
            out, at = [], 0
            for caps, n in zip(captures, counts):
                inputs = [x for x in flat[at: at + n] if x is not None]
                result = conc._call_flat(inputs, caps)
                out.append(tuple(result) if isinstance(result, (tuple, list)) else (result,))
                at += n
            return tuple(out)

        fn = self._functions[(rows, counts, "shared")] = tf.function(update_all, autograph=False)
        specs = [s for a, i in zip(args, rows) for s in self.updaters[i].io.signature(a)]
        call = self._concrete[key] = flat_caller(fn.get_concrete_function(*specs))
        return call

    def _stacked_call(self, rows: tuple[int, ...], args: Sequence[tuple],
                      stacked: list) -> Any:
        """The caller of one outer graph taking each input position's ``[n, ...]`` stack of
        the members' (``stacked``, None where every member has None), unstacking it and
        running the shared trace once per member; None where the trace is not shared."""
        key = ("stacked", rows, tuple(None if x is None else (x.shape, x.dtype.str)
                                      for x in stacked))
        call = self._concrete.get(key)
        if call is not None:
            return call
        assert self.shared is not None
        n = len(rows)
        if self.vectorize and self._pays(n):
            call = self._vectorized_call(rows, stacked, key)
            if call is not None:
                return call
        specs = [None if x is None else tf.TensorSpec(x.shape, tf.as_dtype(x.dtype))
                 for x in args[0]]
        conc = self.shared.concrete(tuple(specs))
        captures = [self.shared.captures(conc, i) for i in rows]
        if any(c is None for c in captures):
            self.shared = None  # each member's own trace from now on
            return None

        def update_stacked(*given):
            columns = [tf.unstack(x, num=n) for x in given]
            out = []
            for k, caps in enumerate(captures):
                result = conc._call_flat([c[k] for c in columns], caps)
                out.append(tuple(result) if isinstance(result, (tuple, list)) else (result,))
            return tuple(out)

        fn = self._functions[(rows, "stacked", key[2], "shared")] = tf.function(
            update_stacked, autograph=False)
        in_specs = [tf.TensorSpec((n, *x.shape[1:]), tf.as_dtype(x.dtype)) for x in stacked
                    if x is not None]
        call = self._concrete[key] = flat_caller(fn.get_concrete_function(*in_specs))
        return call

    def _pays(self, n: int) -> bool:
        """Whether vectorizing a group of ``n`` members pays (:data:`VECTORIZE_MIN_MEMBERS`,
        :data:`VECTORIZE_MAX_STEPS`); else the shared trace runs once per member and
        :attr:`not_vectorized` says why."""
        cfg = getattr(self.updaters[0], "cfg", None)
        steps = int(cfg.n_steps) * int(cfg.num_envs) if cfg is not None else 0
        if n < VECTORIZE_MIN_MEMBERS:
            self.not_vectorized = (f"a group of {n} member(s): vectorizing pays from "
                                   f"{VECTORIZE_MIN_MEMBERS} (agents.update.batched)")
            return False
        if not 0 < steps <= VECTORIZE_MAX_STEPS:
            self.not_vectorized = (f"updates of {steps} env steps: vectorizing pays up to "
                                   f"{VECTORIZE_MAX_STEPS} (agents.update.batched)")
            return False
        return True

    def _vectorized_call(self, rows: tuple[int, ...], stacked: list, key: tuple) -> Any:
        """The caller of the vectorized update of ``rows`` (:mod:`agents.update.vectorized`;
        one pure trace per group size and shapes), or None (and no vectorizing from now on,
        the reason in :attr:`not_vectorized`) where the update cannot run so."""
        assert self.shared is not None
        shapes = (len(rows), key[2])
        try:
            pure = self._pure.get(shapes)
            if pure is None:
                pure = self._pure[shapes] = vectorized.PureUpdate(self.shared, len(rows),
                                                                  stacked)
            fn, call = vectorized.build(self.shared, rows, pure)
        except vectorized.NotVectorizable as err:
            self.vectorize = False  # the shared trace once per member from now on
            self.not_vectorized = str(err)
            self._pure.clear()
            return None
        self._functions[(rows, "vectorized", key[2], "shared")] = fn
        self._concrete[key] = call
        return call


def _stacked(args: Sequence[tuple]) -> list | None:
    """Each input position's ``[n, ...]`` numpy stack of the members' ``args`` (None where all
    are None), or None unless every input is a numpy array (or None at the same positions) of
    one shape and dtype across the members."""
    first = args[0]
    out: list = []
    for j, x in enumerate(first):
        column = [a[j] for a in args]
        if x is None:
            if any(c is not None for c in column):
                return None
            out.append(None)
            continue
        if not all(isinstance(c, np.ndarray) and c.shape == x.shape and c.dtype == x.dtype
                   for c in column):
            return None
        out.append(np.stack(column))
    return out
