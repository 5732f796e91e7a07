"""Observation attacks against a policy: FGSM and projected gradient descent (L-inf ball).

The attacked quantity is the log-probability, under the policy, of the action it would choose
on the clean observation (its greedy action ``a* = mode(pi(. | s))``, fixed during the attack):

    FGSM:  s' = s - epsilon * sign(grad_s log pi(a* | s))
    PGD:   s_{k+1} = Proj_{||s' - s||_inf <= epsilon}(s_k - alpha * sign(grad log pi(a* | s_k)))

(Goodfellow et al. 2015; Huang et al. 2017 for policies; Madry et al. 2018 for PGD). Each row
of ``obs`` is attacked independently: the policy must act row-wise (as every pgrad policy does).

``policy_fn(obs) -> distribution`` (anything with ``log_prob`` and ``mode``, e.g. a pgrad
``ActionHead`` output) or ``policy_fn(obs) -> logits`` (then a Categorical over the last axis).

Caveat for Gaussian policies: at the clean observation the mean *is* the greedy action, so the
gradient of ``log pi(a* | s)`` with respect to the mean is zero there; with a state-independent
std (pgrad's ``GaussianHead``) FGSM then does nothing. Use ``pgd(..., random_start=True)`` or pass
``actions=`` (e.g. sampled actions) for continuous control.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf
import tensorflow_probability as tfp

tfd = tfp.distributions

PolicyFn = Callable[[tf.Tensor], Any]


def as_distribution(out: Any) -> tfp.distributions.Distribution:
    """A policy output as a distribution: itself if it has ``log_prob``, else Categorical logits."""
    if hasattr(out, "log_prob") and hasattr(out, "mode"):
        return out
    return tfd.Categorical(logits=tf.convert_to_tensor(out))


def _float_obs(obs) -> tf.Tensor:
    obs = tf.convert_to_tensor(obs)
    return obs if obs.dtype.is_floating else tf.cast(obs, tf.float32)


def greedy_actions(obs: tf.Tensor, policy_fn: PolicyFn) -> tf.Tensor:
    """``[B, *action_shape]`` mode of the policy at ``obs`` (no gradient flows through it)."""
    return tf.stop_gradient(as_distribution(policy_fn(_float_obs(obs))).mode())


def action_log_prob(obs: tf.Tensor, policy_fn: PolicyFn, actions: tf.Tensor) -> tf.Tensor:
    """``[B]`` log-probability of ``actions`` under the policy at ``obs``."""
    return as_distribution(policy_fn(_float_obs(obs))).log_prob(actions)


def obs_gradient(obs: tf.Tensor, policy_fn: PolicyFn, actions: tf.Tensor) -> tf.Tensor:
    """``grad_obs log pi(actions | obs)``, ``[B, ...]`` like ``obs`` (row b from row b)."""
    obs = _float_obs(obs)
    with tf.GradientTape() as tape:
        tape.watch(obs)
        total = tf.reduce_sum(action_log_prob(obs, policy_fn, actions))
    grad = tape.gradient(total, obs, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return tf.convert_to_tensor(grad)


def _clip(x: tf.Tensor, low, high) -> tf.Tensor:
    if low is not None:
        x = tf.maximum(x, tf.cast(low, x.dtype))
    if high is not None:
        x = tf.minimum(x, tf.cast(high, x.dtype))
    return x


def fgsm(
    obs: tf.Tensor,
    policy_fn: PolicyFn,
    epsilon: float | tf.Tensor,
    *,
    actions: tf.Tensor | None = None,
    low: Any = None,
    high: Any = None,
) -> tf.Tensor:
    """Fast gradient sign attack: one step of size ``epsilon`` against ``log pi(a* | s)``.

    Args:
      obs: ``[B, ...]`` observations.
      policy_fn: ``obs -> distribution`` or ``obs -> logits``.
      epsilon: L-inf radius; a scalar or anything broadcastable to one observation (per-feature).
      actions: ``[B, ...]`` actions whose probability to lower; default the greedy actions at
        ``obs``.
      low: optional lower observation bound to clip the result to.
      high: optional upper observation bound to clip the result to.

    Returns:
      ``[B, ...]`` perturbed observations, ``|s' - s| <= epsilon`` elementwise (every coordinate
      with a nonzero gradient moves by exactly ``epsilon`` before bound clipping).
    """
    obs = _float_obs(obs)
    if actions is None:
        actions = greedy_actions(obs, policy_fn)
    eps = tf.cast(epsilon, obs.dtype)
    grad = obs_gradient(obs, policy_fn, actions)
    return tf.stop_gradient(_clip(obs - eps * tf.sign(grad), low, high))


def pgd(
    obs: tf.Tensor,
    policy_fn: PolicyFn,
    epsilon: float | tf.Tensor,
    *,
    steps: int = 10,
    step_size: float | None = None,
    actions: tf.Tensor | None = None,
    random_start: bool = False,
    seed: tuple[int, int] | None = None,
    low: Any = None,
    high: Any = None,
) -> tf.Tensor:
    """Projected gradient (sign) descent on ``log pi(a* | s')`` inside the L-inf ball.

    Args:
      obs: ``[B, ...]`` observations.
      policy_fn: ``obs -> distribution`` or ``obs -> logits``.
      epsilon: L-inf radius (scalar or broadcastable per feature).
      steps: number of sign-gradient steps (unrolled: keep it small inside ``tf.function``).
      step_size: ``alpha``; default ``2.5 * epsilon / steps`` (Madry et al.).
      actions: actions whose probability to lower; default the greedy actions at the clean obs.
      random_start: start from a uniform point in the ball instead of ``obs``.
      seed: ``(int, int)`` stateless seed for the random start (else the global generator).
      low: optional lower observation bound, enforced after every step.
      high: optional upper observation bound, enforced after every step.

    Returns:
      ``[B, ...]`` perturbed observations with ``|s' - s| <= epsilon`` elementwise.
    """
    if steps < 1:
        raise ValueError(f"pgd: steps must be >= 1; got {steps}.")
    obs = _float_obs(obs)
    if actions is None:
        actions = greedy_actions(obs, policy_fn)
    eps = tf.cast(epsilon, obs.dtype)
    alpha = 2.5 * eps / steps if step_size is None else tf.cast(step_size, obs.dtype)
    lo, hi = obs - eps, obs + eps  # the ball as elementwise bounds
    adv = obs
    if random_start:
        shape = tf.shape(obs)
        if seed is None:
            unit = tf.random.uniform(shape, -1.0, 1.0, dtype=obs.dtype)
        else:
            unit = tf.random.stateless_uniform(shape, seed, -1.0, 1.0, dtype=obs.dtype)
        adv = _clip(obs + eps * unit, low, high)
    for _ in range(steps):
        grad = obs_gradient(adv, policy_fn, actions)
        adv = tf.clip_by_value(adv - alpha * tf.sign(grad), lo, hi)
        adv = _clip(adv, low, high)
    return tf.stop_gradient(adv)


def make_attack(
    kind: str, epsilon: float, *, steps: int = 10, step_size: float | None = None,
    random_start: bool = False,
) -> Callable[[tf.Tensor, PolicyFn], tf.Tensor]:
    """``attack(obs, policy_fn) -> perturbed obs`` by name, for scripts (``"fgsm"``, ``"pgd"``).

    ``epsilon == 0`` returns the observations unchanged (a clean baseline in the same loop).
    """
    if kind not in ("fgsm", "pgd"):
        raise ValueError(f"unknown attack {kind!r}; choose 'fgsm' or 'pgd'.")
    if epsilon < 0:
        raise ValueError(f"epsilon must be >= 0; got {epsilon}.")

    def attack(obs, policy_fn):
        if epsilon == 0:
            return _float_obs(obs)
        if kind == "fgsm":
            return fgsm(obs, policy_fn, epsilon)
        return pgd(obs, policy_fn, epsilon, steps=steps, step_size=step_size,
                   random_start=random_start)

    return attack
