"""Actor-critic networks (Keras, the source of truth) and an exact numpy mirror for acting.

A TensorFlow call costs ~300-450 us whatever the batch; a 64-64 MLP on 8 observations costs
~15 us in numpy. Acting one vector-env step at a time therefore runs on :class:`NumpyPolicy`, a
mirror of the Keras forward pass that :meth:`NumpyPolicy.sync` refreshes from the Keras weights
(after every update). Training never reads the mirror: gradients come from the Keras models.

Layout, in both modes ``params = actor(trunk(obs))`` and ``value = critic(trunk(obs))``:

* separate (default): ``trunk`` is empty; ``actor`` and ``critic`` are full MLPs.
* shared: ``trunk`` holds the hidden layers; ``actor`` / ``critic`` are single output layers.
  The critic's gradient into the trunk is scaled by ``trunk_grad_scale`` (a custom-gradient
  identity) so the value loss cannot swamp the policy gradient in the shared features.
"""

from __future__ import annotations

import types
from collections.abc import Sequence

import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf

from pgrad import distributions as dist_lib
from pgrad import spaces
from pgrad.ops import scale_gradient

ACTIVATIONS = ("tanh", "relu")


def _np_activation(name: str):
    return np.tanh if name == "tanh" else (lambda x: np.maximum(x, 0.0))


def _tf_activation(name: str):
    return tf.tanh if name == "tanh" else tf.nn.relu


def _dense_stack(
    input_dim: int,
    widths: Sequence[int],
    activation: str,
    out_dim: int | None,
    out_gain: float,
    seed: int,
    name: str,
) -> keras.Sequential:
    """Dense layers with orthogonal init (gain sqrt(2) hidden, ``out_gain`` output), zero biases."""
    layers: list = [keras.layers.Input((input_dim,))]
    for i, width in enumerate(widths):
        init = keras.initializers.Orthogonal(np.sqrt(2.0), seed=seed + i)
        layers.append(keras.layers.Dense(width, activation, kernel_initializer=init,
                                         name=f"{name}_hidden{i}"))
    if out_dim is not None:
        init = keras.initializers.Orthogonal(out_gain, seed=seed + 100)
        layers.append(keras.layers.Dense(out_dim, kernel_initializer=init, name=f"{name}_out"))
    return keras.Sequential(layers, name=name)


class ActorCritic:
    """Policy (and optionally value) networks over flat float32 observations.

    Args:
      obs_dim: observation width.
      head: the action head (``pgrad.make_head``); its variables (Gaussian log-std) are policy
        variables.
      hidden: hidden layer widths.
      activation: ``"tanh"`` or ``"relu"``.
      shared: one trunk for actor and critic.
      critic: build a value network at all (REINFORCE without baseline does not).
      trunk_grad_scale: factor on the critic's gradient into a shared trunk.
      seed: initialiser seed.
    """

    def __init__(self, obs_dim: int, head: dist_lib.ActionHead, hidden: Sequence[int] = (64, 64),
                 activation: str = "tanh", shared: bool = False, critic: bool = True,
                 trunk_grad_scale: float = 1.0, seed: int = 0):
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}; got {activation!r}.")
        hidden = tuple(int(h) for h in hidden)
        self.head, self.activation, self.shared = head, activation, shared and bool(hidden)
        self.trunk_grad_scale = float(trunk_grad_scale)
        self.obs_dim = int(obs_dim)
        if self.shared:
            self.trunk = _dense_stack(obs_dim, hidden, activation, None, 1.0, seed, "trunk")
            feat, widths = hidden[-1], ()
        else:
            self.trunk, feat, widths = None, obs_dim, hidden
        self.actor = _dense_stack(feat, widths, activation, head.param_size, 0.01, seed + 1000,
                                  "actor")
        self.critic = (_dense_stack(feat, widths, activation, 1, 1.0, seed + 2000, "critic")
                       if critic else None)
        if not head.built:
            head.build((None, head.param_size))

    def _features(self, obs: tf.Tensor) -> tf.Tensor:
        return obs if self.trunk is None else self.trunk(obs)

    def params(self, obs: tf.Tensor) -> tf.Tensor:
        """``[N, obs_dim] -> [N, param_size]`` distribution parameters."""
        return self.actor(self._features(obs))

    def value(self, obs: tf.Tensor) -> tf.Tensor:
        """``[N, obs_dim] -> [N]`` state values (trunk gradient scaled when shared)."""
        feat = self._features(obs)
        if self.trunk is not None and self.trunk_grad_scale != 1.0:
            feat = scale_gradient(feat, self.trunk_grad_scale)
        return self.critic(feat)[:, 0]

    @property
    def policy_variables(self) -> list[tf.Variable]:
        """Everything the policy's log-probabilities depend on (trunk, actor, head)."""
        trunk = list(self.trunk.trainable_variables) if self.trunk is not None else []
        return trunk + list(self.actor.trainable_variables) + list(self.head.trainable_variables)

    @property
    def value_only_variables(self) -> list[tf.Variable]:
        """Critic variables the policy does not use."""
        return list(self.critic.trainable_variables) if self.critic is not None else []

    @property
    def variables(self) -> list[tf.Variable]:
        """All trainable variables: policy variables first, then value-only ones."""
        return self.policy_variables + self.value_only_variables

    def modules(self) -> dict[str, object]:
        """Trackable pieces for checkpoints."""
        out = {"actor": self.actor, "head": self.head}
        if self.trunk is not None:
            out["trunk"] = self.trunk
        if self.critic is not None:
            out["critic"] = self.critic
        return out


def _layers(model: keras.Sequential | None) -> list[tuple[tf.Variable, tf.Variable, str | None]]:
    if model is None:
        return []
    out = []
    for layer in model.layers:
        act = getattr(layer.activation, "__name__", None)
        out.append((layer.kernel, layer.bias, None if act == "linear" else act))
    return out


class NumpyPolicy:
    """Exact numpy mirror of :class:`ActorCritic`'s forward pass plus numpy sampling.

    Sampling uses a caller-supplied ``np.random.Generator`` so the agent decides how it is
    seeded (and therefore checkpointed). Two ways to refresh the weights: :meth:`sync` reads each
    variable (one TensorFlow call per variable), :meth:`load_flat` takes the output of
    :meth:`flat_weights` computed inside a ``tf.function`` the caller runs anyway (no extra call).
    """

    def __init__(self, net: ActorCritic):
        self.net, self.head = net, net.head
        self._spec = {k: _layers(getattr(net, k)) for k in ("trunk", "actor", "critic")}
        self._vars = [v for k in self._spec for w, b, _ in self._spec[k] for v in (w, b)]
        if isinstance(self.head, dist_lib.GaussianHead):
            self._vars.append(self.head.log_std)
        self._shapes = [tuple(v.shape) for v in self._vars]
        ends = np.cumsum([int(np.prod(s)) for s in self._shapes]).tolist()
        self._slices = [slice(a, b) for a, b in zip([0, *ends[:-1]], ends)]  # of flat_weights()
        self._weights: dict[str, list] = {}
        self.log_std = None
        self.sync()

    def flat_weights(self) -> tf.Tensor:
        """``[P]`` every mirrored variable, flattened and concatenated (call in a graph)."""
        return tf.concat([tf.reshape(tf.cast(v, tf.float32), [-1]) for v in self._vars], 0)

    def sync(self) -> None:
        """Copies the current Keras weights (after a restore, or any outside change)."""
        self._load([v.numpy() for v in self._vars])

    def load_flat(self, flat: np.ndarray) -> None:
        """Loads weights from a :meth:`flat_weights` vector."""
        flat = np.asarray(flat, np.float32)  # views below, no copies (called every update)
        self._load([flat[sl].reshape(s) for sl, s in zip(self._slices, self._shapes)])

    def _load(self, arrays: list[np.ndarray]) -> None:
        it = iter(arrays)
        for key, layers in self._spec.items():
            self._weights[key] = [(next(it), next(it), _np_activation(a) if a else None)
                                  for _, _, a in layers]
        if isinstance(self.head, dist_lib.GaussianHead):
            self.log_std = next(it)

    def _run(self, key: str, x: np.ndarray) -> np.ndarray:
        for w, b, act in self._weights[key]:
            x = x @ w + b
            if act is not None:
                x = act(x)
        return x

    def forward(self, obs: np.ndarray, with_value: bool = False):
        """``[N, obs_dim]`` -> ``([N, param_size], [N] values or None)``."""
        feat = self._run("trunk", obs)
        params = self._run("actor", feat)
        value = self._run("critic", feat)[:, 0] if with_value and self._spec["critic"] else None
        return params, value

    def sample(self, params: np.ndarray, rng: np.random.Generator):
        """Samples actions: ``([N, *action_shape]`` stored actions, ``[N]`` float32 log-probs)."""
        h = self.head
        n = params.shape[0]
        if isinstance(h, dist_lib.CategoricalHead):
            a, lp = _categorical(params, rng.random(n))
            return a, lp.astype(np.float32)
        if isinstance(h, dist_lib.GaussianHead):
            std = np.exp(self.log_std)
            a = (params + std * rng.standard_normal(params.shape)).astype(np.float32)
            return a, _gauss_log_prob(a, params, self.log_std)
        if isinstance(h, dist_lib.MultiCategoricalHead):
            u = rng.random((n, len(h.nvec)))
            draws = [_categorical(b, u[:, d]) for d, b in enumerate(_split(params, h.nvec))]
            lps = np.sum([lp for _, lp in draws], axis=0)
            return np.stack([a for a, _ in draws], 1), lps.astype(np.float32)
        if isinstance(h, dist_lib.BernoulliHead):
            a = (rng.random(params.shape) < _sigmoid(params)).astype(np.int32)
            return a, _bernoulli_log_prob(a, params)
        raise ValueError(f"no numpy sampler for head {type(h).__name__}")

    def mode(self, params: np.ndarray) -> np.ndarray:
        """Deterministic actions ``[N, *action_shape]`` (argmax / mean / logit > 0)."""
        h = self.head
        if isinstance(h, dist_lib.CategoricalHead):
            return params.argmax(1).astype(np.int32)
        if isinstance(h, dist_lib.GaussianHead):
            return params.astype(np.float32)
        if isinstance(h, dist_lib.MultiCategoricalHead):
            return np.stack([b.argmax(1) for b in _split(params, h.nvec)], 1).astype(np.int32)
        if isinstance(h, dist_lib.BernoulliHead):
            return (params > 0).astype(np.int32)
        raise ValueError(f"no numpy mode for head {type(h).__name__}")


def _split(params: np.ndarray, nvec) -> list[np.ndarray]:
    return np.split(params, np.cumsum(nvec)[:-1], axis=1)


def _categorical(logits: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inverse-CDF sampling from ``[N, K]`` logits with one uniform per row.

    Returns ``([N]`` int32 actions, ``[N]`` float64 log-probabilities).
    """
    z = logits - logits.max(1, keepdims=True)
    e = np.exp(z, dtype=np.float64)
    cdf = np.cumsum(e, 1)
    total = cdf[:, -1]
    a = np.minimum((u[:, None] * total[:, None] > cdf).sum(1), logits.shape[1] - 1)
    rows = np.arange(logits.shape[0])
    return a.astype(np.int32), z[rows, a] - np.log(total)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _gauss_log_prob(a, mean, log_std) -> np.ndarray:
    z = (a - mean) * np.exp(-log_std)
    return (-0.5 * z * z - log_std - 0.5 * np.log(2 * np.pi)).sum(1).astype(np.float32)


def _bernoulli_log_prob(a, logits) -> np.ndarray:
    ls = -np.logaddexp(0.0, -logits)  # log sigmoid(l)
    lns = -np.logaddexp(0.0, logits)  # log sigmoid(-l)
    return (a * ls + (1 - a) * lns).sum(1).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# Export: a self-contained SavedModel (plain TF ops, no pgrad/Keras needed to load it).
# ---------------------------------------------------------------------------------------------


class _ExportedPolicy(tf.Module):
    """Deterministic policy with copies of the weights and normaliser statistics."""

    def __init__(self, net: ActorCritic, obs_norm, obs_space):
        super().__init__(name="policy")
        self._acts = []
        self.weights, self.biases = [], []
        for key in ("trunk", "actor"):
            for w, b, act in _layers(getattr(net, key)):
                self.weights.append(tf.Variable(w.numpy(), trainable=False))
                self.biases.append(tf.Variable(b.numpy(), trainable=False))
                self._acts.append(act)
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
        self.action = tf.function(self._action, input_signature=[_obs_spec(obs_space)])

    def _preprocess(self, obs):
        space = self._context.space
        if isinstance(space, gym.spaces.Discrete):
            return tf.one_hot(tf.cast(obs, tf.int32) - int(space.start), int(space.n))
        x = tf.cast(obs, tf.float32)
        return tf.reshape(x, [tf.shape(x)[0], -1])

    def _action(self, observation):
        x = self._preprocess(observation)
        if self.norm_mean is not None:
            x = tf.clip_by_value((x - self.norm_mean) / self.norm_std, -self._clip, self._clip)
        for w, b, act in zip(self.weights, self.biases, self._acts):
            x = tf.matmul(x, w) + b
            if act is not None:
                x = _tf_activation(act)(x)
        h = self._context.head
        if isinstance(h, dist_lib.CategoricalHead):
            return tf.argmax(x, axis=1) + h.start
        if isinstance(h, dist_lib.GaussianHead):
            return tf.clip_by_value(tf.reshape(x, _batch_shape(x, h.space_shape)), h.low, h.high)
        if isinstance(h, dist_lib.MultiCategoricalHead):
            parts = tf.split(x, [int(n) for n in h.nvec], axis=1)
            modes = tf.stack([tf.argmax(p, axis=1) for p in parts], axis=1)
            return modes + tf.constant(np.asarray(h.start, np.int64))
        if isinstance(h, dist_lib.BernoulliHead):
            a = tf.cast(x > 0, tf.int8)
            return tf.reshape(a, _batch_shape(x, h.space_shape))
        raise ValueError(f"cannot export head {type(h).__name__}")


def _batch_shape(x: tf.Tensor, shape) -> tf.Tensor:
    return tf.concat([tf.shape(x)[:1], tf.constant(shape, tf.int32)], 0)


def _obs_spec(space) -> tf.TensorSpec:
    """Input signature: raw batched obs for Box/Discrete, the flat vector for the others."""
    if isinstance(space, gym.spaces.Box):
        return tf.TensorSpec([None, *space.shape], tf.as_dtype(space.dtype), name="observation")
    if isinstance(space, gym.spaces.Discrete):
        return tf.TensorSpec([None], tf.int64, name="observation")
    return tf.TensorSpec([None, spaces.flat_dim(space)], tf.float32, name="observation")


def export_policy(net: ActorCritic, obs_norm, obs_space, path: str) -> None:
    """Writes a SavedModel whose ``action(observation)`` returns deterministic env actions.

    Load with ``tf.saved_model.load(path).action(obs)``; pgrad is not needed. ``observation`` is
    the raw batched observation ``[N, *shape]`` for Box spaces, ``[N]`` int64 for Discrete, and
    the flat float32 vector of :mod:`pgrad.spaces` ``[N, flat_dim]`` for the other spaces. The
    observation normaliser (if any) is inside. Actions: argmax (Discrete, MultiDiscrete), the
    Gaussian mean clipped to the bounds (Box), ``logit > 0`` (MultiBinary).
    """
    module = _ExportedPolicy(net, obs_norm, obs_space)
    tf.saved_model.save(module, path,
                        signatures={"action": module.action.get_concrete_function()})
