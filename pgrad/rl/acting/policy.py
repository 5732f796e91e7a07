"""An exact numpy mirror of the actor's forward pass, for acting one env step at a time.

A TensorFlow call costs ~300-450 us whatever the batch; a 64-64 MLP on 8 observations costs
~15 us in numpy. Acting therefore runs on :class:`NumpyPolicy`, a mirror of the Keras forward
pass refreshed from the Keras weights after every update. Training never reads the mirror:
gradients come from the Keras models (:mod:`pgrad.rl.models.networks`). Policies with an encoder (a
CNN, the user's own) act through one compiled TensorFlow call instead
(:class:`pgrad.rl.acting.compiled_actor.CompiledActor`; a causal Transformer on token contexts with
a key/value cache, :class:`pgrad.rl.acting.transformer_actor.CachedTransformerActor`), sampling with
the same numpy samplers below; :func:`make_actor` picks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from pgrad.rl import distributions as dist_lib
from pgrad.rl.acting.sampling import (  # noqa: F401 (the samplers, re-exported)
    NumpySampling,
    _categorical,
    gaussian_numpy,
    mode_numpy,
    sample_numpy,
)
from pgrad.rl.models.networks import ActorCritic

if TYPE_CHECKING:
    from pgrad.rl.acting.compiled_actor import CompiledActor
    from pgrad.rl.observations.normalize import ObsNormalizer
    from pgrad.rl.observations.spaces import ObsLayout


def _relu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    return np.maximum(x, 0.0, out=out)


def np_activation(name: str) -> Callable[..., np.ndarray]:
    """The numpy activation ``f(x, out=None)`` of a Dense layer's ``tanh`` / ``relu``."""
    return np.tanh if name == "tanh" else _relu


def dense_layers(model: keras.Sequential | None) -> list[tuple]:
    """``(kernel, bias, activation name or None)`` per Dense layer of ``model``."""
    if model is None:
        return []
    out = []
    for layer in model.layers:
        act = getattr(layer.activation, "__name__", None)
        out.append((layer.kernel, layer.bias, None if act == "linear" else act))
    return out


class NumpyPolicy(NumpySampling):
    """Exact numpy mirror of :class:`ActorCritic`'s forward pass plus numpy sampling.

    Sampling uses a caller-supplied ``np.random.Generator`` so the agent decides how it is
    seeded (and therefore checkpointed). Two ways to refresh the weights: :meth:`sync` reads each
    variable (one TensorFlow call per variable), :meth:`load_flat` takes the output of
    :meth:`flat_weights` computed inside a ``tf.function`` the caller runs anyway (no extra call).
    """

    def __init__(self, net: ActorCritic):
        if net.encoder is not None:
            raise ValueError("NumpyPolicy mirrors Dense-only networks; a network with an encoder "
                             "acts through pgrad.rl.acting.compiled_actor.CompiledActor "
                             "(make_actor).")
        self.net, self.head = net, net.head
        self._spec = {k: dense_layers(getattr(net, k)) for k in ("trunk", "actor", "critic")}
        self._vars = [v for k in self._spec for w, b, _ in self._spec[k] for v in (w, b)]
        if getattr(self.head, "log_std", None) is not None:
            self._vars.append(self.head.log_std)
        core = net.core  # a recurrent policy's actor core: its four weights last
        self._core_kind = core.kind if core is not None else None
        if core is not None:
            self._vars += [core.kernel, core.recurrent_kernel, core.bias, core.recurrent_bias]
        self.state_size = core.state_size if core is not None else 0
        self._core: tuple = ()
        self._shapes = [tuple(v.shape) for v in self._vars]
        ends = np.cumsum([int(np.prod(s)) for s in self._shapes]).tolist()
        self._slices = [slice(a, b) for a, b in zip([0, *ends[:-1]], ends)]  # of flat_weights()
        self._weights: dict[str, list] = {}
        self.log_std = None
        self.sync()

    def flat_weights(self) -> tf.Tensor:
        """``[P]`` every mirrored variable, flattened and concatenated (call in a graph)."""
        return tf.concat([tf.reshape(tf.cast(v, tf.float32), [-1]) for v in self._vars], 0)

    def update_output(self) -> tf.Tensor:
        """What the update returns for the actor (in its graph): :meth:`flat_weights`."""
        return self.flat_weights()

    def load_update_output(self, out: np.ndarray) -> None:
        """Takes :meth:`update_output` as fetched: the new weights."""
        self.load_flat(out)

    def sync(self) -> None:
        """Copies the current Keras weights (after a restore, or any outside change)."""
        self._load([v.numpy() for v in self._vars])

    def flat_numpy(self) -> np.ndarray:
        """``[P]`` float32: the weights the mirror acts with now, in :meth:`flat_weights` order
        (for :meth:`load_flat` on a copy elsewhere, e.g. a rollout worker)."""
        arrays = [a for key in self._spec for w, b, _ in self._weights[key] for a in (w, b)]
        if self.log_std is not None:
            arrays.append(self.log_std)
        arrays += list(self._core)
        return np.concatenate([np.ravel(a) for a in arrays]).astype(np.float32, copy=False)

    def load_flat(self, flat: np.ndarray) -> None:
        """Loads weights from a :meth:`flat_weights` vector."""
        flat = np.asarray(flat, np.float32)  # views below, no copies (called every update)
        self._load([flat[sl].reshape(s) for sl, s in zip(self._slices, self._shapes)])

    def _load(self, arrays: list[np.ndarray]) -> None:
        it = iter(arrays)
        for key, layers in self._spec.items():
            self._weights[key] = [(next(it), next(it), np_activation(a) if a else None)
                                  for _, _, a in layers]
        if getattr(self.head, "log_std", None) is not None:
            self.log_std = next(it)
        if self._core_kind is not None:
            self._core = tuple(next(it) for _ in range(4))

    def _run(self, key: str, x: np.ndarray) -> np.ndarray:
        # In place after the matmul: the same arithmetic as ``act(x @ w + b)`` (bit for bit),
        # two fewer allocations per layer; at a few rows each numpy call's overhead dominates.
        for w, b, act in self._weights[key]:
            x = x @ w
            x += b
            if act is not None:
                act(x, out=x)
        return x

    def step(self, obs: np.ndarray, state: np.ndarray, episode_start: np.ndarray | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
        """Recurrent: ``([N, obs_dim], [N, S] state, [N] episode starts or None)`` ->
        ``([N, param_size], [N, S] next state)``; rows that start an episode start from zeros."""
        from pgrad.rl.models import recurrent
        if self._core_kind is None:
            raise ValueError("a feed-forward policy acts without a state: NumpyPolicy.forward")
        state = recurrent.reset_rows(state, episode_start)
        h, state = recurrent.numpy_step(self._core_kind, self._core,
                                        np.asarray(obs, np.float32), state)
        return self._head_params(h), state

    def forward(self, obs: np.ndarray, with_value: bool = False
                ) -> tuple[np.ndarray, np.ndarray | None]:
        """``[N, obs_dim]`` -> ``([N, param_size], [N] values or None)``."""
        if self._core_kind is not None:
            raise ValueError("a recurrent policy acts with its state: NumpyPolicy.step")
        feat = self._run("trunk", obs)
        params = self._head_params(feat)
        value = self._run("critic", feat)[:, 0] if with_value and self._spec["critic"] else None
        return params, value

    def _head_params(self, feat: np.ndarray) -> np.ndarray:
        if self.head.uses_latent:  # [outputs, last hidden features], as ActorCritic.params
            layers = self._weights["actor"]
            latent = feat
            for w, b, act in layers[:-1]:
                latent = latent @ w + b
                if act is not None:
                    latent = act(latent)
            w, b, _ = layers[-1]
            return np.concatenate([latent @ w + b, latent], axis=1)
        return self._run("actor", feat)


def make_actor(net: ActorCritic, layout: ObsLayout | None = None) -> NumpyPolicy | CompiledActor:
    """The acting copy of ``net``: the numpy mirror for Dense-only networks, the KV-cached
    actor for a :class:`pgrad.rl.models.transformer.CausalTransformer` token policy
    (:mod:`pgrad.rl.acting.transformer_actor`), else a compiled TensorFlow call (same interface:
    ``forward``, ``sample``, ``mode``, ``sync``, ...)."""
    if net.encoder is None:
        return NumpyPolicy(net)
    layout = layout if layout is not None else net.encoder.layout
    if net.recurrent:  # encoder -> core -> actor (pgrad.rl.acting.recurrent_actor)
        from pgrad.rl.acting.recurrent_actor import CompiledRecurrentActor

        return CompiledRecurrentActor(net, layout)
    from pgrad.rl.acting.transformer_actor import CachedTransformerActor, transformer_of

    if transformer_of(net) is not None and not net.head.uses_latent:
        return CachedTransformerActor(net, layout)
    from pgrad.rl.acting.compiled_actor import CompiledActor

    return CompiledActor(net, layout)


class Policy:
    """What evaluation and attacks need of a policy, whatever holds it (an agent, an export).

    ``flatten`` turns raw batched observations into flat float32 ``[N, d]`` (before any
    normalisation) -- or, for observations with images, into the parts of
    :class:`pgrad.rl.observations.spaces.ObsLayout` (images in their own dtype); ``params`` maps
    those to distribution parameters in TensorFlow (differentiable, normaliser inside); ``act_flat``
    picks env-ready actions.
    """

    #: Width ``S`` of one env's recurrent state; 0 for a feed-forward policy.
    state_size = 0

    def __init__(self, observation_space: gym.Space, action_space: gym.Space,
                 head: dist_lib.ActionHead):
        from pgrad.rl.observations import spaces

        self.observation_space, self.action_space, self.head = (observation_space, action_space,
                                                                 head)
        self.layout = spaces.obs_layout(observation_space)
        self._flatten = self.layout.preprocess

    def flatten(self, obs_batch: Any) -> Any:
        """Raw batched observations -> ``[N, d]`` float32 or the layout's parts (as
        :mod:`pgrad.rl.observations.spaces`)."""
        return self._flatten(obs_batch)

    def params(self, flat: Any) -> tf.Tensor:
        """``[N, d]`` flat raw observations (or the layout's parts) -> ``[N, param_size]``
        (TensorFlow, differentiable)."""
        raise NotImplementedError

    def distribution(self, flat: tf.Tensor) -> tfp.distributions.Distribution:
        """The action distribution at flat raw observations (differentiable in ``flat``)."""
        return self.head.distribution(self.params(flat))

    def act_flat(self, flat: np.ndarray, deterministic: bool,
                 rng: np.random.Generator | None = None,
                 action_mask: np.ndarray | None = None) -> np.ndarray:
        """Env-ready actions ``[N, ...]`` at flat raw observations (or the layout's parts);
        ``action_mask`` ``[N, n]`` bool: only legal actions (:mod:`pgrad.rl.collection.masks`)."""
        params = self.params(self.layout.to_tensors(flat)).numpy()
        return self._env_actions(params, deterministic, rng, action_mask)

    def _env_actions(self, params: np.ndarray, deterministic: bool,
                     rng: np.random.Generator | None, action_mask) -> np.ndarray:
        """Env-ready actions ``[N, ...]`` from distribution parameters ``[N, param_size]``."""
        if deterministic:
            actions = mode_numpy(self.head, params, action_mask)
        else:
            log_std = (self.head.log_std.numpy()
                       if getattr(self.head, "log_std", None) is not None else None)
            actions = sample_numpy(self.head, params, log_std, rng or np.random.default_rng(),
                                   action_mask=action_mask)[0]
        return self.head.to_env(actions)

    def act_with_state(self, flat: Any, state: np.ndarray | None,
                       episode_start: np.ndarray | None, deterministic: bool,
                       rng: np.random.Generator | None = None,
                       action_mask: np.ndarray | None = None
                       ) -> tuple[np.ndarray, np.ndarray | None]:
        """``(env-ready actions [N, ...], next state [N, S] or None)``: :meth:`act_flat` with the
        recurrent state carried (``state`` None: zeros; ``episode_start [N]``: rows whose state
        is reset first). A feed-forward policy ignores both and returns None."""
        if not self.state_size:
            masked = {} if action_mask is None else {"action_mask": action_mask}
            return self.act_flat(flat, deterministic, rng, **masked), None
        rows = len(self.layout.split(flat)[0])
        state = (np.zeros((rows, self.state_size), np.float32) if state is None
                 else np.asarray(state, np.float32).reshape(rows, self.state_size))
        start = (np.zeros(rows, bool) if episode_start is None
                 else np.asarray(episode_start, bool).reshape(rows))
        params, state = self.step_params(flat, state, start)
        return self._env_actions(params, deterministic, rng, action_mask), state

    def step_params(self, flat: Any, state: np.ndarray, episode_start: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
        """A recurrent policy's ``([N, param_size]`` parameters, ``[N, S]`` next state) at flat
        raw observations (or the layout's parts), ``state [N, S]``, ``episode_start [N]``."""
        raise NotImplementedError

    def _feed_forward_only(self) -> None:
        if self.state_size:
            raise ValueError("a recurrent policy's distribution depends on its state; "
                             "observation attacks and params() apply to feed-forward policies")


class NetworkPolicy(Policy):
    """A :class:`Policy` over live networks: acting on the numpy mirror, gradients from Keras.

    Args:
      net: the networks; ``mirror``: their numpy copy (kept in sync by the owner);
      obs_norm: the observation normaliser or ``None``.
    """

    def __init__(self, net: ActorCritic, mirror: Any, obs_norm: ObsNormalizer | None,
                 observation_space: gym.Space, action_space: gym.Space):
        super().__init__(observation_space, action_space, net.head)
        self.net, self.mirror, self.obs_norm = net, mirror, obs_norm
        self.state_size = getattr(mirror, "state_size", 0)

    def params(self, flat: Any) -> tf.Tensor:
        self._feed_forward_only()
        layout = self.layout
        vector = layout.vector(flat)
        if vector is not None:  # the normaliser sees the vector part only
            x = tf.cast(vector, tf.float32)
            if self.obs_norm is not None:
                x = self.obs_norm.tf_normalize(x)
            flat = layout.with_vector(flat, x)
        return self.net.params(flat)

    def act_flat(self, flat: Any, deterministic: bool,
                 rng: np.random.Generator | None = None,
                 action_mask: np.ndarray | None = None) -> np.ndarray:
        layout = self.layout
        x = flat if self.obs_norm is None else layout.with_vector(
            flat, self.obs_norm(layout.vector(flat)))
        params, _ = self.mirror.forward(x)
        actions = (self.mirror.mode(params, action_mask) if deterministic
                   else self.mirror.sample(params, rng or np.random.default_rng(),
                                           action_mask=action_mask)[0])
        return self.head.to_env(actions)

    def step_params(self, flat: Any, state: np.ndarray, episode_start: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
        layout = self.layout
        x = flat if self.obs_norm is None else layout.with_vector(
            flat, self.obs_norm(layout.vector(flat)))
        return self.mirror.step(x, state, episode_start)
