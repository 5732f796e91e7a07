"""The export of a recurrent policy: its state is an explicit input and output.

As :mod:`pgrad.rl.export.saved_model` (plain TensorFlow ops and the module's own variables; loading
needs
neither pgrad nor Keras), but every function takes, after the observation, the policy's state
and whether the observation starts an episode, and returns the state after the step:

* ``action(observation, state, episode_start)`` -> ``{"action", "next_state"}`` (also the
  serving signature); ``sample(observation, state, episode_start, seed)``,
  ``sample_with_noise(observation, state, episode_start, noise)``,
  ``action_masked(observation, state, episode_start, action_mask)`` -> ``{"action",
  "next_state"}``; ``distribution_params(observation, state, episode_start)`` -> the
  parameters by name and ``"next_state"``; ``params(flat_observation, state, episode_start)``
  -> ``{"params", "next_state"}`` (for :class:`pgrad.rl.export.saved_model.ExportedPolicy`). The
  output
  is ``next_state``, not ``state``: ONNX gives inputs and outputs one namespace.
* ``state``: float32 ``[S]`` for one observation, ``[N, S]`` for a batch (``S`` is
  ``state_size`` in ``pgrad_policy.json``, and the signatures' ``state`` shape): zeros at the
  first step. ``episode_start``: bool, ``[]`` or ``[N]``: rows where it is set start from zeros
  (the state is reset before the step, as in training: :mod:`pgrad.rl.models.recurrent`).

A host loop, as Stable-Baselines3's ``predict``::

    state, start = np.zeros((n, S), np.float32), np.ones(n, bool)
    out = loaded.action(obs, state, start); state, start = out["next_state"], done

The actor's core, its encoder (a CNN, if any) and its head layer are traced through Keras with
every variable read from the module's copy (as :class:`pgrad.rl.export.feedforward.EncoderExport`).
"""

from __future__ import annotations

import tensorflow as tf

from pgrad.rl import distributions as dist_lib
from pgrad.rl.export import heads as export_heads
from pgrad.rl.export.feedforward import EncoderExport
from pgrad.rl.export.module import SEED_SPEC, compiled, traced, unrows
from pgrad.rl.models.networks import ActorCritic

STATE = "state"
START = "episode_start"
#: The output: the state after the step (not ``state``: ONNX names inputs and outputs alike).
NEXT = "next_state"


class ExportedRecurrentPolicy(EncoderExport):
    """A recurrent actor (encoder if any -> core -> actor layers) with its state as input and
    output (see the module docstring)."""

    @staticmethod
    def _sources(net: ActorCritic) -> list:
        enc = list(net.encoder.variables) if net.encoder is not None else []
        core = net.core
        if core is None:
            raise ValueError("ExportedRecurrentPolicy exports recurrent networks only")
        return enc + list(core.variables) + list(net.actor.variables)

    def _functions(self, obs_spec, params_spec) -> None:
        ctx = self._context
        ctx.obs_spec, ctx.params_spec = obs_spec, params_spec
        ctx.noise_size = export_heads.noise_size(ctx.head)
        ctx.state_size = ctx.net.state_sizes[0]
        obs = tf.nest.map_structure(lambda s: tf.TensorSpec(None, s.dtype, s.name), obs_spec)
        carry = [tf.TensorSpec(None, tf.float32, name=STATE), tf.TensorSpec(None, tf.bool,
                                                                            name=START)]
        noise = tf.TensorSpec(None, tf.float32, name="noise")
        self.action = compiled(self._carry_action, [obs, *carry])
        self.sample = compiled(self._carry_sample, [obs, *carry, SEED_SPEC])
        self.sample_with_noise = compiled(self._carry_sample_with_noise,
                                                 [obs, *carry, noise])
        self.distribution_params = compiled(self._carry_distribution_params,
                                                   [obs, *carry])
        self.params = compiled(self._flat_params, [params_spec, *self._state_specs()])
        self.action_masked = None
        if isinstance(ctx.head, (dist_lib.CategoricalHead, dist_lib.MultiCategoricalHead)):
            ctx.mask_width = ctx.head.param_size
            self.action_masked = compiled(self._carry_action_masked, [
                obs, *carry, tf.TensorSpec(None, tf.bool, name="action_mask")])

    def signatures(self) -> dict:
        """As :meth:`pgrad.rl.export.module.ExportedModule.signatures`, with ``state [N, S]`` and
        ``episode_start [N]`` after the observation."""
        ctx = self._context
        carry = self._state_specs()
        noise = tf.TensorSpec([None, ctx.noise_size], tf.float32, name="noise")
        obs = ctx.obs_spec
        inputs = {"action": [obs, *carry], "sample": [obs, *carry, SEED_SPEC],
                  "sample_with_noise": [obs, *carry, noise],
                  "distribution_params": [obs, *carry]}
        if self.action_masked is not None:
            inputs["action_masked"] = [obs, *carry, tf.TensorSpec(
                [None, ctx.mask_width], tf.bool, name="action_mask")]
        return {name: traced(getattr(self, f"_carry_{name}"), specs)
                for name, specs in inputs.items()}

    def _state_specs(self) -> list[tf.TensorSpec]:
        """``state [N, S]`` float32 and ``episode_start [N]`` bool: batched, of fixed rank."""
        return [tf.TensorSpec([None, self._context.state_size], tf.float32, name=STATE),
                tf.TensorSpec([None], tf.bool, name=START)]

    def _step(self, x, state, episode_start):
        """``([N, ...] preprocessed rows, [N, S], [N] bool)`` -> ``([N, param_size]`` params,
        ``[N, S]`` the state after the step)."""
        keep = 1.0 - tf.cast(tf.reshape(episode_start, [-1, 1]), tf.float32)  # [N, 1]
        x = self._normalised(x)
        with self._copies_scope():
            return self._context.net.actor_step(x, state * keep)

    def _forward_carry(self, observation, state, episode_start):
        """One observation (``state [S]``, ``episode_start []``) or a batch -> ``(params
        [N, param_size], the leading shape, the state after the step [N, S])``."""
        rows, lead = self._rows(observation)
        x = self._preprocess(rows)
        n, size = tf.shape(tf.nest.flatten(rows)[0])[0], self._context.state_size
        what = (f"state: [{size}] float32 per observation and episode_start: one bool per "
                "observation")
        checks = [tf.debugging.assert_equal(tf.size(state), n * size, message=what),
                  tf.debugging.assert_equal(tf.size(episode_start), n, message=what)]
        with tf.control_dependencies(checks):
            state = tf.reshape(tf.cast(state, tf.float32), [-1, size])
            episode_start = tf.reshape(episode_start, [-1])
        params, state = self._step(x, state, episode_start)
        return params, lead, state

    def _out(self, name: str, value, lead, state) -> dict:
        return {name: unrows(value, lead), NEXT: unrows(state, lead)}

    def _carry_action(self, observation, state, episode_start):
        x, lead, state = self._forward_carry(observation, state, episode_start)
        return self._out("action", self._mode(x), lead, state)

    def _carry_action_masked(self, observation, state, episode_start, action_mask):
        x, lead, state = self._forward_carry(observation, state, episode_start)
        return self._out("action", self._masked_mode(x, action_mask), lead, state)

    def _carry_sample_with_noise(self, observation, state, episode_start, noise):
        x, lead, state = self._forward_carry(observation, state, episode_start)
        return self._out("action", self._noise_sample(x, noise), lead, state)

    def _carry_sample(self, observation, state, episode_start, seed):
        x, lead, state = self._forward_carry(observation, state, episode_start)
        return self._out("action", self._seeded_sample(x, seed), lead, state)

    def _carry_distribution_params(self, observation, state, episode_start):
        x, lead, state = self._forward_carry(observation, state, episode_start)
        out = {k: unrows(v, lead) for k, v in self._dist(x).items()}
        out[NEXT] = unrows(state, lead)
        return out

    def _flat_params(self, flat, state, episode_start):
        """``[N, flat_dim]`` flat raw observations (or the parts), ``[N, S]``, ``[N]`` ->
        ``{"params": [N, param_size], "next_state": [N, S]}``."""
        params, state = self._step(flat, state, episode_start)
        return {"params": params, NEXT: state}
