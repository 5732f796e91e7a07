"""See an update: every minibatch step's batch, the chain's per-step weights and the gradient
norms, handed to a function of yours, without changing the update.

Usage::

    def show(view: UpdateView) -> None:
        for t in view.transforms:
            print(view.update, view.minibatch, t.name, t.after[:4])

    agent.learn(10_000, callbacks=agents.inspection.update_hook.SeeUpdate(show))
    with agents.inspection.update_hook.watch(agent, show):  # or around steps by hand
        agent.step()

How: while a hook is on, the agent's update is a second compiled update built from the same
parts (networks, optimizer, chain state, counters) whose chain leaves are the agent's own, each
also recording what it computed (a :class:`~pgrad.transforms.base.StepScale` leaf its per-step
scale ``c_t``, any leaf before the aggregation on the materialised path the per-step gradient
norms it received and returned), and whose minibatch step records its batch and gradient norms
(:attr:`agents.update.minibatch.MinibatchStep.observer`). The records leave the graph through
``tf.numpy_function`` (so not under ``jit_compile``); the values the update computes are the
same ops on the same inputs: the weights after N updates equal those without the hook (tested).
The hook's function is called after each update, once per minibatch step, in order.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import tensorflow as tf

from agents.learning import Callback
from pgrad.core.per_step import step_norms_squared
from pgrad.transforms import GradientTransform, chain
from pgrad.transforms.base import StepScale, step_scale_update
from pgrad.transforms.chain import flatten

#: The context keys a view carries (``[M]`` each), as the chain sees them (``advantages``
#: standardised when ``normalize_advantage`` is on) plus the current ``log_probs``.
CONTEXT_KEYS = ("advantages", "returns", "values", "rewards", "behaviour_log_probs")


@dataclasses.dataclass
class TransformView:
    """One leaf of the chain in one minibatch step (``[M]`` arrays, None where not computed).

    Attributes:
      name: the transform's name.
      scale: its per-step scale ``c_t`` (a StepScale leaf: ``weight_by``, ``clip_ratio``,
        ``clip_per_step``, ``mean_steps``, ...).
      before: the per-step weight of ``grad log pi_t`` the leaf received (the product of the
        scales before it; ``1`` for the first).
      after: ``before * scale``: the weight it passed on.
      norms_in: the per-step gradient norms it received (a leaf that reads them, or any leaf
        before the aggregation on the materialised path).
      norms_out: the per-step gradient norms it returned (materialised path, before the
        aggregation).
    """

    name: str
    scale: np.ndarray | None = None
    before: np.ndarray | None = None
    after: np.ndarray | None = None
    norms_in: np.ndarray | None = None
    norms_out: np.ndarray | None = None


@dataclasses.dataclass
class UpdateView:
    """What one minibatch step of an update saw (numpy; ``M`` steps in the minibatch).

    Attributes:
      update: the agent's update count this step belongs to (1 for the first update).
      minibatch: the step's index in its update (over every epoch, from 0).
      observations: ``[M, ...]`` as the networks read them (normalised where that is on; a
        dict or tuple of parts for structured observations).
      actions: ``[M, ...]`` as stored.
      context: ``{key: [M]}``: :data:`CONTEXT_KEYS` and the current ``log_probs``.
      transforms: one :class:`TransformView` per leaf of the chain, in order.
      pg_grad_norm: global norm of the chain's output (the policy gradient; with the value and
        entropy terms folded in where the update folds them, ``metrics`` without
        ``pg_grad_norm``).
      grad_norm: global norm of the whole step's gradient, before ``max_grad_norm`` clipping.
      applied: whether the step was applied (not skipped for NaN/Inf or stopped by target_kl).
    """

    update: int
    minibatch: int
    observations: Any
    actions: Any
    context: dict[str, np.ndarray]
    transforms: list[TransformView]
    pg_grad_norm: float = float("nan")
    grad_norm: float = float("nan")
    applied: bool = False


class _Recorder:
    """Collects the records of the update's numpy_function calls into views, in order."""

    def __init__(self, names: list[str], obs_structure: Any, action_structure: Any):
        self.names = names
        self.obs_structure, self.action_structure = obs_structure, action_structure
        self.update = 0
        self.views: list[UpdateView] = []

    # -- called from the graph (numpy arguments) -------------------------------------------------

    def begin(self, *flat: np.ndarray) -> None:
        n_obs = len(tf.nest.flatten(self.obs_structure))
        n_act = len(tf.nest.flatten(self.action_structure))
        obs = tf.nest.pack_sequence_as(self.obs_structure, list(flat[:n_obs]))
        actions = tf.nest.pack_sequence_as(self.action_structure,
                                           list(flat[n_obs:n_obs + n_act]))
        context = dict(zip(CONTEXT_KEYS, (np.array(x) for x in flat[n_obs + n_act:])))
        self.views.append(UpdateView(self.update, len(self.views), obs, actions, context,
                                     [TransformView(n) for n in self.names]))

    def scale(self, index: np.ndarray, scale: np.ndarray, norms: np.ndarray,
              log_probs: np.ndarray) -> None:
        view = self.views[-1]
        leaf = view.transforms[int(index)]
        leaf.scale = np.array(scale)
        leaf.norms_in = np.array(norms) if norms.size else leaf.norms_in
        view.context.setdefault("log_probs", np.array(log_probs))

    def norms(self, index: np.ndarray, norms_in: np.ndarray, norms_out: np.ndarray,
              log_probs: np.ndarray) -> None:
        view = self.views[-1]
        leaf = view.transforms[int(index)]
        leaf.norms_in = np.array(norms_in)
        leaf.norms_out = np.array(norms_out) if norms_out.size else None
        view.context.setdefault("log_probs", np.array(log_probs))

    def end(self, pg_norm: np.ndarray, grad_norm: np.ndarray, applied: np.ndarray) -> None:
        view = self.views[-1]
        view.pg_grad_norm, view.grad_norm = float(pg_norm), float(grad_norm)
        view.applied = bool(applied)
        weight = None
        for leaf in view.transforms:  # the running product of the scales before each leaf
            if leaf.scale is None:
                if leaf.norms_in is not None:  # any function of the per-step gradients: from
                    break  # here on they are no longer weighted log-prob gradients
                continue
            leaf.before = np.ones_like(leaf.scale) if weight is None else weight
            leaf.after = leaf.before * leaf.scale
            weight = leaf.after

    # -- the minibatch step's observer -----------------------------------------------------------

    def batch(self, mb: dict, context: dict) -> None:
        self.obs_structure = tf.nest.map_structure(lambda _: 0, mb["obs"])  # trace time
        self.action_structure = tf.nest.map_structure(lambda _: 0, mb["actions"])
        flat = (tf.nest.flatten(mb["obs"]) + tf.nest.flatten(mb["actions"])
                + [context[k] for k in CONTEXT_KEYS])
        tf.numpy_function(self.begin, flat, [], stateful=True, name="see_update_batch")

    def result(self, grads: list, grad_norm: tf.Tensor, applied: tf.Tensor) -> None:
        pg_norm = tf.linalg.global_norm([tf.convert_to_tensor(g) for g in grads])
        tf.numpy_function(self.end, [pg_norm, grad_norm, applied], [], stateful=True,
                          name="see_update_result")


def _recording(leaf: GradientTransform, index: int, per_step: bool,
               recorder: _Recorder) -> GradientTransform:
    """``leaf`` computing the same values and recording them (see the module docstring)."""
    if isinstance(leaf, StepScale):
        inner = leaf.scale

        def scale(norms, state, *, num_steps, **ctx):
            c, state = inner(norms, state, num_steps=num_steps, **ctx)
            full = tf.broadcast_to(tf.cast(c, tf.float32), tf.reshape(num_steps, [1]))
            seen = tf.zeros([0]) if norms is None else tf.cast(norms, tf.float32)
            tf.numpy_function(recorder.scale, [index, full, seen, ctx["log_probs"]], [],
                              stateful=True, name="see_update_scale")
            return c, state

        changes: dict[str, Any] = {"scale": scale}
        if type(leaf) is StepScale:  # its update is derived from its scale: record there too
            changes["update"] = step_scale_update(scale, leaf.name, leaf.needs_norms,
                                                  leaf.aggregates)
        return dataclasses.replace(leaf, **changes)
    if not per_step:
        return leaf
    inner_update = leaf.update

    def update(grads, state, **ctx):
        out, state = inner_update(grads, state, **ctx)
        norms_in = tf.sqrt(step_norms_squared(list(grads)))
        outs = list(out)
        kept = bool(outs) and outs[0].shape.rank == grads[0].shape.rank
        norms_out = tf.sqrt(step_norms_squared(outs)) if kept else tf.zeros([0])
        tf.numpy_function(recorder.norms, [index, norms_in, norms_out, ctx["log_probs"]], [],
                          stateful=True, name="see_update_norms")
        return out, state

    return dataclasses.replace(leaf, update=update)


class _HookedUpdate:
    """The agent's updater while a hook is on: the recording update, then the views."""

    def __init__(self, updater: Any, recorder: _Recorder, agent: Any):
        self.updater, self.recorder, self.agent = updater, recorder, agent
        self.fn: Callable[[UpdateView], Any] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.updater, name)

    def __call__(self, args: tuple, fixed_shape: bool):
        self.recorder.update = self.agent._synced_updates + 1
        self.recorder.views = []
        out = self.updater(args, fixed_shape)
        views, self.recorder.views = self.recorder.views, []
        if self.fn is not None:
            for view in views:
                self.fn(view)
        return out


def _hooked(agent: Any) -> _HookedUpdate:
    """The agent's recording update (built once per agent and chain; traced on first use)."""
    cached = agent.__dict__.get("_see_update")
    if cached is not None and cached[0] is agent.transform:
        return cached[1]
    if getattr(agent.cfg, "jit_compile", False):
        raise ValueError("see an update: the hook reads the update through Python calls, "
                         "which XLA cannot run; set jit_compile=False while watching.")
    from agents.update.compiled import CompiledUpdate

    leaves = flatten(agent.transform)
    split = next((i for i, t in enumerate(leaves) if t.aggregates), len(leaves))
    recorder = _Recorder([t.name for t in leaves], 0, 0)
    recording = chain(*(_recording(t, i, i <= split, recorder) for i, t in enumerate(leaves)),
                      name=agent.transform.name)
    parts = dataclasses.replace(agent.update_parts(), transform=recording)
    updater = CompiledUpdate(parts)
    updater.step.observer = recorder
    hooked = _HookedUpdate(updater, recorder, agent)
    agent._see_update = (agent.transform, hooked)
    return hooked


@contextlib.contextmanager
def watch(agent: Any, fn: Callable[[UpdateView], Any]) -> Iterator[None]:
    """Calls ``fn(view)`` for each minibatch step of every update inside the block (an
    :class:`UpdateView`); the agent's own update is back afterwards."""
    hooked = _hooked(agent)
    own = agent.updater
    hooked.fn, agent.updater = fn, hooked
    try:
        yield
    finally:
        agent.updater, hooked.fn = own, None


class SeeUpdate(Callback):
    """``learn(..., callbacks=SeeUpdate(fn))``: :func:`watch` over the whole run."""

    def __init__(self, fn: Callable[[UpdateView], Any]):
        self.fn = fn
        self._watch: Any = None

    def on_start(self, loop: Any) -> None:
        self._watch = watch(loop.agent, self.fn)
        self._watch.__enter__()

    def close(self) -> None:
        if self._watch is not None:
            self._watch.__exit__(None, None, None)
            self._watch = None
