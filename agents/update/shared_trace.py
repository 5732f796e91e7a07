"""One traced update reused by every member of a population.

The members of a population (:mod:`agents.population`) are the same agent built with other
seeds: their update graphs are op for op the same and differ only in the variables they read
and write (weights, optimizer slots, chain state, counters, normaliser statistics), which a
traced ``tf.function`` holds as *captured inputs*. :class:`SharedTrace` traces the update of one
member (the template) once per input shape and runs it for any member by handing the concrete
function that member's variables in place of the template's, in the same order
(:func:`member_variables` lines them up). Tracing costs ~0.85 s of CPU per member (a 64-64 A2C
update); shared, a population of N pays it once instead of N times.

Only where every captured input of the template is one of its variables (found in
:func:`member_variables`, with a counterpart of the same shape and dtype in each member) is the
trace shared; anything else (a user's transform that closes over a tensor of its own) makes
:meth:`SharedTrace.captures` return None, and the caller traces each member's update itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf


def member_variables(agent: Any) -> list[tf.Variable]:
    """Every variable of ``agent``'s checkpoint, in an order that is the same for agents of one
    class and config: its trackables by name, each one's ``variables`` in their own order."""
    out: list[tf.Variable] = []
    for _, obj in sorted(agent.trackables().items()):
        if isinstance(obj, tf.Variable):
            out.append(obj)
        else:
            out.extend(getattr(obj, "variables", ()))
    return out


class SharedTrace:
    """The template member's traced update, and each member's variables in its capture order.

    Args:
      updaters: each member's :class:`agents.update.compiled.CompiledUpdate`; the first is the
        template.
      variables: each member's :func:`member_variables` (aligned with ``updaters``).
      autograph: trace with autograph (a transform that needs it).
    """

    def __init__(self, updaters: Sequence[Any], variables: Sequence[list], autograph: bool):
        self.updaters, self.variables = list(updaters), [list(v) for v in variables]
        self.fn = tf.function(self.updaters[0]._update, autograph=autograph)
        self._concrete: dict[tuple, Any] = {}
        self._captures: dict[tuple, list | None] = {}

    def tracing_count(self) -> int:
        return self.fn.experimental_get_tracing_count()

    def concrete(self, args: tuple) -> Any:
        """The template's update traced for ``args``' shapes (once per shape); every member's
        ``metric_keys`` then name its outputs, as its own trace would have set them."""
        key = tuple(None if x is None else tuple(x.shape) for x in args)
        conc = self._concrete.get(key)
        if conc is None:
            template = self.updaters[0]
            conc = self._concrete[key] = self.fn.get_concrete_function(
                *template.io.signature(args))
            for updater in self.updaters[1:]:  # trace-time names, the same for every member
                updater.metric_keys = list(template.metric_keys)
                updater.step.extra_keys = template.step.extra_keys
        return conc

    def captures(self, conc: Any, row: int) -> list | None:
        """Member ``row``'s inputs for ``conc``'s captured ones (its variables' handles in the
        template's order), or None if one of them is not a variable with a counterpart."""
        key = (id(conc), row)
        if key not in self._captures:
            index = {id(v.handle): i for i, v in enumerate(self.variables[0])}
            mine = self.variables[row]
            out: list = []
            for cap in conc.captured_inputs:
                i = index.get(id(cap))
                if (i is None or i >= len(mine) or mine[i].shape != self.variables[0][i].shape
                        or mine[i].dtype != self.variables[0][i].dtype):
                    break
                out.append(mine[i].handle)
            else:
                self._captures[key] = out
                return out
            self._captures[key] = None
        return self._captures[key]
