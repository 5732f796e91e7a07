"""Returns and advantages as pure functions over time-major ``[T, B]`` tensors.

Termination and truncation are separate inputs, never one ``done`` flag:

* ``terminated[t]`` -- the episode ended at step t for real: nothing follows, discount 0.
* ``truncated[t]`` -- the episode was cut (time limit): the return continues past it, so we
  bootstrap from ``next_values[t]``, the critic's value of the *final* observation of that
  episode (not the reset observation the vector env shows next).

``next_values[t]`` is ``V(s_{t+1})`` for the observation that really followed step t: the next
row's observation within an episode, the final observation at an episode end, and the
observation after the rollout at ``t = T - 1``. Where no critic exists, pass zeros (truncated
episodes then count as ending there).
"""

from __future__ import annotations

import tensorflow as tf


def _f32(x):
    return tf.cast(tf.convert_to_tensor(x), tf.float32)


#: Rollouts with a static length up to this are unrolled in the graph instead of a ``tf.scan``
#: (a while loop over TensorArrays costs tens of microseconds per step, which is most of the
#: work for A2C's 5-step rollouts). The same ops run in the same order: identical values.
UNROLL_MAX_STEPS = 32


def _reverse_scan(step, elems, initial):
    """``tf.scan`` from t = T-1 down to 0 (``[T, ...]`` outputs, stacked)."""
    steps = tf.nest.flatten(elems)[0].shape[0]
    if steps is None or steps > UNROLL_MAX_STEPS:
        return tf.scan(step, elems, initializer=initial, reverse=True)
    rows = [tf.unstack(x, num=steps) for x in tf.nest.flatten(elems)]
    out, carry = [None] * steps, initial
    for t in reversed(range(steps)):
        carry = out[t] = step(carry, tf.nest.pack_sequence_as(elems, [r[t] for r in rows]))
    return tf.stack(out)


def discounted_returns(rewards, terminated, truncated, next_values, gamma: float) -> tf.Tensor:
    """Discounted returns, bootstrapped at truncations and at the end of the rollout.

    Recursion (``G_T`` is ``next_values[T-1]``)::

        G_t = r_t + gamma * (1 - term_t) * (cont_t * G_{t+1} + (1 - cont_t) * next_values_t)
        cont_t = (1 - term_t) * (1 - trunc_t)

    With whole episodes ending in termination these are Monte-Carlo returns; over a fixed-length
    rollout they are the n-step returns bootstrapped from the value after the rollout.

    Args:
      rewards: ``[T, B]`` rewards r_t, times [0, T-1].
      terminated: ``[T, B]`` 1 where step t ended the episode for real.
      truncated: ``[T, B]`` 1 where step t was cut by a time limit.
      next_values: ``[T, B]`` V(s_{t+1}) as described in the module docstring.
      gamma: discount in [0, 1].

    Returns:
      ``[T, B]`` returns G_t.
    """
    r, term, trunc, nv = (_f32(x) for x in (rewards, terminated, truncated, next_values))
    not_term = 1.0 - term
    cont = not_term * (1.0 - trunc)

    def step(g_next, x):
        r_t, nt_t, c_t, nv_t = x
        return r_t + gamma * nt_t * (c_t * g_next + (1.0 - c_t) * nv_t)

    return _reverse_scan(step, (r, not_term, cont, nv), nv[-1])


def gae(rewards, values, next_values, terminated, truncated, gamma: float,
        lambda_: float) -> tf.Tensor:
    """Generalised advantage estimates, GAE(lambda).

    Recursion (``A_T = 0``)::

        delta_t = r_t + gamma * (1 - term_t) * next_values_t - values_t
        A_t     = delta_t + gamma * lambda_ * cont_t * A_{t+1},  cont_t = (1-term_t)(1-trunc_t)

    ``lambda_ = 1`` gives ``discounted_returns(...) - values`` (n-step advantages); ``lambda_ = 0``
    gives one-step TD errors.

    Args:
      rewards: ``[T, B]``, times [0, T-1].
      values: ``[T, B]`` V(s_t), times [0, T-1].
      next_values: ``[T, B]`` V(s_{t+1}) (see module docstring).
      terminated, truncated: ``[T, B]`` 0/1.
      gamma: discount in [0, 1].
      lambda_: GAE lambda in [0, 1].

    Returns:
      ``[T, B]`` advantages A_t.
    """
    r, v, nv, term, trunc = (_f32(x) for x in (rewards, values, next_values, terminated, truncated))
    not_term = 1.0 - term
    cont = not_term * (1.0 - trunc)
    delta = r + gamma * not_term * nv - v

    def step(a_next, x):
        d_t, c_t = x
        return d_t + gamma * lambda_ * c_t * a_next

    return _reverse_scan(step, (delta, cont), tf.zeros_like(delta[-1]))


def lambda_returns(rewards, values, next_values, terminated, truncated, gamma: float,
                   lambda_: float) -> tf.Tensor:
    """``[T, B]`` TD(lambda) returns, ``gae(...) + values``: the critic's regression target."""
    return gae(rewards, values, next_values, terminated, truncated, gamma, lambda_) + _f32(values)
