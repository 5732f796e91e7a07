"""Acting for policies the numpy mirror does not copy: one compiled TensorFlow call per step.

A CNN's forward pass is work a TensorFlow call amortises (NatureCNN on 8 frames of 84x84x4 is a
few milliseconds, the call's own overhead ~0.1-0.3 ms), and a user's Keras encoder cannot be
mirrored at all. :class:`CompiledActor` computes the distribution parameters on the batch with
one traced ``tf.function`` (batch dimension left open, so one trace serves every batch size)
on the live Keras variables, then samples with the numpy samplers of :mod:`pgrad.rl.acting.policy`:
from the same parameters and the same generator it draws exactly the actions the numpy mirror
would. Its interface is :class:`pgrad.rl.acting.policy.NumpyPolicy` 's, so the agent, the rollout
workers and evaluation use either without knowing which.

Where actor and critic share the encoder (SB3's default for images), the same call can also
return the critic's ``V(o_t)`` (:meth:`CompiledActor.forward` with ``with_value``): one encoder
pass gives both, and the update then skips its own value pass over the rollout's observations
(:attr:`CompiledActor.fused_values`; docs/performance.md, "V(o_t) from the acting call").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from pgrad.rl.acting.sampling import NumpySampling
from pgrad.rl.flat_call import flat_caller
from pgrad.rl.models.networks import ActorCritic
from pgrad.rl.observations.spaces import ObsLayout

#: Compile the acting call with XLA. Off: no clear gain measured (docs/performance.md, "Images"),
#: and XLA compiles again for every new batch size.
JIT_COMPILE = False


class CompiledActor(NumpySampling):
    """Distribution parameters from a compiled call, actions from the numpy samplers.

    Args:
      net: the networks (acting reads their live variables: nothing to copy after an update).
      layout: the observation layout the network reads.
      jit_compile: compile the call with XLA (default :data:`JIT_COMPILE`).
    """

    def __init__(self, net: ActorCritic, layout: ObsLayout, jit_compile: bool | None = None):
        self.net, self.head, self.layout = net, net.head, layout
        jit = JIT_COMPILE if jit_compile is None else bool(jit_compile)
        self._fn = tf.function(self._params, autograph=False, jit_compile=jit)
        self._concrete: Callable[..., tf.Tensor] | None = None
        self._fn_value = tf.function(self._params_and_value, autograph=False, jit_compile=jit)
        self._concrete_value: Callable[..., tuple[tf.Tensor, tf.Tensor]] | None = None
        self._vars = list(net.policy_variables)
        self._log_std_var = getattr(self.head, "log_std", None)
        self.log_std: np.ndarray | None = None
        self.sync()

    @property
    def fused_values(self) -> bool:
        """Whether :meth:`forward` gets ``V(o_t)`` from the acting call itself: a critic on the
        actor's encoder (one encoder pass for both). With its own encoder the critic would
        add a second CNN pass to every acting call, on batches of ``B`` rows, where the
        update's pass runs on thousands at once; such a policy leaves ``V`` to the update."""
        net = self.net
        return (net.critic is not None and net.encoder is not None
                and net.critic_encoder is None and not net.recurrent)

    def _params(self, *parts):
        return self.net.params(self.layout.join(parts))

    def _params_and_value(self, *parts):
        # The actor's outputs are the same ops on the same features as _params: equal params,
        # so the same actions (tested).
        return self.net.params_and_value(self.layout.join(parts))

    def _parts(self, obs) -> list[tf.Tensor]:
        return [tf.constant(np.asarray(x, p.dtype))
                for x, p in zip(self.layout.split(obs), self.layout.parts)]

    def _traced(self, fn) -> Callable[..., Any]:
        """``fn`` 's concrete function on the layout's parts, batch dimension open, called
        through the flat entry point (the public call re-binds the arguments every step)."""
        specs = self.layout.split(self.layout.tensor_specs(names=False))
        return flat_caller(fn.get_concrete_function(*specs))

    def _call(self, obs) -> tf.Tensor:
        if self._concrete is None:
            self._concrete = self._traced(self._fn)
        return self._concrete(*self._parts(obs))

    def forward(self, obs: Any, with_value: bool = False
                ) -> tuple[np.ndarray, np.ndarray | None]:
        """Observations (the layout's parts) -> ``([N, param_size]``, ``[N]`` values or None).

        With ``with_value`` and :attr:`fused_values` the values come from the same compiled
        call as the parameters; otherwise from a separate critic call."""
        if with_value and self.fused_values:
            if self._concrete_value is None:
                self._concrete_value = self._traced(self._fn_value)
            params, value = self._concrete_value(*self._parts(obs))
            return params.numpy(), value.numpy()
        params = self._call(obs).numpy()
        value = None
        if with_value and self.net.critic is not None:
            value = self.net.value(self.layout.to_tensors(obs)).numpy()
        return params, value

    def sync(self) -> None:
        """Re-reads what acting keeps in numpy (the Gaussian log-std) from the variables."""
        self.log_std = None if self._log_std_var is None else self._log_std_var.numpy()

    # -- the update's output and rollout workers ----------------------------------------------

    def update_output(self) -> tf.Tensor:
        """``[1 + S]`` (in the update's graph): 0 if every policy weight is finite (else NaN),
        then the flat log-std of a Gaussian head (``S`` values, or none). The weights
        themselves are the live variables: nothing else needs copying."""
        probe = tf.add_n([tf.reduce_sum(tf.cast(v, tf.float32) * 0.0) for v in self._vars])
        out = [tf.reshape(probe, [1])]
        if self._log_std_var is not None:
            out.append(tf.reshape(tf.cast(self._log_std_var, tf.float32), [-1]))
        return tf.concat(out, 0)

    def load_update_output(self, out: np.ndarray) -> None:
        if self._log_std_var is not None:
            self.log_std = np.asarray(out[1:], np.float32).reshape(self._log_std_var.shape)

    def flat_weights(self) -> tf.Tensor:
        """``[P]`` every policy variable, flattened and concatenated."""
        return tf.concat([tf.reshape(tf.cast(v, tf.float32), [-1]) for v in self._vars], 0)

    def flat_numpy(self) -> np.ndarray:
        """``[P]`` float32: the policy's weights (for :meth:`load_flat` on a copy elsewhere)."""
        return np.concatenate([np.ravel(v.numpy()) for v in self._vars]).astype(np.float32)

    def load_flat(self, flat: np.ndarray) -> None:
        """Assigns the policy's weights from a :meth:`flat_numpy` vector."""
        flat = np.asarray(flat, np.float32)
        sizes = [int(np.prod(v.shape)) for v in self._vars]
        if sum(sizes) != flat.size:
            raise ValueError(f"load_flat got {flat.size} values for {sum(sizes)} policy weights.")
        at = 0
        for v, size in zip(self._vars, sizes):
            v.assign(flat[at: at + size].reshape(v.shape))
            at += size
        self.sync()
