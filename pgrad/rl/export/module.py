"""The exported SavedModel's functions, whatever network computes the parameters.

:class:`ExportedModule` is the ``tf.Module`` an export saves: it owns copies of the head's
``log_std`` and the observation normaliser's statistics, and builds the functions of
:mod:`pgrad.rl.export.saved_model` (``action``, ``sample``, ``sample_with_noise``,
``distribution_params``,
``action_masked``, ``params``) and their serving signatures around one method its variants
define: ``_params(x)``, the distribution parameters ``[N, param_size]`` at preprocessed
observation rows. The variants are in :mod:`pgrad.rl.export.feedforward` (Dense-only, encoder)
and :mod:`pgrad.rl.export.recurrent`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import tensorflow as tf

from pgrad.rl import distributions as dist_lib
from pgrad.rl.export import heads as export_heads
from pgrad.rl.observations import spaces

SEED_SPEC = tf.TensorSpec([2], tf.int64, name="seed")


class ExportedModule(tf.Module):
    """The exported functions of an observation, around the variant's ``_params``.

    A variant's ``__init__`` calls ``tf.Module.__init__``, :meth:`_copy_statistics`, sets
    ``self._context`` (a ``types.SimpleNamespace`` with at least ``head`` and ``space``: plain
    Python for tracing only, kept off the saved variables) and then :meth:`_functions`.
    """

    _context: Any

    def _copy_statistics(self, net: Any, obs_norm: Any) -> None:
        """Copies of the head's ``log_std`` (if any) and the normaliser's mean and std."""
        if getattr(net.head, "log_std", None) is not None:
            self.log_std = tf.Variable(net.head.log_std.numpy(), trainable=False)
        self.norm_mean = self.norm_std = None
        self._clip = 0.0
        if obs_norm is not None:
            self.norm_mean = tf.Variable(obs_norm.mean.numpy().astype(np.float32), trainable=False)
            std = np.sqrt(obs_norm.var.numpy() + obs_norm.eps).astype(np.float32)
            self.norm_std = tf.Variable(std, trainable=False)
            self._clip = obs_norm.clip

    def _params(self, x):
        """``[N, param_size]`` distribution parameters at preprocessed rows (the variant's)."""
        raise NotImplementedError(f"{type(self).__name__} does not define _params")

    def _functions(self, obs_spec, params_spec) -> None:
        """The exported functions (see the module docstring), from the batched observation
        spec.

        Each function's body is traced once, on batched inputs of fixed rank: that concrete
        function is the serving signature (:meth:`signatures`). The attribute, which takes one
        observation or a batch (inputs of any rank), is a thin wrapper traced around it: inputs
        to rows, one call of the signature's graph, outputs back to the leading shape. Traced
        without autograph: the bodies hold no Python control flow on tensors, and autograph's
        conversion of them cost more CPU than the tracing itself (docs/performance.md).
        """
        ctx = self._context
        ctx.obs_spec = obs_spec
        ctx.noise_size = export_heads.noise_size(ctx.head)
        batched = {"action": [obs_spec], "sample": [obs_spec, SEED_SPEC],
                   "sample_with_noise": [obs_spec, tf.TensorSpec(
                       [None, ctx.noise_size], tf.float32, name="noise")],
                   "distribution_params": [obs_spec]}
        h = ctx.head
        self.action_masked = None
        masked = isinstance(h, (dist_lib.CategoricalHead, dist_lib.MultiCategoricalHead))
        if masked:
            ctx.mask_width = h.param_size  # n, or sum(nvec): one logit per action
            batched["action_masked"] = [obs_spec, tf.TensorSpec(
                [None, ctx.mask_width], tf.bool, name="action_mask")]
        self._signatures = {name: traced(getattr(self, f"_{name}"), specs)
                            for name, specs in batched.items()}
        obs = tf.nest.map_structure(lambda s: tf.TensorSpec(None, s.dtype, s.name), obs_spec)
        noise = tf.TensorSpec(None, tf.float32, name="noise")
        self.action = compiled(self._any_rank("action"), [obs])
        self.sample = compiled(self._any_rank("sample"), [obs, SEED_SPEC])
        self.sample_with_noise = compiled(self._any_rank("sample_with_noise", self._noise_rows),
                                           [obs, noise])
        self.distribution_params = compiled(self._any_rank("distribution_params"), [obs])
        self.params = compiled(self._params, [params_spec])
        if masked:
            self.action_masked = compiled(
                self._any_rank("action_masked", self._mask_rows),
                [obs, tf.TensorSpec(None, tf.bool, name="action_mask")])

    def _any_rank(self, name: str, rows_of=None):
        """The attribute ``name``: one observation or a batch (any leading axes) -> as many
        results, through the signature's concrete function on ``[N, ...]`` rows; ``rows_of``
        turns the second input into rows (noise, masks; a seed is passed as it is)."""
        traced = self._signatures[name]

        def call(observation, *rest):
            rows, lead = self._rows(observation)
            if rest and rows_of is not None:
                rest = (rows_of(rest[0]), *rest[1:])
            out = traced(rows, *rest)
            return tf.nest.map_structure(lambda x: unrows(x, lead), out)

        call.__name__ = name
        return call

    def signatures(self) -> dict[str, Any]:
        """The serving signatures: the functions of an observation traced on batched inputs of
        fixed rank (what converters read), by name; the attributes call these same graphs."""
        return dict(self._signatures)

    def _preprocess(self, obs):
        space = self._context.space
        if isinstance(space, gym.spaces.Discrete):
            return tf.one_hot(tf.cast(obs, tf.int32) - int(space.start), int(space.n))
        x = tf.cast(obs, tf.float32)
        return tf.reshape(x, [tf.shape(x)[0], -1])

    def _rows(self, observation):
        """One observation or a batch -> (the observation as ``[N, ...]`` rows, the leading
        shape: ``[]`` for one observation, ``[N]`` for a batch, or more axes)."""
        parts = tf.nest.flatten(observation)
        specs = tf.nest.flatten(self._context.obs_spec)
        rows = []
        for x, spec in zip(parts, specs):
            shape = spec.shape[1:]  # one observation's
            k = len(shape)
            checks = []
            if x.shape.rank is None:  # the attributes: checked first, with a message
                what = (f"observation{'' if len(parts) == 1 else ' part ' + repr(spec.name)}: "
                        f"one {spec.dtype.name} {shape.as_list()} or a batch of them")
                checks = [tf.debugging.assert_greater_equal(tf.rank(x), k, message=what)]
                with tf.control_dependencies(checks):
                    checks.append(tf.debugging.assert_equal(
                        tf.shape(x)[tf.rank(x) - k:], tf.constant(shape.as_list(), tf.int32),
                        message=what))
            with tf.control_dependencies(checks):
                rows.append(tf.reshape(x, [-1, *shape.as_list()]))
        first = parts[0]
        k = len(specs[0].shape) - 1
        ndim = first.shape.rank
        lead = tf.shape(first)[: (tf.rank(first) if ndim is None else ndim) - k]
        return tf.nest.pack_sequence_as(observation, rows), lead

    def _forward(self, observation):
        """``(params [N, param_size], the leading shape)`` at one observation or a batch."""
        rows, lead = self._rows(observation)
        return self._params(self._preprocess(rows)), lead

    def _action(self, observation):
        x, lead = self._forward(observation)
        return unrows(self._mode(x), lead)

    def _action_masked(self, observation, action_mask):
        x, lead = self._forward(observation)
        return unrows(self._masked_mode(x, action_mask), lead)

    def _sample_with_noise(self, observation, noise):
        x, lead = self._forward(observation)
        return unrows(self._noise_sample(x, noise), lead)

    def _sample(self, observation, seed):
        x, lead = self._forward(observation)
        return unrows(self._seeded_sample(x, seed), lead)

    def _distribution_params(self, observation):
        x, lead = self._forward(observation)
        return {k: unrows(v, lead) for k, v in self._dist(x).items()}

    # -- the heads at parameters ``x [N, param_size]`` (shared with recurrent exports) ------

    def _mode(self, x):
        return export_heads.mode(self._context.head, x)

    def _masked_mode(self, x, action_mask):
        mask = self._mask_rows(action_mask)
        return export_heads.mode(self._context.head, dist_lib.mask_logits(x, mask))

    def _noise_rows(self, noise):
        """``[..., noise_size]`` uniforms -> ``[N, noise_size]`` (checked if of unknown rank)."""
        k = self._context.noise_size
        checks = [] if noise.shape.rank is not None else [tf.debugging.assert_equal(
            tf.shape(noise)[-1:], [k], message=f"noise: [..., {k}] uniforms in [0, 1)")]
        with tf.control_dependencies(checks):
            return tf.reshape(noise, [-1, k])

    def _mask_rows(self, action_mask):
        """``[..., n]`` legal actions -> ``[N, n]``."""
        return tf.reshape(action_mask, [-1, self._context.mask_width])

    def _noise_sample(self, x, noise):
        u = self._noise_rows(noise)
        return export_heads.sample(self._context.head, x, self._log_std(), u)

    def _seeded_sample(self, x, seed):
        u = tf.random.stateless_uniform([tf.shape(x)[0], self._context.noise_size], seed)
        return export_heads.sample(self._context.head, x, self._log_std(), u)

    def _dist(self, x):
        return export_heads.distribution_params(self._context.head, x, self._log_std())

    def _log_std(self):
        return getattr(self, "log_std", None)


def traced(fn: Callable[..., Any], specs: list) -> Any:
    """``fn``'s concrete function on ``specs``, traced once and without autograph."""
    return tf.function(fn, autograph=False).get_concrete_function(*specs)


def compiled(fn: Callable[..., Any], specs: list) -> Any:
    """``fn`` as a ``tf.function`` of ``input_signature`` ``specs`` (one trace, at saving),
    without autograph."""
    return tf.function(fn, input_signature=specs, autograph=False)


def unrows(x: tf.Tensor, lead: tf.Tensor) -> tf.Tensor:
    """``[N, ...]`` -> ``[*lead, ...]``: one result per observation given."""
    return tf.reshape(x, tf.concat([lead, tf.shape(x)[1:]], 0))


def observation_spec(space) -> tf.TensorSpec:
    """Input signature: raw batched obs for Box/Discrete, the flat vector for the others."""
    if isinstance(space, gym.spaces.Box):
        return tf.TensorSpec([None, *space.shape], tf.as_dtype(space.dtype), name="observation")
    if isinstance(space, gym.spaces.Discrete):
        return tf.TensorSpec([None], tf.int64, name="observation")
    return tf.TensorSpec([None, spaces.flat_dim(space)], tf.float32, name="observation")
