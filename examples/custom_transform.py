"""A custom gradient transform, plugged into training from the command line.

Each step's policy gradient ``g_t = ∇θ log π(a_t | s_t)`` is clipped to global norm ``MAX_NORM``
and weighted by the sign-preserving log-advantage ``w_t = sign(A_t) · log(1 + |A_t|)``, which
keeps the direction of every advantage but tames the large ones. The update is the mean over
steps of ``w_t · clip(g_t)``.

Three equivalent ways to write it:

* ``log_advantage`` -- a plain function ``fn(grads, **context) -> grads``. It sees the per-step
  gradients ``[T, *shape]`` (one per policy variable) and can do anything with them; it returns
  per-step gradients, so the mean over steps follows (``pgrad.from_function`` decides by shape).
  pgrad materialises the per-step gradients for it (the exact ``[T, params]`` jacobian,
  computed in chunks).
* ``log_advantage_mean`` -- the same, returning the final gradient ``[*shape]`` itself (weight
  each step, then average): an aggregated result is used as it is.
* ``fast`` -- the same maths from built-ins. Because clipping and weighting only rescale each
  step, pgrad's engine computes it with one backward pass and never materialises per-step
  gradients. Prefer this form when your transform is a per-step reweighting.

Try any of them::

    pgrad-train --agent a2c --env CartPole-v1 --total-steps 100000 \\
        --transform examples/custom_transform.py:log_advantage --out runs/log-adv
    pgrad-train --agent a2c --env CartPole-v1 --total-steps 100000 \\
        --transform examples/custom_transform.py:fast --out runs/log-adv-fast
"""

import tensorflow as tf

import pgrad

MAX_NORM = 1.0


def log_weight(advantages: tf.Tensor) -> tf.Tensor:
    """``[T]`` advantages -> ``[T]`` weights ``sign(A) · log(1 + |A|)``."""
    a = tf.cast(advantages, tf.float32)
    return tf.sign(a) * tf.math.log1p(tf.abs(a))


def log_advantage(grads: list[tf.Tensor], *, advantages: tf.Tensor, **context) -> list[tf.Tensor]:
    """Per-step ``[T, *shape]`` gradients -> clipped, log-advantage-weighted ``[T, *shape]``."""
    # Global norm of each step's gradient over all variables: [T].
    squares = [tf.reduce_sum(tf.reshape(tf.square(g), [tf.shape(g)[0], -1]), axis=1) for g in grads]
    norms = tf.sqrt(tf.add_n(squares))  # [T]
    clip = MAX_NORM / tf.maximum(norms, MAX_NORM)  # [T], 1 where the norm is already small
    w = clip * log_weight(advantages)  # [T]
    return [g * tf.reshape(w, [-1] + [1] * (len(g.shape) - 1)) for g in grads]


def log_advantage_mean(grads: list[tf.Tensor], *, advantages: tf.Tensor,
                       **context) -> list[tf.Tensor]:
    """Per-step ``[T, *shape]`` gradients -> the final ``[*shape]`` gradient (already averaged)."""
    return [tf.reduce_mean(g, axis=0) for g in log_advantage(grads, advantages=advantages)]


def fast() -> pgrad.GradientTransform:
    """The same transform from built-ins (zero-argument factory: ``--transform FILE:fast``)."""
    return pgrad.chain(
        pgrad.clip_per_step(MAX_NORM),
        pgrad.scale_steps(lambda advantages, **context: log_weight(advantages), name="log_adv"),
        pgrad.mean_steps(),
        name="clipped_log_advantage",
    )
