"""Export a trained actor as a self-contained SavedModel, and load it back as a policy.

The SavedModel holds copies of the actor's weights and the observation normaliser's statistics,
and plain TensorFlow ops only: ``tf.saved_model.load(path)`` needs neither pgrad nor Keras.

Its functions (attributes of the loaded object) take one observation -- unbatched, the env's own
shape and dtype -- or a batch of them (any number of leading axes), and return as many actions:

* ``action(observation)`` (also the serving signature): deterministic env actions;
* ``sample(observation, seed)``: sampled env actions, reproducible: ``seed`` is ``[2]`` int64
  and feeds a stateless random op (the same seed and batch give the same actions);
* ``sample_with_noise(observation, noise)``: sampled env actions from the caller's uniforms
  ``noise`` in ``[0, 1)``, ``[..., noise_size]`` (``noise_size`` is in ``pgrad_policy.json``);
  plain arithmetic only, so it converts to TFLite and ONNX (:mod:`pgrad.rl.deploy`);
* ``distribution_params(observation)``: ``{"logits"}`` or the pre-squash Gaussian's
  ``{"mean", "log_std"}`` (:func:`pgrad.rl.export_heads.distribution_params`);
* ``action_masked(observation, action_mask)`` (also a serving signature), for Discrete and
  MultiDiscrete actions: deterministic actions with ``action_mask`` ``[..., n]`` bool the legal
  actions (:mod:`pgrad.rl.masks`; for MultiDiscrete the per-dimension masks concatenated): the
  argmax over the legal actions. A Dict observation's ``action_mask`` key is not part of the
  ``observation`` argument (:mod:`pgrad.rl.spaces`): pass it as ``action_mask``;
* ``params(flat_observation)``: the distribution parameters ``[N, param_size]`` from flat raw
  observations (normaliser inside) -- differentiable, so observation attacks and sampled
  evaluation work from an export alone (:class:`ExportedPolicy`).

Observations are raw for Box (``[*shape]`` in its dtype) and Discrete (an int64 scalar), the
flat float32 vector of :mod:`pgrad.rl.spaces` (``[flat_dim]``) for other spaces without images.
Observations with images are the parts of :class:`pgrad.rl.spaces.ObsLayout`: an image space
as its raw ``[H, W, C]`` frames in their own dtype (uint8, bool); a Dict with images as one
argument per part (each image by its key, then ``vector``: the flat float32 rest).

The SavedModel's signatures (``loaded.signatures[name]``, what TF Serving, TFLite and ONNX
converters read) are the same four functions with batched inputs of a fixed rank: keyword
``observation`` (or one keyword per part) ``[N, *shape]``, ``seed`` ``[2]``, ``noise`` ``[N,
noise_size]``; outputs ``output_0`` (actions ``[N, ...]``) or the parameters by name.

Dense-only policies are exported as plain matmuls of copied weights. Policies with an encoder
(a CNN, the user's own Keras model) are traced once through the Keras layers with every variable
read from a copy the module owns (``keras.StatelessScope``): the SavedModel again holds only
plain variables and TensorFlow ops.

Beside it, ``pgrad_policy.json`` records what the export is of (env id, head, spaces), data only.
"""

from __future__ import annotations

import json
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf

from pgrad.rl import distributions as dist_lib
from pgrad.rl import export_heads, spaces
from pgrad.rl.networks import ActorCritic
from pgrad.rl.normalize import ObsNormalizer
from pgrad.rl.policy import Policy, dense_layers

META_FILE = "pgrad_policy.json"
SEED_SPEC = tf.TensorSpec([2], tf.int64, name="seed")
#: What an export directory holds, by name (a dict: a folder and what is inside it), for the run
#: directory's layout; TensorFlow's SavedModel files plus pgrad's metadata.
FILES: dict = {"saved_model.pb": None, "fingerprint.pb": None, META_FILE: None,
               "variables": {"variables.index": None, "variables.data-*": None}, "assets": {}}


def _tf_activation(name: str):
    return tf.tanh if name == "tanh" else tf.nn.relu


class _ExportedPolicy(tf.Module):
    """Deterministic policy with copies of the weights and normaliser statistics."""

    def __init__(self, net: ActorCritic, obs_norm, obs_space):
        super().__init__(name="policy")
        self._acts = []
        self.weights, self.biases = [], []
        for key in ("trunk", "actor"):
            for w, b, act in dense_layers(getattr(net, key)):
                self.weights.append(tf.Variable(w.numpy(), trainable=False))
                self.biases.append(tf.Variable(b.numpy(), trainable=False))
                self._acts.append(act)
        if getattr(net.head, "log_std", None) is not None:
            self.log_std = tf.Variable(net.head.log_std.numpy(), trainable=False)
        self.norm_mean = self.norm_std = None
        self._clip = 0.0
        if obs_norm is not None:
            self.norm_mean = tf.Variable(obs_norm.mean.numpy().astype(np.float32), trainable=False)
            std = np.sqrt(obs_norm.var.numpy() + obs_norm.eps).astype(np.float32)
            self.norm_std = tf.Variable(std, trainable=False)
            self._clip = obs_norm.clip
        # Plain-Python context for tracing only; kept off the module so that nothing but the
        # variables above is saved (no Keras objects in the SavedModel).
        self._context = types.SimpleNamespace(head=net.head, space=obs_space)
        flat = tf.TensorSpec([None, spaces.flat_dim(obs_space)], tf.float32,
                             name="flat_observation")
        self._functions(_obs_spec(obs_space), flat)

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
            return tf.nest.map_structure(lambda x: _unrows(x, lead), out)

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
        return _unrows(self._mode(x), lead)

    def _action_masked(self, observation, action_mask):
        x, lead = self._forward(observation)
        return _unrows(self._masked_mode(x, action_mask), lead)

    def _sample_with_noise(self, observation, noise):
        x, lead = self._forward(observation)
        return _unrows(self._noise_sample(x, noise), lead)

    def _sample(self, observation, seed):
        x, lead = self._forward(observation)
        return _unrows(self._seeded_sample(x, seed), lead)

    def _distribution_params(self, observation):
        x, lead = self._forward(observation)
        return {k: _unrows(v, lead) for k, v in self._dist(x).items()}

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


class _ExportedEncodedPolicy(_ExportedPolicy):
    """As :class:`_ExportedPolicy`, for a network with an encoder: the Keras forward pass traced
    with every variable it reads mapped to the module's own copy."""

    def __init__(self, net: ActorCritic, obs_norm, obs_space):
        tf.Module.__init__(self, name="policy")
        layout = spaces.obs_layout(obs_space)
        sources = self._sources(net)
        self.copies = [tf.Variable(v.numpy(), trainable=False) for v in sources]
        if getattr(net.head, "log_std", None) is not None:
            self.log_std = tf.Variable(net.head.log_std.numpy(), trainable=False)
        self.norm_mean = self.norm_std = None
        self._clip = 0.0
        if obs_norm is not None:
            self.norm_mean = tf.Variable(obs_norm.mean.numpy().astype(np.float32), trainable=False)
            std = np.sqrt(obs_norm.var.numpy() + obs_norm.eps).astype(np.float32)
            self.norm_std = tf.Variable(std, trainable=False)
            self._clip = obs_norm.clip
        self._context = types.SimpleNamespace(head=net.head, space=obs_space, net=net,
                                              layout=layout, sources=sources)
        if layout.flat:  # vector observations, the user's encoder: inputs as for MLP policies
            action_spec = _obs_spec(obs_space)
            params_spec = tf.TensorSpec([None, spaces.flat_dim(obs_space)], tf.float32,
                                        name="flat_observation")
        else:
            action_spec = params_spec = _parts_spec(layout)
        self._functions(action_spec, params_spec)

    def _preprocess(self, obs):
        if self._context.layout.flat:
            return super()._preprocess(obs)
        return obs  # the parts, as pgrad.rl.spaces preprocesses them

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


def traced(fn: Callable[..., Any], specs: list) -> Any:
    """``fn``'s concrete function on ``specs``, traced once and without autograph."""
    return tf.function(fn, autograph=False).get_concrete_function(*specs)


def compiled(fn: Callable[..., Any], specs: list) -> Any:
    """``fn`` as a ``tf.function`` of ``input_signature`` ``specs`` (one trace, at saving),
    without autograph."""
    return tf.function(fn, input_signature=specs, autograph=False)


def _unrows(x: tf.Tensor, lead: tf.Tensor) -> tf.Tensor:
    """``[N, ...]`` -> ``[*lead, ...]``: one result per observation given."""
    return tf.reshape(x, tf.concat([lead, tf.shape(x)[1:]], 0))


def _obs_spec(space) -> tf.TensorSpec:
    """Input signature: raw batched obs for Box/Discrete, the flat vector for the others."""
    if isinstance(space, gym.spaces.Box):
        return tf.TensorSpec([None, *space.shape], tf.as_dtype(space.dtype), name="observation")
    if isinstance(space, gym.spaces.Discrete):
        return tf.TensorSpec([None], tf.int64, name="observation")
    return tf.TensorSpec([None, spaces.flat_dim(space)], tf.float32, name="observation")


def export_policy(net: ActorCritic, obs_norm: ObsNormalizer | None, obs_space: gym.Space,
                  path: str | Path,
                  metadata: dict[str, Any] | None = None) -> None:
    """Writes a SavedModel whose ``action(observation)`` returns deterministic env actions.

    Load with ``tf.saved_model.load(path).action(obs)``; pgrad is not needed. The observation
    normaliser (if any) is inside. Actions: argmax (Discrete, MultiDiscrete), the Gaussian mean
    squashed if so and clipped to the bounds (Box), ``logit > 0`` (MultiBinary); ``sample``
    and ``sample_with_noise`` draw from the policy (see the module docstring). ``metadata``
    (JSON values, e.g. the env id) goes into ``pgrad_policy.json`` beside it.
    """
    if net.recurrent:  # the state as an input and an output (pgrad.rl.export_recurrent)
        from pgrad.rl.export_recurrent import ExportedRecurrentPolicy

        module: _ExportedPolicy = ExportedRecurrentPolicy(net, obs_norm, obs_space)
    elif net.encoder is not None:
        module = _ExportedEncodedPolicy(net, obs_norm, obs_space)
    else:
        module = _ExportedPolicy(net, obs_norm, obs_space)
    tf.saved_model.save(module, str(path), signatures=module.signatures())
    meta = {"format": 1, "observation_space": str(obs_space), "head": head_options(net.head),
            "noise_size": module._context.noise_size, **(metadata or {})}
    if net.core is not None:
        meta.update(recurrent=net.core.kind, state_size=net.core.state_size)
    layout = spaces.obs_layout(obs_space)
    if not layout.flat:  # what the inputs are (see the module docstring)
        meta["observation_parts"] = [
            {"name": p.name, "shape": list(p.shape), "dtype": p.dtype.name, "image": p.image}
            for p in layout.parts]
    (Path(path) / META_FILE).write_text(json.dumps(meta, indent=1) + "\n")


def head_options(head: dist_lib.ActionHead) -> dict[str, Any]:
    """The options :func:`pgrad.rl.distributions.make_head` needs to rebuild ``head``."""
    if isinstance(head, dist_lib.GaussianHead):
        return {"log_std_init": head.log_std_init,
                "state_dependent_std": head.state_dependent_std, "squash": head.squash,
                "sde_latent_dim": head.sde_latent_dim}
    return {}


def find_export(path: str | Path) -> Path | None:
    """The export directory at ``path`` or its ``policy/`` subdirectory, if there is one."""
    path = Path(path)
    for candidate in (path, path / "policy"):
        if (candidate / "saved_model.pb").is_file():
            return candidate
    return None


def read_metadata(path: str | Path) -> dict[str, Any]:
    """``pgrad_policy.json`` of an export (``{}`` if absent or unreadable)."""
    try:
        data = json.loads((Path(path) / META_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class ExportedPolicy(Policy):
    """A :class:`pgrad.rl.policy.Policy` read from an export (no agent, no Keras model).

    Args:
      path: the export directory (or a directory holding ``policy/``).
      observation_space, action_space: the spaces it acts in (e.g. from ``gym.make(env_id)``).
    """

    def __init__(self, path: str | Path, observation_space: gym.Space, action_space: gym.Space):
        found = find_export(path)
        if found is None:
            raise ValueError(f"{path} holds no exported policy (no saved_model.pb).")
        try:
            self._module = tf.saved_model.load(str(found))
        except Exception as err:  # noqa: BLE001  (a damaged file fails in many ways)
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise ValueError(f"cannot load the exported policy in {found}: {first}") from None
        if not hasattr(self._module, "params"):  # pgrad's exports have had it since 0.2
            why = "" if (found / META_FILE).exists() else f" and no {META_FILE}"
            raise ValueError(f"the SavedModel in {found} was not made by pgrad (it has no params "
                             f"function{why}); pgrad loads the policies it exports (0.2 and "
                             "later): evaluate the run's checkpoint, or export it again.")
        meta = read_metadata(found)
        try:  # data written by export(), but a file anyone can edit: its types checked
            head_args, state_size = meta.get("head", {}), meta.get("state_size", 0) or 0
            if not isinstance(head_args, dict) or isinstance(state_size, bool):
                raise TypeError("'head' must be an object and 'state_size' a number")
            head = dist_lib.make_head(action_space, **head_args)
            state_size = int(state_size)
            if state_size < 0:
                raise ValueError(f"'state_size' is {state_size}")
            if getattr(head, "log_std", None) is not None:
                head.log_std.assign(self._module.log_std)
        except (TypeError, ValueError, AttributeError) as err:
            raise ValueError(f"{found / META_FILE} does not describe this export: "
                             f"{str(err).splitlines()[0] if str(err) else type(err).__name__}; "
                             "export the policy again.") from None
        super().__init__(observation_space, action_space, head)
        self.path = found
        #: A recurrent export's state width (its functions take and return the state).
        self.state_size = state_size

    def _inputs(self, flat):
        if not self.layout.flat:  # the parts, each in its own dtype
            return self.layout.to_tensors(flat)
        return tf.cast(flat, tf.float32)

    def params(self, flat: Any) -> tf.Tensor:
        self._feed_forward_only()
        return self._module.params(self._inputs(flat))

    def step_params(self, flat: Any, state: np.ndarray, episode_start: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
        out = self._module.params(self._inputs(flat), state, episode_start)
        return out["params"].numpy(), out["next_state"].numpy()
