"""Acting for a recurrent policy with an encoder (a CNN before the core): one compiled call.

The numpy mirror (:class:`pgrad.rl.acting.policy.NumpyPolicy`) copies Dense layers and the core
only; with an encoder in front, :class:`CompiledRecurrentActor` runs ``encoder -> core -> actor`` as
one traced ``tf.function`` on the live Keras variables (as
:class:`pgrad.rl.acting.compiled_actor.CompiledActor` does for feed-forward encoded policies) and
samples with the same numpy samplers, so acting reads exactly the Keras model's parameters.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from pgrad.rl.acting.compiled_actor import JIT_COMPILE, CompiledActor
from pgrad.rl.models.networks import ActorCritic
from pgrad.rl.observations.spaces import ObsLayout


class CompiledRecurrentActor(CompiledActor):
    """:class:`CompiledActor` with the state: :meth:`step` as ``NumpyPolicy.step``.

    Args:
      net: a recurrent network with an encoder; layout: the observation layout it reads.
    """

    def __init__(self, net: ActorCritic, layout: ObsLayout, jit_compile: bool | None = None):
        super().__init__(net, layout, jit_compile)
        self.state_size = net.state_sizes[0]
        jit = JIT_COMPILE if jit_compile is None else bool(jit_compile)
        self._step_fn = tf.function(self._step_params, autograph=False, jit_compile=jit)
        self._step_concrete: Any = None

    def _step_params(self, state, episode_start, *parts):
        keep = 1.0 - tf.cast(episode_start, tf.float32)[:, None]  # [N, 1]
        return self.net.actor_step(self.layout.join(parts), state * keep)

    def step(self, obs: Any, state: np.ndarray, episode_start: np.ndarray | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
        """``(observations (the layout's parts), [N, S] state, [N] episode starts or None)`` ->
        ``([N, param_size], [N, S] next state)``; rows that start an episode start from zeros."""
        if self._step_concrete is None:  # one trace: the batch dimension left open
            specs = self.layout.split(self.layout.tensor_specs(names=False))
            self._step_concrete = self._step_fn.get_concrete_function(
                tf.TensorSpec([None, self.state_size], tf.float32),
                tf.TensorSpec([None], tf.bool), *specs)
        parts = [tf.constant(np.asarray(x, p.dtype))
                 for x, p in zip(self.layout.split(obs), self.layout.parts)]
        rows = int(parts[0].shape[0])
        start = (np.zeros(rows, bool) if episode_start is None
                 else np.asarray(episode_start, bool).reshape(rows))
        params, after = self._step_concrete(tf.constant(state, tf.float32), tf.constant(start),
                                            *parts)
        return params.numpy(), after.numpy()

    def forward(self, obs: Any, with_value: bool = False
                ) -> tuple[np.ndarray, np.ndarray | None]:
        raise ValueError("a recurrent policy acts with its state: CompiledRecurrentActor.step")
