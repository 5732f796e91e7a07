"""importance_weight on hand-made per-step gradients: the truncated ratio, its metrics, errors."""

import numpy as np
import pytest
import tensorflow as tf
from policies import assert_all_close

import pgrad
from pgrad import chain


def per_step(t=6, seed=0):
    rng = np.random.default_rng(seed)
    return [tf.constant(rng.normal(size=(t, 3, 2)), tf.float32),
            tf.constant(rng.normal(size=(t, 2)), tf.float32)]


# rho = exp(log_probs - behaviour) = (0.5, 1, 2, 4, 0.25, 1.5): three above 1, one above 2.
LOG_PROBS = np.log([0.5, 0.5, 0.8, 0.8, 0.1, 0.6]).astype(np.float32)
BEHAVIOUR = np.log([1.0, 0.5, 0.4, 0.2, 0.4, 0.4]).astype(np.float32)
RHO = np.array([0.5, 1.0, 2.0, 4.0, 0.25, 1.5], np.float32)


def rows(g, w):
    return [x * np.reshape(w, (-1,) + (1,) * (x.ndim - 1)) for x in g]


@pytest.mark.parametrize("rho_bar,weights", [
    (1.0, [0.5, 1.0, 1.0, 1.0, 0.25, 1.0]),
    (2.0, [0.5, 1.0, 2.0, 2.0, 0.25, 1.5]),
    (None, RHO),
])
def test_scales_each_step_by_the_truncated_ratio(rho_bar, weights):
    g = per_step()
    t = pgrad.importance_weight(rho_bar)
    out, state = t.update(g, t.init(None), log_probs=LOG_PROBS, behaviour_log_probs=BEHAVIOUR)
    assert_all_close(out, rows(g, np.asarray(weights, np.float32)), atol=1e-6)
    assert float(state.rho_mean) == pytest.approx(RHO.mean(), rel=1e-6)
    bar = np.inf if rho_bar is None else rho_bar
    assert float(state.truncated_fraction) == pytest.approx(np.mean(RHO > bar))


def test_metrics_names_and_a_custom_behaviour_key():
    g = per_step()
    t = chain(pgrad.importance_weight(1.0, behaviour_key="mu"), pgrad.mean_steps())
    out, state = t.update(g, t.init(None), log_probs=LOG_PROBS, mu=BEHAVIOUR)
    metrics = pgrad.state_metrics(t, state)
    assert float(metrics["importance_weight/truncated_fraction"]) == pytest.approx(0.5)
    assert float(metrics["importance_weight/rho_mean"]) == pytest.approx(RHO.mean(), rel=1e-6)
    w = np.minimum(RHO, 1.0)
    assert_all_close(out, [np.mean(x, 0) for x in rows(g, w)], atol=1e-6)


def test_equal_policies_change_nothing():
    g = per_step()
    t = pgrad.importance_weight(1.0)
    out, state = t.update(g, t.init(None), log_probs=LOG_PROBS, behaviour_log_probs=LOG_PROBS)
    for a, b in zip(out, g):
        np.testing.assert_array_equal(a, b)
    assert float(state.rho_mean) == 1.0 and float(state.truncated_fraction) == 0.0


def test_from_a_spec_and_clear_errors():
    g = per_step()
    spec = [("importance_weight", {"rho_bar": 1.0}), "mean_steps"]
    assert "importance_weight" in pgrad.registered_transforms()
    t = pgrad.transform_from_spec(spec)
    out, _ = t.update(g, t.init(None), log_probs=LOG_PROBS, behaviour_log_probs=BEHAVIOUR)
    assert_all_close(out, [np.mean(x, 0) for x in rows(g, np.minimum(RHO, 1.0))], atol=1e-6)
    with pytest.raises(ValueError, match=r"importance_weight: rho_bar must be > 0"):
        pgrad.importance_weight(0.0)
    with pytest.raises(pgrad.TransformError, match="importance_weight: the context has no "
                                                   "'behaviour_log_probs'"):
        t.update(g, t.init(None), log_probs=LOG_PROBS)
