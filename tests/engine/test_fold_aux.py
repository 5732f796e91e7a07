"""``pgrad.engine.run(..., fold_aux=True)``: the policy gradient and an aux loss from one
backward pass where the chain is its weighted sum alone, against ``tape.jacobian`` rows and a
plain gradient of the aux loss; chains that transform the aggregated gradient keep them apart."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from policies import KerasPolicy, assert_all_close, jacobian_reference, reference_update

import pgrad
from pgrad import engine


def _setup(t=8):
    """A small CNN policy on uint8 frames plus a value head on its features (not a policy
    variable): ``(policy, value head, obs, actions, advantages, returns)``."""
    p = KerasPolicy([keras.layers.Conv2D(4, 3, strides=2, activation="relu"),
                     keras.layers.Flatten(), keras.layers.Dense(8, activation="tanh")],
                    (9, 9, 2), kind="uint8")
    value_head = keras.layers.Dense(1)
    features = keras.Sequential(p.net.layers[:-1])
    value_head.build((None, 8))
    obs, act = p.batch(t)
    adv = tf.constant(np.linspace(-2, 2, t), tf.float32)
    ret = tf.constant(np.linspace(1, -1, t), tf.float32)
    return p, value_head, features, obs, act, adv, ret


def _run(chain, fold, t=8, compiled=False):
    p, value_head, features, obs, act, adv, ret = _setup(t)
    aux_vars = p.variables + value_head.trainable_variables

    def fn(o, a):
        x = tf.cast(o, tf.float32) / 255.0
        dist = p.head(p.net(x))
        value = value_head(features(x))[:, 0]
        return dist.log_prob(a), {"entropy": dist.entropy(), "value": value}

    def aux(log_probs, extras):
        return (0.5 * tf.reduce_mean(tf.square(extras["value"] - ret))
                - 0.01 * tf.reduce_mean(extras["entropy"]))

    def f(o, a, w):
        out = pgrad.run_engine(chain, chain.init(p.variables), fn, p.variables, (o, a),
                               {"advantages": w}, aux_loss=aux, aux_variables=aux_vars,
                               fold_aux=fold)
        return out.grads, out.aux_grads, out.metrics

    if compiled:
        f = tf.function(f)
    grads, aux_grads, metrics = f(obs, act, adv)
    with tf.GradientTape() as tape:
        want_aux_loss = aux(None, fn(obs, act)[1])
    want_aux = tape.gradient(want_aux_loss, aux_vars)
    rows = jacobian_reference(p.log_prob, p.variables, obs, act)
    want_pg = reference_update(chain, p.variables, rows, {"advantages": adv})
    return p, grads, aux_grads, metrics, want_pg, want_aux


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
def test_folded_gradient_is_the_policy_gradient_minus_the_aux_gradient(compiled):
    chain = pgrad.chain(pgrad.weight_by("advantages"), pgrad.mean_steps())
    assert engine.folds_aux(chain)
    p, grads, aux_grads, metrics, want_pg, want_aux = _run(chain, True, compiled=compiled)
    n = len(p.variables)
    assert_all_close(grads, [g - a for g, a in zip(want_pg, want_aux[:n])], atol=1e-6)
    assert_all_close(aux_grads[:n], [tf.zeros_like(v) for v in p.variables], atol=0)
    assert_all_close(aux_grads[n:], want_aux[n:], atol=1e-6)  # the value head's own
    assert float(metrics["aux_folded"]) == 1.0 and "grad_norm" not in metrics


def _ppo_total(chain, fold):
    """The combined ascent gradient ``grads - aux_grads`` per aux variable, and the metrics."""
    p, value_head, features, obs, act, adv, ret = _setup()
    behaviour = p.log_prob(obs, act) + tf.constant(np.linspace(-0.3, 0.3, 8), tf.float32)
    aux_vars = p.variables + value_head.trainable_variables

    def fn(o, a):
        x = tf.cast(o, tf.float32) / 255.0
        dist = p.head(p.net(x))
        return dist.log_prob(a), {"value": value_head(features(x))[:, 0]}

    out = pgrad.run_engine(
        chain, chain.init(p.variables), fn, p.variables, (obs, act),
        {"advantages": adv, "behaviour_log_probs": behaviour},
        aux_loss=lambda lp, ex: 0.5 * tf.reduce_mean(tf.square(ex["value"] - ret)),
        aux_variables=aux_vars, fold_aux=fold)
    total = {id(v): g for v, g in zip(p.variables, out.grads)}
    for v, g in zip(aux_vars, out.aux_grads):
        total[id(v)] = total.get(id(v), 0.0) - g
    return [total[id(v)] for v in aux_vars], out.metrics


def test_folded_and_separate_passes_give_the_same_update():
    """The agent's combination ``grads - aux_grads`` is the same either way (PPO's chain)."""
    chain = pgrad.chain(pgrad.clip_ratio(0.2), pgrad.mean_steps())
    (folded, m_folded), (separate, m_separate) = (_ppo_total(chain, f) for f in (True, False))
    assert "aux_folded" in m_folded and "aux_folded" not in m_separate
    assert_all_close(folded, separate, atol=1e-6)
    fraction = [k for k in m_separate if k.endswith("clip_fraction")]
    assert fraction and all(float(m_folded[k]) == float(m_separate[k]) for k in fraction)


@pytest.mark.parametrize("chain", [
    pgrad.chain(pgrad.weight_by("advantages"), pgrad.mean_steps(), pgrad.clip_by_global_norm(0.1)),
    pgrad.chain(pgrad.weight_by("advantages"), pgrad.clip_per_step(0.5), pgrad.mean_steps()),
], ids=["transform_after_aggregation", "per_step_norms"])
def test_chains_that_need_the_policy_gradient_alone_are_not_folded(chain):
    """A clip of the aggregated policy gradient needs it apart from the aux term; per-step norms
    come from the taps, which keep the two apart: ``fold_aux`` then changes nothing."""
    assert not engine.folds_aux(chain)
    p, grads, aux_grads, metrics, want_pg, want_aux = _run(chain, True)
    assert "aux_folded" not in metrics and "grad_norm" in metrics
    assert_all_close(grads, want_pg, atol=1e-6)
    assert_all_close(aux_grads, want_aux, atol=1e-6)
