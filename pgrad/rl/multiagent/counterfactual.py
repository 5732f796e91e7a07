"""COMA's centralised critic on agent rows: ``Q(s, (u_-a, .))``, one value per action of ``a``.

The critic of the counterfactual advantage (:mod:`pgrad.transforms.counterfactual`, Foerster
et al. 2018) reads, for row ``b n + i`` (agent ``i`` of copy ``b``) at step ``t``,

    ``[what the row sees centrally (D_c) | agent one-hot (n) | the other agents' actions,
    one-hot, end to end (n k; agent i's own block zero)]``

and answers ``[k]``: ``Q`` of each action agent ``i`` could take, the others' held at theirs.
What the row sees centrally is its own row when the rows carry the state (MAPPO's rows,
:class:`~pgrad.rl.multiagent.central.StateRowsVectorEnv`: ``[own observation | state]``), or
the copy's joint observation (its agents' rows end to end, ``n D``) when they do not (IPPO's).

The critic is trained by regression of ``Q(x_t, u_t)`` (the taken action's output) on targets
``y_t`` the learner gives (``ippo``/``mappo`` give the GAE(lambda) returns of their own
critic: ``Q`` then estimates ``E[R^lambda_t | s_t, u_t]``).
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf

from pgrad.rl.models.dense import mlp

__all__ = ["CounterfactualCritic", "critic_input_size", "critic_inputs"]


def critic_input_size(row_dim: int, n_agents: int, n_actions: int, joint: bool) -> int:
    """``F``: the width :func:`critic_inputs` gives (``D_c + n + n k``)."""
    central = n_agents * row_dim if joint else row_dim
    return central + n_agents + n_agents * n_actions


def critic_inputs(obs: np.ndarray, actions: np.ndarray, n_agents: int, n_actions: int,
                  joint: bool = False) -> np.ndarray:
    """The critic's input of every row and step (module docstring).

    Args:
      obs: ``[T, n B, D]`` float the rows' observations (rows ordered ``[copy, agent]``).
      actions: ``[T, n B]`` int the rows' actions, in ``[0, k)``.
      n_agents: ``n``.
      n_actions: ``k``.
      joint: read the copy's joint observation (``n D``) instead of the row's own (``D``).

    Returns:
      ``[T, n B, F]`` float32, ``F = critic_input_size(D, n, k, joint)``.

    Raises:
      ValueError: the rows are not ``n`` per copy, the shapes disagree, an action is out of
        range.
    """
    obs, actions = np.asarray(obs, np.float32), np.asarray(actions)
    if obs.ndim != 3 or actions.shape != obs.shape[:2]:
        raise ValueError(f"critic_inputs: obs must be [T, n B, D] and actions [T, n B]; got "
                         f"{obs.shape} and {actions.shape}.")
    T, R, D = obs.shape
    n, k = int(n_agents), int(n_actions)
    if R % n:
        raise ValueError(f"critic_inputs: {R} rows are not {n} agents per copy.")
    if actions.size and (actions.min() < 0 or actions.max() >= k):
        raise ValueError(f"critic_inputs: actions must be in [0, {k}); got "
                         f"[{actions.min()}, {actions.max()}].")
    B = R // n
    hot = np.eye(k, dtype=np.float32)[actions.astype(np.int64)].reshape(T, B, 1, n * k)
    others = np.repeat(hot, n, axis=2)  # [T, B, n, n k]: every agent's action, per row
    own = np.arange(n)
    for i in own:  # row i does not see its own action (Q answers one value per each of them)
        others[:, :, i, i * k:(i + 1) * k] = 0.0
    if joint:
        central = np.repeat(obs.reshape(T, B, 1, n * D), n, axis=2)  # [T, B, n, n D]
    else:
        central = obs.reshape(T, B, n, D)
    ids = np.broadcast_to(np.eye(n, dtype=np.float32), (T, B, n, n))
    out = np.concatenate([central, ids, others], axis=3)  # [T, B, n, F]
    return out.reshape(T, R, -1)


class CounterfactualCritic:
    """``Q``: ``[N, F] -> [N, k]``, an MLP trained by regression on the taken action's output.

    Args:
      input_size: ``F`` (:func:`critic_input_size`).
      n_actions: ``k``.
      hidden: hidden layer widths; activation: their activation.
      learning_rate: Adam's step size (epsilon 1e-5, as the agents' optimizers).
      max_grad_norm: clip each step's gradient to this global norm (0: no clipping).
      seed: seeds the initial weights.
    """

    def __init__(self, input_size: int, n_actions: int, hidden: Sequence[int] = (64, 64),
                 activation: str = "tanh", learning_rate: float = 5e-4,
                 max_grad_norm: float = 10.0, seed: int = 0):
        if int(input_size) < 1 or int(n_actions) < 2:
            raise ValueError(f"CounterfactualCritic needs input_size >= 1 and n_actions >= 2; "
                             f"got {input_size} and {n_actions}.")
        self.input_size, self.n_actions = int(input_size), int(n_actions)
        self.model = mlp(self.input_size, tuple(hidden), self.n_actions, activation,
                         name="counterfactual_q", seed=int(seed))
        self.optimizer = keras.optimizers.Adam(float(learning_rate), epsilon=1e-5)
        self.optimizer.build(self.model.trainable_variables)  # slots exist before a restore
        self.max_grad_norm = float(max_grad_norm)
        self._train = tf.function(self._train_step, reduce_retracing=True)

    def q_values(self, inputs: np.ndarray | tf.Tensor) -> tf.Tensor:
        """``[N, F] -> [N, k]`` Q of each action."""
        inputs = tf.convert_to_tensor(inputs, tf.float32)
        if inputs.shape.rank != 2 or inputs.shape[-1] != self.input_size:
            raise ValueError(f"CounterfactualCritic: inputs must be [N, {self.input_size}]; "
                             f"got {inputs.shape.as_list()}.")
        return self.model(inputs)

    def _train_step(self, inputs: tf.Tensor, actions: tf.Tensor, targets: tf.Tensor
                    ) -> tf.Tensor:
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            q = self.model(inputs)  # [M, k]
            taken = tf.gather(q, actions, axis=1, batch_dims=1)  # [M] Q(x, u)
            loss = tf.reduce_mean(tf.square(targets - taken))
        grads = tape.gradient(loss, variables)
        if self.max_grad_norm > 0:
            grads, _ = tf.clip_by_global_norm(grads, self.max_grad_norm)
        self.optimizer.apply(grads, variables)
        return loss

    def fit(self, inputs: np.ndarray, actions: np.ndarray, targets: np.ndarray, epochs: int,
            minibatches: int, rng: np.random.Generator) -> float:
        """Regresses ``Q(x, u)`` on ``targets``: ``epochs`` shuffled passes of ``minibatches``
        equal minibatches (a remainder of ``N % minibatches`` rows sits out each pass).

        Args:
          inputs: ``[N, F]``; actions: ``[N]`` int the taken actions; targets: ``[N]``.
          rng: the shuffles' generator.

        Returns:
          The mean squared error over the steps, before each step.
        """
        inputs = np.asarray(inputs, np.float32)
        actions = np.asarray(actions, np.int32).reshape(-1)
        targets = np.asarray(targets, np.float32).reshape(-1)
        N = inputs.shape[0]
        if actions.shape != (N,) or targets.shape != (N,):
            raise ValueError(f"CounterfactualCritic.fit: {N} inputs, {actions.shape[0]} "
                             f"actions and {targets.shape[0]} targets differ.")
        size = max(1, N // max(1, int(minibatches)))
        losses = []
        for _ in range(int(epochs)):
            order = rng.permutation(N)
            for start in range(0, N - size + 1, size):
                idx = order[start: start + size]
                losses.append(self._train(tf.constant(inputs[idx]), tf.constant(actions[idx]),
                                          tf.constant(targets[idx])))
        return float(np.mean([float(x) for x in losses])) if losses else float("nan")

    def trackables(self) -> dict[str, object]:
        """The critic's model and optimizer, for a checkpoint."""
        return {"counterfactual_q": self.model, "counterfactual_optimizer": self.optimizer}
