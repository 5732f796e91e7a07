"""A population's updates as one set of operations over a member axis (PureJaxRL's ``vmap``).

Run one after the other, N members' updates cost N times the executor's per-op work (~840 ops
for a 64-64 A2C update, most of its time on these machines: docs/populations.md). Here the
template member's update runs once, under ``tf.vectorized_map``, on values stacked ``[N, ...]``:

1. one outer graph reads every variable the update touches (weights, optimizer slots and
   iterations, learning rates, counters, normaliser statistics, the seed) from each member and
   stacks them ``[N, ...]``;
2. the template's Python update runs as a pure function of those values
   (:func:`pgrad.core.variables_as_values.variables_as_values`) and of the member's inputs, and
   ``tf.vectorized_map`` turns its ops into ops over the member axis (a matmul becomes a batched
   matmul; PPO's epochs loop carries the values as loop variables, and the members' minibatch
   shuffles are each drawn from its own seed, member by member);
3. each member's slice of the new values is assigned to its own variables.

Nothing crosses between members: each slice is computed from that member's values and inputs
only. The maths is the same; batched kernels may sum in another order, so a member equals its
own run to float32 round-off per update, not bit for bit (tests/agents/test_population.py states
the tolerance). :data:`agents.update.batched.VECTORIZE` ``= False`` keeps the shared trace run
member by member, which is bit for bit.

Where the update cannot run this way (an embedding's sparse read, an op ``vectorized_map`` has
no rule for, a stateful random op, a transform holding a tensor of its own), building raises
:class:`NotVectorizable` and the caller keeps the shared trace run once per member
(:mod:`agents.update.shared_trace`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from agents.update.call import needs_autograph
from pgrad.core.variables_as_values import _inner, variables_as_values
from pgrad.rl import flat_call

#: Ops that touch a variable: none may remain in the vectorized part.
_STATEFUL = ("VariableOp", "ResourceGather", "ResourceScatter", "ResourceApply",
             "ResourceSparse", "VarHandleOp")


#: Stateful random ops: vectorized they draw other numbers than the member's own run would.
_RANDOM = {"RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal",
           "Multinomial", "RandomShuffle", "RandomGamma", "RandomPoisson", "RandomPoissonV2",
           "ParameterizedTruncatedNormal"}


class NotVectorizable(Exception):
    """The update cannot run as one vectorized set of ops (the reason in the message)."""


def _reason(err: BaseException) -> str:
    """One line for why ``tf.vectorized_map`` could not convert the update."""
    text = str(err)
    found = re.search(r"No pfor vectorization defined for \w+", text)
    if found:
        return f"tf.vectorized_map: {found.group(0)}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return f"{type(err).__name__}: {(lines or [''])[0][:200]}"


def _op_types(graph: Any) -> set[str]:
    """Every op type in ``graph`` and in the functions it calls (cond branches, loop bodies)."""
    gdef = graph.as_graph_def()
    types = {n.op for n in gdef.node}
    for fn in gdef.library.function:
        types.update(n.op for n in fn.node_def)
    return types


class PureUpdate:
    """The template's update for ``n`` members as one pure, vectorized concrete function.

    Args:
      shared: the population's :class:`agents.update.shared_trace.SharedTrace` (its template
        member's update is traced here; its variables say each member's).
      n: the members it updates at once.
      stacked: each input position's ``[n, ...]`` numpy stack (None where every member has None).

    The update is traced with every variable of the template
    (:func:`agents.update.shared_trace.member_variables`) given as a value; those it reads or
    assigns are ``self.touched`` (their indices there), the only ones the caller reads and
    writes back (the others get zeros, which the update never reads).
    ``self.concrete(inputs [n, ...] each, values [n, ...] each) -> (outputs, new values)``.
    Raises :class:`NotVectorizable`.
    """

    def __init__(self, shared: Any, n: int, stacked: Sequence[Any]):
        template = shared.updaters[0]
        self.n = n
        self.variables = list(shared.variables[0])  # the template's, all of them
        template_vars = self.variables
        accessed: set[int] = set()
        positions = [x is not None for x in stacked]

        def pure(inputs, values):  # [n, ...] each -> (outputs [n, ...], new values [n, ...])
            def one(member):
                given, vals = member
                it = iter(given)
                args = [next(it) if present else None for present in positions]
                with variables_as_values(list(zip(template_vars, vals))) as state:
                    out = template._update(*args)
                    new = [state.value(v) for v in template_vars]
                    accessed.update(state.accessed)
                out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
                return out, new
            return tf.vectorized_map(one, (list(inputs), list(values)),
                                     fallback_to_while_loop=False)

        self.in_specs = [tf.TensorSpec((n, *x.shape[1:]), tf.as_dtype(x.dtype))
                         for x in stacked if x is not None]
        value_specs = [tf.TensorSpec((n, *v.shape), v.dtype) for v in template_vars]
        log = logging.getLogger("tensorflow")
        level = log.level
        log.setLevel(logging.CRITICAL)  # pfor logs an op it cannot convert as an ERROR
        try:
            self.concrete = tf.function(pure, autograph=shared.fn._autograph
                                        ).get_concrete_function(self.in_specs, value_specs)
        except Exception as err:  # an op without a vectorization rule, an assign in a branch
            if needs_autograph(err):  # the caller traces again with autograph, then here too
                raise
            raise NotVectorizable(_reason(err)) from err
        finally:
            log.setLevel(level)
        if self.concrete.captured_inputs:  # one tensor for all: a closure of the template's own
            raise NotVectorizable("the update captures a tensor that is not a member's variable")
        ops = _op_types(self.concrete.graph)  # serialised once: ~1,000 nodes
        stateful = {t for t in ops if any(s in t for s in _STATEFUL)}
        if stateful:
            raise NotVectorizable(
                f"the vectorized update still touches variables ({sorted(stateful)})")
        self.touched: list[int] = [i for i, v in enumerate(template_vars)
                                   if id(_inner(v)) in accessed]
        random = ops & _RANDOM
        if random:
            raise NotVectorizable(f"the update draws from stateful random ops ({sorted(random)})"
                                  ", which vectorized would draw other numbers")
        for updater in shared.updaters[1:]:  # trace-time names, the same for every member
            updater.metric_keys = list(template.metric_keys)
            updater.step.extra_keys = template.step.extra_keys
        self._outer: Any = None

    def outer(self) -> Any:
        """The ``tf.function`` ``(variables [n][touched], *inputs [n, ...]) -> outputs [n, ...]``
        running this update for the ``n`` members whose touched variables it is given (read,
        stacked, :attr:`concrete`, each slice assigned back); one for every group of ``n``."""
        if self._outer is None:
            n, touched, concrete = self.n, self.touched, self.concrete
            template = self.variables
            at = {j: k for k, j in enumerate(touched)}

            def update(members, *given):
                values = [tf.stack([members[r][at[j]].read_value() for r in range(n)])
                          if j in at else tf.zeros((n, *v.shape), v.dtype)
                          for j, v in enumerate(template)]
                out, new = concrete(list(given), values)
                for j in touched:
                    for r, part in enumerate(tf.unstack(new[j], num=n)):
                        members[r][at[j]].assign(part, read_value=False)
                return tuple(out)  # each output [n, ...]: fetched once, sliced per member

            self._outer = tf.function(update, autograph=False)
        return self._outer


def build(shared: Any, rows: Sequence[int], pure: PureUpdate) -> tuple[Any, Any]:
    """``(tf.function, caller)`` of one graph running members ``rows``' updates with ``pure``:
    their touched variables read and stacked, ``pure`` run, each one's slice assigned back.

    The graph takes the members' variables as arguments (their handles), so every group of
    ``pure.n`` members runs the one graph: traced, and optimised by TensorFlow on its first
    call (~0.3 s for an A2C update), once instead of once per group.

    The caller takes the stacked inputs (without the Nones) and returns one output tuple per
    member, as :meth:`agents.update.batched.BatchedUpdate._stacked_call`'s caller does, but of
    numpy arrays: each stacked output is fetched once (one host copy instead of one a member).
    """
    n = len(rows)
    template = pure.variables
    for r in rows:
        mine = shared.variables[r]
        if len(mine) != len(template) or any(
                a.shape != b.shape or a.dtype != b.dtype for a, b in zip(mine, template)):
            raise NotVectorizable(f"member {r}'s variables do not line up with the first's")
    fn = pure.outer()
    mine = [[_inner(shared.variables[r][j]) for j in pure.touched] for r in rows]
    # the concrete function these variables (and aliasing) trace to: the first group's
    # for every group of distinct variables, without tracing again
    concrete = fn.get_concrete_function(mine, *pure.in_specs)
    handles = [v.handle for member in mine for v in member]
    flat = flat_call.FLAT_CALLS and flat_call.flat_call_supported(concrete)
    if flat and len(concrete.inputs) == (len(handles) + len(pure.in_specs)
                                         + len(concrete.captured_inputs)):
        captured = concrete.captured_inputs

        def call(*given):  # the flat entry point (see pgrad.rl.flat_call), handles first
            return concrete._call_flat([*handles, *given], captured)
    else:
        def call(*given):
            return concrete(mine, *given)

    def per_member(*given):
        fetched = [o.numpy() for o in call(*given)]
        return tuple(tuple(f[k] for f in fetched) for k in range(n))

    return fn, per_member
