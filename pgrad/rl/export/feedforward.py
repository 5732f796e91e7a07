"""The feed-forward exports: a Dense-only actor as plain matmuls, an encoder's traced through Keras.

Both are :class:`pgrad.rl.export.module.ExportedModule` variants (the exported functions are
built there); each defines how the distribution parameters ``[N, param_size]`` are computed from
observation rows. :func:`pgrad.rl.export.saved_model.export_policy` picks the variant.
"""

from __future__ import annotations

import types

import keras
import tensorflow as tf

from pgrad.rl.acting.policy import dense_layers
from pgrad.rl.export.module import ExportedModule, observation_spec
from pgrad.rl.models.networks import ActorCritic
from pgrad.rl.observations import spaces


def _tf_activation(name: str):
    return tf.tanh if name == "tanh" else tf.nn.relu


class DenseExport(ExportedModule):
    """Deterministic policy with copies of the weights and normaliser statistics: a Dense-only
    actor (trunk and actor layers) as plain matmuls."""

    def __init__(self, net: ActorCritic, obs_norm, obs_space):
        super().__init__(name="policy")
        self._acts = []
        self.weights, self.biases = [], []
        for key in ("trunk", "actor"):
            for w, b, act in dense_layers(getattr(net, key)):
                self.weights.append(tf.Variable(w.numpy(), trainable=False))
                self.biases.append(tf.Variable(b.numpy(), trainable=False))
                self._acts.append(act)
        self._copy_statistics(net, obs_norm)
        # Plain-Python context for tracing only; kept off the module so that nothing but the
        # variables above is saved (no Keras objects in the SavedModel).
        self._context = types.SimpleNamespace(head=net.head, space=obs_space)
        flat = tf.TensorSpec([None, spaces.flat_dim(obs_space)], tf.float32,
                             name="flat_observation")
        self._functions(observation_spec(obs_space), flat)

    def _params(self, x):
        if self.norm_mean is not None:
            x = tf.clip_by_value((x - self.norm_mean) / self.norm_std, -self._clip, self._clip)
        latent = x
        for w, b, act in zip(self.weights, self.biases, self._acts):
            latent = x
            x = tf.matmul(x, w) + b
            if act is not None:
                x = _tf_activation(act)(x)
        if self._context.head.uses_latent:  # gSDE: [outputs, last hidden features]
            return tf.concat([x, latent], axis=1)
        return x


class EncoderExport(ExportedModule):
    """As :class:`DenseExport`, for a network with an encoder: the Keras forward pass traced
    with every variable it reads mapped to the module's own copy."""

    def __init__(self, net: ActorCritic, obs_norm, obs_space):
        super().__init__(name="policy")
        layout = spaces.obs_layout(obs_space)
        sources = self._sources(net)
        self.copies = [tf.Variable(v.numpy(), trainable=False) for v in sources]
        self._copy_statistics(net, obs_norm)
        self._context = types.SimpleNamespace(head=net.head, space=obs_space, net=net,
                                              layout=layout, sources=sources)
        if layout.flat:  # vector observations, the user's encoder: inputs as for MLP policies
            action_spec = observation_spec(obs_space)
            params_spec = tf.TensorSpec([None, spaces.flat_dim(obs_space)], tf.float32,
                                        name="flat_observation")
        else:
            action_spec = params_spec = _parts_spec(layout)
        self._functions(action_spec, params_spec)

    def _preprocess(self, obs):
        if self._context.layout.flat:
            return super()._preprocess(obs)
        return obs  # the parts, as pgrad.rl.observations.spaces preprocesses them

    @staticmethod
    def _sources(net: ActorCritic) -> list:
        """The Keras variables the traced forward pass reads (each gets a copy)."""
        if net.encoder is None:
            raise ValueError("an encoder policy's export needs its encoder")
        return list(net.encoder.variables) + list(net.actor.variables)

    def _normalised(self, x):
        """The observation (flat, or the layout's parts) with its vector part normalised."""
        ctx = self._context
        vector = ctx.layout.vector(x)
        if vector is not None:
            vector = tf.cast(vector, tf.float32)
            if self.norm_mean is not None:
                vector = tf.clip_by_value((vector - self.norm_mean) / self.norm_std,
                                          -self._clip, self._clip)
            x = ctx.layout.with_vector(x, vector)
        return x

    def _copies_scope(self) -> keras.StatelessScope:
        """Inside it the Keras layers read the module's copies, not the live variables."""
        mapping = [(v, tf.convert_to_tensor(c)) for v, c in zip(self._context.sources,
                                                                 self.copies)]
        return keras.StatelessScope(state_mapping=mapping)

    def _params(self, x):
        x = self._normalised(x)
        with self._copies_scope():
            return self._context.net.params(x)


def _parts_spec(layout: spaces.ObsLayout):
    """The export's input: the layout's parts (a single part is named ``observation``)."""
    if layout.single:
        p = layout.parts[0]
        return tf.TensorSpec([None, *p.shape], tf.as_dtype(p.dtype), name="observation")
    return layout.tensor_specs()
