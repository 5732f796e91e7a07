"""The export of a policy that reads some columns of its row: it answers those columns alone.

A many-agent row is ``[own observation | agent one-hot | the copy's state]``; MAPPO's actor
reads only the first part (its centralised critic reads the rest). An encoder that says which
columns it reads -- a sub-layer of the actor's encoder with a ``columns`` attribute, ``[K]``
ints, as MAPPO's actor has -- is exported as a policy of those ``K`` columns: the SavedModel's
functions take an agent's own observation (``[K]``, or a batch ``[..., K]``; its one-hot index
appended when the agent trained with ``agent_id``) and its action mask, and need neither the
state nor the other agents. Inside, the ``K`` values are placed at their columns of a row whose
other columns are zero (columns the actor never reads), and the actor runs on that row exactly
as in training.
"""

from __future__ import annotations

import types

import gymnasium as gym
import numpy as np
import tensorflow as tf

from pgrad.rl.export.feedforward import EncoderExport
from pgrad.rl.models.networks import ActorCritic

__all__ = ["ColumnsExport", "read_columns"]


def read_columns(net: ActorCritic, obs_space: gym.Space) -> list[int] | None:
    """The columns of the flat row ``net``'s actor reads, or None when it reads the whole row
    (or the network is recurrent, or the row is not one flat float Box)."""
    if (net.recurrent or net.encoder is None or not isinstance(obs_space, gym.spaces.Box)
            or len(obs_space.shape) != 1):
        return None
    found = [layer.columns for layer in net.encoder._flatten_layers()
             if getattr(layer, "columns", None) is not None]
    if len(found) != 1:
        return None
    columns = [int(c) for c in found[0]]
    width = int(obs_space.shape[0])
    if sorted(set(columns)) == list(range(width)) or not all(0 <= c < width for c in columns):
        return None
    return columns


class ColumnsExport(EncoderExport):
    """:class:`EncoderExport` of the ``columns`` of ``row_space`` the actor reads.

    Args:
      net, obs_norm: as :class:`EncoderExport` (the normaliser's statistics are the row's).
      row_space: the row's ``Box([D])``.
      columns: ``[K]`` the columns the actor reads, in the order the export takes them.
    """

    def __init__(self, net: ActorCritic, obs_norm, row_space: gym.spaces.Box,
                 columns: list[int]):
        index = np.full(int(row_space.shape[0]), len(columns), np.int32)  # K: the zero column
        index[np.asarray(columns)] = np.arange(len(columns), dtype=np.int32)
        # Read while tracing, in EncoderExport.__init__; a namespace so that it is not saved.
        self._row = types.SimpleNamespace(index=tf.constant(index))  # [D] int32
        own = gym.spaces.Box(row_space.low[columns], row_space.high[columns],
                             dtype=row_space.dtype)
        super().__init__(net, obs_norm, own)

    def _params(self, x):
        x = tf.cast(x, tf.float32)  # [N, K]
        padded = tf.concat([x, tf.zeros_like(x[:, :1])], axis=1)  # [N, K + 1]
        row = tf.gather(padded, self._row.index, axis=1)  # [N, D]: zeros outside the columns
        return super()._params(row)
