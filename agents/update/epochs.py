"""The minibatch loops of the compiled update, inside its traced graph.

:func:`policy_epochs` runs ``epochs`` shuffled passes of minibatch steps (each a
:class:`agents.update.minibatch.MinibatchStep`) in one ``tf.while_loop``, stopping early on
approximate
KL; :func:`critic_epochs` runs the critic's own passes (``critic_updates``, targets fixed at
collection). Both take ``compiled``, the :class:`agents.update.compiled.CompiledUpdate` they run in
(its
config, network, counters, step and optimizers). Shuffles come from ``(seed, update, epoch)``: a run
is the same on resume.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf
from tensorflow.python.ops import gen_stateless_random_ops

from agents.update import loss as loss_lib
from agents.update.minibatch import values_of
from pgrad.core import variables_as_values
from pgrad.core.per_step import zeros_for_unconnected

#: ``fn`` over every tensor of a nest (an observation's parts; a plain tensor is fn(tensor)).
_map = tf.nest.map_structure


def _uniform(shape: Any, seed: tf.Tensor) -> tf.Tensor:
    """``tf.random.stateless_uniform(shape, seed)``; inside a vectorized population update
    (:mod:`agents.update.vectorized`) through the older op with the same numbers (Philox from
    the same key; tested), which ``tf.vectorized_map`` runs member by member where the newer
    one has no rule at all."""
    if variables_as_values.active() is None:
        return tf.random.stateless_uniform(shape, seed)
    return gen_stateless_random_ops.stateless_random_uniform(shape, seed)


def policy_epochs(compiled: Any, data: dict, scalars: dict) -> tuple[dict, tf.Tensor]:
    """Runs every minibatch step of the update; returns (metric sums, minibatches counted)."""
    cfg = compiled.cfg
    n_static = data["advantages"].shape[0]
    mb = int(cfg.minibatch_size)
    whole = mb == 0 or (n_static is not None and mb >= n_static)
    if cfg.epochs == 1 and whole:  # plain A2C / REINFORCE: one step on the rollout as it is
        metrics, _ = compiled.step(data, scalars)
        return metrics, tf.constant(1.0)
    n = tf.shape(data["advantages"])[0]
    size = n if whole else tf.minimum(tf.constant(mb), n)
    per_epoch = n // size  # episode batches: a remainder of n % size steps sits out an epoch
    seed = tf.cast(compiled.seed_var, tf.int32) * 7919
    update = tf.cast(compiled.updates_var, tf.int32)
    if compiled.net.recurrent:  # env-major pieces of L steps, shuffled: mb / L per minibatch
        length = cfg.sequence_steps()
        steps = tf.range(length)[None]
        orders = tf.stack([tf.reshape(length * tf.argsort(_uniform(
            [n // length], tf.stack([seed + e, update])))[:, None] + steps, [-1])
            for e in range(int(cfg.epochs))])
    else:
        orders = tf.stack([  # [epochs, N] one shuffle per epoch, from (seed, update, epoch)
            tf.argsort(_uniform([n], tf.stack([seed + e, update])))
            for e in range(int(cfg.epochs))])
    total = per_epoch * int(cfg.epochs)
    keys = compiled.step.keys()

    def body(i, stopped, count, sums):
        start = (i % per_epoch) * size
        idx = orders[i // per_epoch, start: start + size]
        batch = {k: _map(lambda x: tf.gather(x, idx), v) for k, v in data.items()}
        if not whole and n_static is not None:  # static minibatch shapes: taps, no retrace
            batch = {k: _map(lambda x: tf.ensure_shape(x, [mb, *x.shape[1:]]), v)
                     for k, v in batch.items()}
        metrics, stop = compiled.step(batch, scalars)
        if set(metrics) != set(keys):
            raise RuntimeError(f"minibatch metrics {sorted(metrics)} differ from the "
                               f"expected {sorted(keys)}")
        sums = [s + metrics[k] for s, k in zip(sums, keys)]
        return i + 1, stop, count + 1.0, sums

    zeros = [tf.constant(0.0) for _ in keys]
    _, _, count, sums = variables_as_values.while_loop(
        lambda i, stopped, count, sums: tf.logical_and(i < total, tf.logical_not(stopped)),
        body, (tf.constant(0), tf.constant(False), tf.constant(0.0), zeros))
    return dict(zip(keys, sums)), count


def critic_epochs(compiled: Any, data: dict) -> tf.Tensor:
    """``critic_updates`` passes of the critic alone over the rollout (after the policy
    step, targets fixed at collection); returns the mean value loss over the steps."""
    cfg, net = compiled.cfg, compiled.net
    variables = net.value_only_variables
    n = tf.shape(data["returns"])[0]
    mb = int(cfg.critic_minibatch_size)
    n_static = data["returns"].shape[0]
    whole = mb == 0 or (n_static is not None and mb >= n_static)
    size = n if whole else tf.minimum(tf.constant(mb), n)
    per_pass = n // size
    seed = tf.cast(compiled.seed_var, tf.int32) * 7919 + 104729
    update = tf.cast(compiled.updates_var, tf.int32)

    def body(i, total):
        p = i // per_pass
        start = (i % per_pass) * size
        order = tf.argsort(_uniform([n], tf.stack([seed + p, update])))
        idx = order[start: start + size]
        if net.recurrent:  # the whole rollout's sequences (critic_minibatch_size 0)
            batch, ret = data, data["returns"]
        else:
            batch = {"obs": _map(lambda x: tf.gather(x, idx), data["obs"])}
            ret = tf.gather(data["returns"], idx)
        with tf.GradientTape() as tape:
            loss = loss_lib.value_loss(values_of(net, cfg.sequence_steps(), batch), ret)
        grads = zeros_for_unconnected(tape.gradient(loss, variables), variables)
        if cfg.max_grad_norm > 0:
            grads, _ = tf.clip_by_global_norm(grads, cfg.max_grad_norm)
        compiled.critic_optimizer.apply(grads, variables)
        return i + 1, total + loss

    steps = per_pass * int(cfg.critic_updates)
    _, total = variables_as_values.while_loop(lambda i, total: i < steps, body,
                             (tf.constant(0), tf.constant(0.0)))
    return total / tf.cast(tf.maximum(steps, 1), tf.float32)
