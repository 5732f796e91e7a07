"""Fast exact paths (pgrad.core.taps): every one equals the materialised tape.jacobian reference.

The basic contracts of per_step_grads and the engine are in test_per_step.py / test_engine.py;
here: the Dense-layer taps, their coverage and fallbacks, and that the fused clip path builds no
[T, params] tensor. The other layer types' taps: test_conv_taps.py, test_layer_taps.py.
"""

import warnings

import gymnasium as gym
import keras
import numpy as np
import pytest
import tensorflow as tf
from policies import SPACES, SmallPolicy, assert_all_close, jacobian_reference

import pgrad
from pgrad.core import per_step as per_step_lib
from pgrad.core import taps


def reference_norms(fn, variables, *args):
    jac = jacobian_reference(fn, variables, *args)
    t = jac[0].shape[0]
    return np.sqrt(sum(np.sum(np.reshape(np.square(j), (t, -1)), 1) for j in jac))


class CustomPolicy:
    """Categorical policy over a user Keras model (any layers) on ``[T, 4]`` observations."""

    def __init__(self, layers, seed=0):
        tf.keras.utils.set_random_seed(seed)
        self.net = keras.Sequential([keras.layers.Input((4,)), *layers])
        self.head = pgrad.make_head(gym.spaces.Discrete(3))
        self.variables = self.net.trainable_variables

    def log_prob(self, obs, act):
        return self.head(self.net(obs)).log_prob(act)

    def batch(self, t, seed=1):
        rng = np.random.default_rng(seed)
        obs = tf.constant(rng.normal(size=(t, 4)), tf.float32)
        return obs, self.head(self.net(obs)).sample(seed=seed)


def layer_norm_policy():
    return CustomPolicy([keras.layers.Dense(8, activation="tanh"),
                         keras.layers.LayerNormalization(), keras.layers.Dense(3)])


def conv_policy():
    return CustomPolicy([keras.layers.Reshape((4, 1)),
                         keras.layers.Conv1D(3, 2, activation="tanh"),
                         keras.layers.Flatten(), keras.layers.Dense(3)])


def depthwise_policy():  # a layer type with no tap: the generic path
    return CustomPolicy([keras.layers.Reshape((4, 1)),
                         keras.layers.DepthwiseConv1D(2, depth_multiplier=2, activation="tanh"),
                         keras.layers.Flatten(), keras.layers.Dense(3)])


def coverage(policy, t=5):
    obs, act = policy.batch(t)
    _, cap = taps.capture(policy.log_prob, policy.variables, (obs, act), t)
    return cap.covered


# --- coverage: the fast path is really taken, and only where it is exact ------------------------


@pytest.mark.parametrize("name", sorted(SPACES))
def test_every_pgrad_head_is_fully_tapped(name):
    assert all(coverage(SmallPolicy(SPACES[name])))


def test_untapped_layers_are_not_covered_tapped_ones_are():
    assert all(coverage(layer_norm_policy()))  # LayerNorm gamma, beta: tests/core/test_layer_taps
    assert all(coverage(conv_policy()))
    assert coverage(depthwise_policy()) == [False, False, True, True]  # depthwise kernel, bias


def test_dense_variable_also_used_elsewhere_is_not_covered(categorical):
    kernel = categorical.variables[0]

    def fn(obs, act):  # the first kernel enters a second time, outside its Dense layer
        return categorical.log_prob(obs, act) + tf.reduce_sum(kernel) * obs[:, 0]

    obs, act = categorical.batch(6)
    _, cap = taps.capture(fn, categorical.variables, (obs, act), 6)
    assert cap.covered == [False] + [True] * 5
    got = pgrad.per_step_grads(fn, categorical.variables, obs, act)
    assert_all_close(got, jacobian_reference(fn, categorical.variables, obs, act))


# --- equality with the materialised reference ---------------------------------------------------


@pytest.mark.parametrize("t,xla", [(1, False), (9, False), (40, True)])
def test_per_step_grads_and_norms_equal_jacobian_every_head(policy, t, xla, monkeypatch):
    if xla:  # force the XLA outer product (padded rows) that large batches use
        monkeypatch.setattr(taps, "XLA_MIN_ELEMENTS", 1)
    obs, act = policy.batch(t)
    want = jacobian_reference(policy.log_prob, policy.variables, obs, act)
    assert_all_close(pgrad.per_step_grads(policy.log_prob, policy.variables, obs, act), want)
    norms = pgrad.per_step_norms(policy.log_prob, policy.variables, obs, act)
    want_norms = np.sqrt(sum(np.sum(np.reshape(np.square(j), (t, -1)), 1) for j in want))
    np.testing.assert_allclose(norms, want_norms, rtol=1e-4, atol=1e-6)


def test_xla_outer_product_equals_einsum(monkeypatch):
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(300, 64)), tf.float32)
    d = tf.constant(rng.normal(size=(300, 64)), tf.float32)
    monkeypatch.setattr(taps, "XLA_MIN_ELEMENTS", 1)
    got = taps.outer_rows(x, d)
    assert got.shape == (300, 64, 64)
    np.testing.assert_array_equal(got, tf.einsum("ti,to->tio", x, d))


@pytest.mark.parametrize("make", [layer_norm_policy, conv_policy, depthwise_policy],
                         ids=["layernorm", "conv1d", "depthwise"])
@pytest.mark.parametrize("chunk", [None, 4])
def test_non_dense_models_stay_exact(make, chunk):
    p = make()
    obs, act = p.batch(11)
    want = jacobian_reference(p.log_prob, p.variables, obs, act)
    got = pgrad.per_step_grads(p.log_prob, p.variables, obs, act, chunk_size=chunk)
    assert_all_close(got, want)
    norms = pgrad.per_step_norms(p.log_prob, p.variables, obs, act, chunk_size=chunk)
    np.testing.assert_allclose(norms, reference_norms(p.log_prob, p.variables, obs, act),
                               rtol=1e-4, atol=1e-6)


def test_dense_layer_called_twice_sums_both_uses(categorical):
    shared = keras.layers.Dense(4, activation="tanh")
    shared.build((None, 4))
    variables = categorical.variables + shared.trainable_variables

    def fn(obs, act):  # the shared layer is applied to two different per-step inputs
        extra = tf.reduce_sum(shared(obs) * shared(tf.square(obs)), axis=1)  # [T]
        return categorical.log_prob(obs, act) + extra

    obs, act = categorical.batch(7)
    _, cap = taps.capture(fn, variables, (obs, act), 7)
    assert all(cap.covered)
    assert_all_close(pgrad.per_step_grads(fn, variables, obs, act),
                     jacobian_reference(fn, variables, obs, act))
    np.testing.assert_allclose(pgrad.per_step_norms(fn, variables, obs, act),
                               reference_norms(fn, variables, obs, act), rtol=1e-4, atol=1e-6)


class RowsAreNotSteps:
    """A Dense layer applied to ``[2T, 2]`` rows (two per step): its taps must not be used."""

    def __init__(self):
        tf.keras.utils.set_random_seed(0)
        self.inner = keras.layers.Dense(3, activation="tanh")
        self.out = keras.layers.Dense(2)
        self.inner.build((None, 2))
        self.out.build((None, 6))
        self.head = pgrad.make_head(gym.spaces.Discrete(2))
        self.variables = self.inner.trainable_variables + self.out.trainable_variables

    def log_prob(self, obs, act):
        h = self.inner(tf.reshape(obs, [-1, 2]))  # [2T, 3]
        return self.head(self.out(tf.reshape(h, [-1, 6]))).log_prob(act)


@pytest.mark.parametrize("mode", ["eager", "static", "dynamic"])
def test_tap_rows_that_are_not_steps_fall_back(mode):
    m = RowsAreNotSteps()
    rng = np.random.default_rng(0)
    obs = tf.constant(rng.normal(size=(6, 4)), tf.float32)
    act = tf.constant(rng.integers(0, 2, 6), tf.int32)
    want = jacobian_reference(m.log_prob, m.variables, obs, act)
    fn = lambda o, a: pgrad.per_step_grads(m.log_prob, m.variables, o, a)  # noqa: E731
    if mode == "static":
        fn = tf.function(fn)
    elif mode == "dynamic":  # rows decided at run time by a tf.cond
        fn = tf.function(fn, input_signature=[tf.TensorSpec([None, 4]),
                                              tf.TensorSpec([None], tf.int32)])
    assert_all_close(fn(obs, act), want)
    if mode == "eager":
        _, cap = taps.capture(m.log_prob, m.variables, (obs, act), 6)
        assert cap.covered == [False, False, True, True]


@pytest.mark.parametrize("dynamic", [False, True])
def test_inside_tf_function_gaussian(gaussian, dynamic):
    obs, act = gaussian.batch(13)
    sig = [tf.TensorSpec([None, 4]), tf.TensorSpec([None, 2])] if dynamic else None

    @tf.function(input_signature=sig)
    def both(o, a):
        return (pgrad.per_step_grads(gaussian.log_prob, gaussian.variables, o, a),
                pgrad.per_step_norms(gaussian.log_prob, gaussian.variables, o, a))

    grads, norms = both(obs, act)
    assert_all_close(grads, jacobian_reference(gaussian.log_prob, gaussian.variables, obs, act))
    np.testing.assert_allclose(norms, reference_norms(gaussian.log_prob, gaussian.variables,
                                                      obs, act), rtol=1e-4, atol=1e-6)


def test_use_taps_false_and_disabled_give_the_generic_path(categorical, monkeypatch):
    obs, act = categorical.batch(8)
    fast = pgrad.per_step_grads(categorical.log_prob, categorical.variables, obs, act)

    def no_capture(*a, **k):
        raise AssertionError("taps used")

    monkeypatch.setattr(taps, "capture", no_capture)
    generic = pgrad.per_step_grads(categorical.log_prob, categorical.variables, obs, act,
                                   use_taps=False)
    with taps.disabled():
        off = pgrad.per_step_grads(categorical.log_prob, categorical.variables, obs, act)
    assert_all_close(fast, generic)
    assert_all_close(off, generic)


def test_unvectorisable_fallback_variable_warns_once_and_is_exact(categorical, monkeypatch):
    monkeypatch.setattr(per_step_lib, "_warned_fallback", False)
    extra = tf.Variable(0.1 * tf.ones([2, 2]))

    def fn(obs, act):  # expm has no vectorisation rule: the extra variable takes the while loop
        bump = tf.linalg.expm(extra * obs[:, :1, None])[:, 0, 1]  # [T]
        return categorical.log_prob(obs, act) + bump

    variables = categorical.variables + [extra]
    obs, act = categorical.batch(5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = pgrad.per_step_grads(fn, variables, obs, act)
        pgrad.per_step_grads(fn, variables, obs, act)
    messages = [str(w.message) for w in caught if "sequential loop" in str(w.message)]
    assert len(messages) == 1
    assert_all_close(got, jacobian_reference(fn, variables, obs, act))


# --- the engine ---------------------------------------------------------------------------------


def clip_chain(max_norm):
    return pgrad.chain(pgrad.weight_by("advantages"), pgrad.clip_per_step(max_norm),
                       pgrad.mean_steps())


@pytest.mark.parametrize("name", ["categorical", "gaussian", "multidiscrete"])
@pytest.mark.parametrize("compiled", [False, True])
def test_engine_clip_fused_equals_materialised(name, compiled):
    p = SmallPolicy(SPACES[name])
    obs, act = p.batch(16)
    adv = tf.constant(np.linspace(-3, 3, 16), tf.float32)
    ctx = {"advantages": adv}
    norms = pgrad.per_step_norms(p.log_prob, p.variables, obs, act) * tf.abs(adv)
    ch = clip_chain(float(np.median(norms)))  # about half the steps clipped

    def go(path):
        def f(o, a):
            return pgrad.policy_gradients(ch, ch.init(p.variables), p.log_prob, p.variables,
                                          (o, a), ctx, path=path)

        return tf.function(f)(obs, act) if compiled else f(obs, act)

    fused, state, info = go("fused")
    full, full_state, _ = go("full")
    assert_all_close(fused, full, atol=1e-6)
    clipped = float(state[1].clip_fraction)
    assert 0.0 < clipped < 1.0
    assert clipped == pytest.approx(float(full_state[1].clip_fraction))


@pytest.mark.parametrize("make", [layer_norm_policy, conv_policy, depthwise_policy],
                         ids=["layernorm", "conv1d", "depthwise"])
def test_engine_clip_fused_exact_with_non_dense_layers(make):
    p = make()
    obs, act = p.batch(12)
    ctx = {"advantages": tf.constant(np.linspace(-2, 2, 12), tf.float32)}
    ch = clip_chain(0.2)
    fused = pgrad.policy_gradients(ch, ch.init(p.variables), p.log_prob, p.variables,
                                   (obs, act), ctx, path="fused", chunk_size=5)[0]
    full = pgrad.policy_gradients(ch, ch.init(p.variables), p.log_prob, p.variables,
                                  (obs, act), ctx, path="full")[0]
    assert_all_close(fused, full, atol=1e-6)


def test_engine_clip_materialises_nothing(categorical, monkeypatch):
    """The clip chain runs with every per-step materialiser disabled."""

    def forbidden(*a, **k):
        raise AssertionError("per-step gradients materialised")

    obs, act = categorical.batch(10)
    ctx = {"advantages": tf.constant(np.linspace(-2, 2, 10), tf.float32)}
    ch = clip_chain(0.3)
    want = pgrad.policy_gradients(ch, ch.init(categorical.variables), categorical.log_prob,
                                  categorical.variables, (obs, act), ctx, path="full")[0]
    for name in ("per_step_grads", "_generic_grads", "_generic_norms_sq", "_vectorized"):
        monkeypatch.setattr(per_step_lib, name, forbidden)
    monkeypatch.setattr(taps.Capture, "per_step_grads", forbidden)
    got = pgrad.policy_gradients(ch, ch.init(categorical.variables), categorical.log_prob,
                                 categorical.variables, (obs, act), ctx)[0]
    assert_all_close(got, want, atol=1e-6)


def _largest_static_tensor(graph):
    best, graphs = 0, [graph]
    while graphs:
        g = graphs.pop()
        for op in g.get_operations():
            for out in op.outputs:
                if out.shape.rank is not None and out.shape.is_fully_defined():
                    best = max(best, int(np.prod(out.shape.as_list())))
        graphs.extend(f.graph for f in g._functions.values() if hasattr(f, "graph"))
    return best


@pytest.mark.parametrize("fused", [True, False])
def test_graph_of_fused_clip_has_no_T_by_params_tensor(fused):
    t = 64
    p = SmallPolicy(SPACES["categorical"], hidden=(16, 16))
    obs, act = p.batch(t)
    adv = tf.constant(np.linspace(-2, 2, t), tf.float32)
    ch = clip_chain(0.5)

    @tf.function
    def run(o, a, w):
        return pgrad.policy_gradients(ch, ch.init(p.variables), p.log_prob, p.variables, (o, a),
                                      {"advantages": w}, path="fused" if fused else "full")[0]

    largest = _largest_static_tensor(run.get_concrete_function(obs, act, adv).graph)
    per_step_kernel = t * 16 * 16  # the smallest per-step gradient of a hidden kernel
    if fused:
        assert largest < per_step_kernel
    else:  # the check can fail: the materialised path does build them
        assert largest >= per_step_kernel


def test_engine_fused_weighting_equals_surrogate_gradient(gaussian):
    obs, act = gaussian.batch(20)
    adv = tf.constant(np.random.default_rng(3).normal(size=20), tf.float32)
    ch = pgrad.chain(pgrad.weight_by("advantages", standardize=True), pgrad.mean_steps())
    got = pgrad.policy_gradients(ch, ch.init(gaussian.variables), gaussian.log_prob,
                                 gaussian.variables, (obs, act), {"advantages": adv})[0]
    std = tf.math.reduce_std(adv) * np.sqrt(20 / 19)  # the sample std, as SB3's adv.std()
    w = (adv - tf.reduce_mean(adv)) / (std + 1e-8)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(w * gaussian.log_prob(obs, act))
    assert_all_close(got, tape.gradient(loss, gaussian.variables), atol=1e-6)


@pytest.mark.parametrize("make", [lambda: SmallPolicy(SPACES["gaussian"]), RowsAreNotSteps],
                         ids=["gaussian", "rows_not_steps"])
def test_engine_clip_with_unknown_T_decides_at_run_time(make):
    p = make()
    obs = tf.constant(np.random.default_rng(0).normal(size=(10, 4)), tf.float32)
    act = p.head(p.net(obs)).sample(seed=1) if hasattr(p, "net") else tf.constant(
        np.random.default_rng(1).integers(0, 2, 10), tf.int32)
    adv = tf.constant(np.linspace(-2, 2, 10), tf.float32)
    ch = clip_chain(0.2)

    @tf.function(input_signature=[tf.TensorSpec([None, 4]), tf.TensorSpec([None, *act.shape[1:]],
                                                                            act.dtype),
                                  tf.TensorSpec([None])])
    def fused(o, a, w):
        return pgrad.policy_gradients(ch, ch.init(p.variables), p.log_prob, p.variables, (o, a),
                                      {"advantages": w}, path="fused")[0]

    want = pgrad.policy_gradients(ch, ch.init(p.variables), p.log_prob, p.variables, (obs, act),
                                  {"advantages": adv}, path="full")[0]
    assert_all_close(fused(obs, act, adv), want, atol=1e-6)


def test_tap_the_tape_cannot_connect_is_left_to_the_generic_path(categorical):
    """A Dense layer called but unused: not covered (it could also be hidden from the tape, e.g.
    inside a tf.custom_gradient); the generic path gives its exact zero rows."""
    unused = keras.layers.Dense(2)
    unused.build((None, 4))
    variables = categorical.variables + unused.trainable_variables

    def fn(obs, act):
        unused(obs)
        return categorical.log_prob(obs, act)

    obs, act = categorical.batch(6)
    _, cap = taps.capture(fn, variables, (obs, act), 6)
    assert cap.covered == [True] * 6 + [False, False]
    got = pgrad.per_step_grads(fn, variables, obs, act)
    assert_all_close(got, jacobian_reference(fn, variables, obs, act))
    np.testing.assert_array_equal(got[-2], 0.0)
