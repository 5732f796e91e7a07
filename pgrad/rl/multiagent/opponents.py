"""Opponents in two-player games on agent rows: a uniform random legal player and a policy's past
weights.

Both act on rows of a :class:`~pgrad.rl.multiagent.rows.AgentRowsVectorEnv`: observations
``[N, D]`` (the flat rows) and action masks ``[N, k]`` bool (or None for a game without masks),
and return actions ``[N]``.

* :func:`random_legal` draws uniformly among the legal actions of each row (every action where
  the game gives no mask).
* :class:`SnapshotPlayer` acts with a flat weight vector of the policy (a snapshot taken earlier
  in training: the acting copy's ``flat_numpy()``). A Dense-only policy acts through a numpy
  mirror of the same network whose weights it replaces for each call
  (:meth:`pgrad.rl.acting.policy.NumpyPolicy.load_flat`); a policy with an encoder (a CNN,
  :class:`~pgrad.rl.multiagent.board.BoardCNN`) through one traced call of the live Keras
  network with the snapshot's values in place of its policy variables (``keras.StatelessScope``:
  the live variables are neither read nor changed). Both then sample (masked to the legal
  actions) or take the most likely legal action with the numpy samplers of
  :mod:`pgrad.rl.acting.sampling`, so from the same parameters and generator they pick what the
  agent's own acting would.
"""

from __future__ import annotations

from collections.abc import Callable

import keras
import numpy as np
import tensorflow as tf

from pgrad.rl.acting.policy import NumpyPolicy
from pgrad.rl.acting.sampling import mode_numpy, sample_numpy
from pgrad.rl.flat_call import flat_caller
from pgrad.rl.models.networks import ActorCritic

__all__ = ["Act", "SnapshotPlayer", "random_legal"]

#: ``(observations [N, D], action masks [N, k] bool or None) -> actions [N]``.
Act = Callable[[np.ndarray, np.ndarray | None], np.ndarray]


def random_legal(rng: np.random.Generator, n_actions: int) -> Act:
    """A player that picks uniformly among each row's legal actions.

    Args:
      rng: its random generator (each call draws ``[N, n_actions]`` uniforms).
      n_actions: the size of the game's ``Discrete`` action space.
    """
    k = int(n_actions)

    def act(obs: np.ndarray, action_mask: np.ndarray | None) -> np.ndarray:
        u = rng.random((len(obs), k))  # [N, k]: the argmax over legal entries is uniform on them
        if action_mask is not None:
            legal = np.asarray(action_mask, bool)
            if legal.shape != u.shape:
                raise ValueError(f"random_legal: action masks of shape {legal.shape}; the rows "
                                 f"need {u.shape}.")
            u = np.where(legal, u, -1.0)
        return np.argmax(u, axis=1)

    return act


class SnapshotPlayer:
    """Acts with past weights of ``net``'s policy (see the module docstring).

    Args:
      net: the network whose snapshots it plays (feed-forward): Dense-only, acted through a
        numpy mirror; or with an encoder, acted through the network itself.
    """

    def __init__(self, net: ActorCritic):
        if net.recurrent:
            raise ValueError("snapshot opponents act with feed-forward policies; this network "
                             "has a recurrent core.")
        self.head = net.head
        self.mirror: NumpyPolicy | None = None
        self.encoded: _EncodedSnapshots | None = None
        if net.encoder is None:
            self.mirror = NumpyPolicy(net)
            self.size = int(self.mirror.flat_numpy().size)  # P
        else:
            self.encoded = _EncodedSnapshots(net)
            self.size = self.encoded.size

    def params(self, weights: np.ndarray, obs: np.ndarray) -> np.ndarray:
        """``[N, param_size]`` distribution parameters of the policy with flat ``weights``
        ``[P]`` at ``obs`` ``[N, D]``."""
        weights = np.asarray(weights, np.float32)
        if weights.shape != (self.size,):
            raise ValueError(f"a snapshot of this policy has {self.size} weights; got shape "
                             f"{weights.shape}.")
        if self.encoded is not None:
            return self.encoded.params(weights, obs)
        assert self.mirror is not None
        self.mirror.load_flat(weights)
        return self.mirror.forward(np.asarray(obs, np.float32))[0]

    def act(self, weights: np.ndarray, obs: np.ndarray, action_mask: np.ndarray | None,
            rng: np.random.Generator | None, deterministic: bool = False) -> np.ndarray:
        """Env actions ``[N]`` of the policy with flat ``weights`` ``[P]`` at ``obs`` ``[N, D]``:
        sampled with ``rng`` (masked to the legal actions), or the most likely legal action
        when ``deterministic``."""
        params = self.params(weights, obs)
        if deterministic:
            actions = mode_numpy(self.head, params, action_mask)
        else:
            if rng is None:
                raise ValueError("a sampling snapshot player needs a random generator.")
            log_std = None if self.mirror is None else self.mirror.log_std
            actions = sample_numpy(self.head, params, log_std, rng, None, action_mask)[0]
        return np.asarray(self.head.to_env(actions))


class _EncodedSnapshots:
    """The parameters of an encoded policy at flat weights ``[P]``: its policy variables
    (:attr:`ActorCritic.policy_variables`, the order of
    :meth:`pgrad.rl.acting.compiled_actor.CompiledActor.flat_numpy`) replaced by the
    snapshot's values inside one traced call (batch dimension open)."""

    def __init__(self, net: ActorCritic):
        extra = [v for v in getattr(net.encoder, "non_trainable_variables", [])]
        if extra or getattr(net.head, "log_std", None) is not None:
            raise ValueError("snapshot opponents copy a policy's trainable weights; this "
                             "network's encoder has non-trainable state or its head a log-std.")
        self.net = net
        self.layout = net.encoder.layout  # type: ignore[union-attr]
        self._vars = list(net.policy_variables)
        self._shapes = [tuple(int(d) for d in v.shape) for v in self._vars]
        self._sizes = [int(np.prod(s)) for s in self._shapes]
        self.size = int(sum(self._sizes))
        specs = self.layout.split(self.layout.tensor_specs(names=False))
        fn = tf.function(self._params, autograph=False)
        self._call = flat_caller(fn.get_concrete_function(tf.TensorSpec([self.size]), *specs))

    def _params(self, flat: tf.Tensor, *parts: tf.Tensor) -> tf.Tensor:
        values = [tf.reshape(x, s) for x, s in zip(tf.split(flat, self._sizes), self._shapes)]
        with keras.StatelessScope(state_mapping=list(zip(self._vars, values))):
            return self.net.params(self.layout.join(parts))

    def params(self, weights: np.ndarray, obs: np.ndarray) -> np.ndarray:
        parts = [tf.constant(np.asarray(x, p.dtype))
                 for x, p in zip(self.layout.split(obs), self.layout.parts)]
        return self._call(tf.constant(weights), *parts).numpy()
