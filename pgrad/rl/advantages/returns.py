"""Returns and advantages as pure functions over time-major ``[T, B]`` tensors.

Termination and truncation are separate inputs, never one ``done`` flag:

* ``terminated[t]`` -- the episode ended at step t for real: nothing follows, discount 0.
* ``truncated[t]`` -- the episode was cut (time limit): the return continues past it, so we
  bootstrap from ``next_values[t]``, the critic's value of the *final* observation of that
  episode (not the reset observation the vector env shows next).

``next_values[t]`` is ``V(s_{t+1})`` for the observation that really followed step t: the next
row's observation within an episode, the final observation at an episode end, and the
observation after the rollout at ``t = T - 1``. Where no critic exists, pass zeros (truncated
episodes then count as ending there). :func:`vtrace`, the off-policy targets, keeps the same
conventions.
"""

from __future__ import annotations

from typing import NamedTuple

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


def discounted_returns(rewards: tf.Tensor, terminated: tf.Tensor, truncated: tf.Tensor,
                       next_values: tf.Tensor, gamma: float) -> tf.Tensor:
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


def gae(rewards: tf.Tensor, values: tf.Tensor, next_values: tf.Tensor, terminated: tf.Tensor,
        truncated: tf.Tensor, gamma: float, lambda_: float) -> tf.Tensor:
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


def lambda_returns(rewards: tf.Tensor, values: tf.Tensor, next_values: tf.Tensor,
                   terminated: tf.Tensor, truncated: tf.Tensor, gamma: float,
                   lambda_: float) -> tf.Tensor:
    """``[T, B]`` TD(lambda) returns, ``gae(...) + values``: the critic's regression target."""
    return gae(rewards, values, next_values, terminated, truncated, gamma, lambda_) + _f32(values)


class VTraceReturns(NamedTuple):
    """What :func:`vtrace` returns; every field is ``[T, B]`` and carries no gradient."""

    vs: tf.Tensor  # [T, B] V-trace targets v_s for the critic, (V(x_s) - v_s)^2
    pg_advantages: tf.Tensor  # [T, B] min(pg_rho_bar, rho_s) (q_s - V(x_s)), the policy weights
    q_estimates: tf.Tensor  # [T, B] q_s = r_s + gamma v_{s+1}, before the importance weight
    rhos: tf.Tensor  # [T, B] pi(a_s | x_s) / mu(a_s | x_s), not truncated


def _check_threshold(name: str, value) -> None:
    if isinstance(value, (int, float)) and not value > 0:
        raise ValueError(f"vtrace: {name} must be > 0 (float('inf') turns clipping off); "
                         f"got {value}.")


def vtrace(rewards: tf.Tensor, values: tf.Tensor, next_values: tf.Tensor,
           terminated: tf.Tensor, truncated: tf.Tensor, behaviour_log_probs: tf.Tensor,
           target_log_probs: tf.Tensor, gamma: float, *, rho_bar: float = 1.0, c_bar: float = 1.0,
           pg_rho_bar: float | None = None, lambda_: float = 1.0) -> VTraceReturns:
    """V-trace targets and policy-gradient advantages (Espeholt et al., 2018, IMPALA).

    The actions were sampled by a behaviour policy mu; the targets are for the target policy pi.
    With ``rho_t = pi(a_t | x_t) / mu(a_t | x_t)`` and ``V(x_{t+1}) = next_values_t``::

        delta_t = min(rho_bar, rho_t) * (r_t + gamma * (1 - term_t) * next_values_t - values_t)
        c_t     = lambda_ * min(c_bar, rho_t)
        v_s - values_s = delta_s + gamma * cont_s * c_s * (v_{s+1} - values_{s+1}),  zero at s = T
        cont_t  = (1 - term_t) * (1 - trunc_t)

    i.e. ``v_s = V(x_s) + sum_{t >= s} gamma^{t-s} (prod_{i=s}^{t-1} c_i) delta_t`` with the sum
    stopping at the end of the episode or of the rollout. A termination is a discount of 0; a
    truncation bootstraps from the value of the episode's final observation (``next_values``)
    but the trace does not cross the boundary, as in :func:`gae`. The policy-gradient
    advantage is::

        q_s = r_s + gamma * (1 - term_s) * (cont_s * lambda_ * v_{s+1}
                                            + (1 - cont_s * lambda_) * next_values_s)
        pg_advantages_s = min(pg_rho_bar, rho_s) * (q_s - values_s)

    with ``v_T = next_values_{T-1}`` (the value after the rollout). ``lambda_ = 1`` is the
    paper's ``r_s + gamma v_{s+1}``; the ``lambda_`` mix with ``V(x_{s+1})`` is rlax's, so that
    on-policy (``pi = mu``, ``c_bar >= 1``) ``vs == lambda_returns(..., lambda_)`` and
    ``pg_advantages == gae(..., lambda_)``. Inside an episode ``next_values_s`` must equal
    ``values_{s+1}`` (a rollout's values do): ``v_{s+1}`` is built on the latter.

    For the transform form, weight the per-step gradients by ``q_estimates - values`` and let
    :func:`pgrad.importance_weight` multiply in ``min(pg_rho_bar, rho_t)`` from the current
    log-probabilities of the engine's pass.

    Args:
      rewards: ``[T, B]`` r_t, times [0, T-1].
      values: ``[T, B]`` V(x_t) under the target policy's critic, times [0, T-1].
      next_values: ``[T, B]`` V(x_{t+1}) (see the module docstring), times [1, T].
      terminated, truncated: ``[T, B]`` 0/1.
      behaviour_log_probs: ``[T, B]`` log mu(a_t | x_t) stored when acting, times [0, T-1].
      target_log_probs: ``[T, B]`` log pi(a_t | x_t) of the policy being learned, times [0, T-1].
      gamma: discount in [0, 1].
      rho_bar: truncation of the importance weights in ``delta_t`` (the fixed point: rho_bar =
        inf is pi's value function, smaller values move it towards mu's).
      c_bar: truncation of the trace coefficients ``c_t`` (the speed of contraction).
      pg_rho_bar: truncation of the importance weight in the policy-gradient advantage;
        ``None`` uses ``rho_bar`` (IMPALA clips both at 1).
      lambda_: trace mixing in [0, 1], as in :func:`gae`.

    Returns:
      A :class:`VTraceReturns` ``(vs, pg_advantages, q_estimates, rhos)``, each ``[T, B]``
      with gradients stopped (they are targets and weights).
    """
    pg_rho_bar = rho_bar if pg_rho_bar is None else pg_rho_bar
    for name, value in (("rho_bar", rho_bar), ("c_bar", c_bar), ("pg_rho_bar", pg_rho_bar)):
        _check_threshold(name, value)
    if isinstance(lambda_, (int, float)) and not 0.0 <= lambda_ <= 1.0:
        raise ValueError(f"vtrace: lambda_ must be in [0, 1]; got {lambda_}.")
    names = ("rewards", "values", "next_values", "terminated", "truncated",
             "behaviour_log_probs", "target_log_probs")
    args = [_f32(x) for x in (rewards, values, next_values, terminated, truncated,
                              behaviour_log_probs, target_log_probs)]
    for name, x in zip(names[1:], args[1:]):
        if not x.shape.is_compatible_with(args[0].shape):
            raise ValueError(f"vtrace: {name} has shape {x.shape.as_list()} but rewards has "
                             f"{args[0].shape.as_list()}; every input is [T, B].")
    r, v, nv, term, trunc, mu_logp, pi_logp = args
    not_term = 1.0 - term
    cont = not_term * (1.0 - trunc)
    rhos = tf.exp(pi_logp - mu_logp)  # [T, B]
    delta = tf.minimum(tf.cast(rho_bar, tf.float32), rhos) * (r + gamma * not_term * nv - v)
    trace = gamma * cont * lambda_ * tf.minimum(tf.cast(c_bar, tf.float32), rhos)  # [T, B]

    def step(acc_next, x):
        d_t, k_t = x
        return d_t + k_t * acc_next

    vs = v + _reverse_scan(step, (delta, trace), tf.zeros_like(delta[-1]))  # [T, B]
    vs_next = tf.concat([vs[1:], nv[-1:]], axis=0)  # v_{s+1}; v_T is the value after the rollout
    bootstrap = cont * lambda_ * vs_next + (1.0 - cont * lambda_) * nv  # [T, B]
    q = r + gamma * not_term * bootstrap  # [T, B]
    pg = tf.minimum(tf.cast(pg_rho_bar, tf.float32), rhos) * (q - v)
    return VTraceReturns(*(tf.stop_gradient(x) for x in (vs, pg, q, rhos)))
