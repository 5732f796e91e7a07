"""Opponents in two-player games on agent rows: a uniform random legal player and a policy's past
weights.

Both act on rows of a :class:`~pgrad.rl.multiagent.rows.AgentRowsVectorEnv`: observations
``[N, D]`` (the flat rows) and action masks ``[N, k]`` bool (or None for a game without masks),
and return actions ``[N]``.

* :func:`random_legal` draws uniformly among the legal actions of each row (every action where
  the game gives no mask).
* :class:`SnapshotPlayer` acts with a flat weight vector of a Dense-only policy
  (:meth:`pgrad.rl.acting.policy.NumpyPolicy.flat_numpy`: a snapshot taken earlier in training),
  through a numpy mirror of the same network whose weights it replaces for each call.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pgrad.rl.acting.policy import NumpyPolicy
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
      net: the network whose snapshots it plays (Dense-only: acted through a numpy mirror).
    """

    def __init__(self, net: ActorCritic):
        if net.encoder is not None or net.recurrent:
            raise ValueError("snapshot opponents act through the numpy mirror of a Dense-only, "
                             "feed-forward policy; this network has an encoder or a recurrent "
                             "core.")
        self.mirror = NumpyPolicy(net)
        self.head = net.head
        self.size = int(self.mirror.flat_numpy().size)  # P

    def act(self, weights: np.ndarray, obs: np.ndarray, action_mask: np.ndarray | None,
            rng: np.random.Generator | None, deterministic: bool = False) -> np.ndarray:
        """Env actions ``[N]`` of the policy with flat ``weights`` ``[P]`` at ``obs`` ``[N, D]``:
        sampled with ``rng`` (masked to the legal actions), or the most likely legal action
        when ``deterministic``."""
        weights = np.asarray(weights, np.float32)
        if weights.shape != (self.size,):
            raise ValueError(f"a snapshot of this policy has {self.size} weights; got shape "
                             f"{weights.shape}.")
        self.mirror.load_flat(weights)
        params, _ = self.mirror.forward(np.asarray(obs, np.float32))
        if deterministic:
            actions = self.mirror.mode(params, action_mask)
        else:
            if rng is None:
                raise ValueError("a sampling snapshot player needs a random generator.")
            actions = self.mirror.sample(params, rng, None, action_mask)[0]
        return np.asarray(self.head.to_env(actions))
