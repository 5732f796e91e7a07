"""PerSampleModel: per-sample transforms inside Keras fit(), checked against plain Keras."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import pgrad  # noqa: F401  (quiet TensorFlow first)
from pgrad.tools.keras_model import PerSampleModel
from pgrad.transforms import mean_steps, stateless
from pgrad.transforms.chain import chain
from pgrad.transforms.registry import register_transform, transform_from_spec

RNG = np.random.default_rng(0)
X = RNG.normal(size=(48, 5)).astype(np.float32)
Y = (np.tanh(X @ RNG.normal(size=(5, 2))) + 0.1 * RNG.normal(size=(48, 2))).astype(np.float32)
SW = RNG.uniform(0.2, 2.0, size=48).astype(np.float32)
MSE = keras.losses.MeanSquaredError


def double_grads(grads, **ctx):
    """The seed's user function: ``2 * grad``."""
    return [2.0 * g for g in grads]


register_transform("double", lambda: stateless(double_grads, name="double"), overwrite=True)


def functional(cls, reg=None, **kwargs):
    keras.utils.set_random_seed(1)
    inp = keras.Input((5,))
    h = keras.layers.Dense(8, activation="tanh", kernel_regularizer=reg)(inp)
    return cls(inp, keras.layers.Dense(2)(h), **kwargs)


@keras.saving.register_keras_serializable(package="pgrad_tests")
class Subclassed(PerSampleModel):
    def __init__(self, units=8, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.hidden = keras.layers.Dense(units, activation="tanh")
        self.out = keras.layers.Dense(2)

    def call(self, x):
        return self.out(self.hidden(x))

    def get_config(self):
        return {**super().get_config(), "units": self.units}


class PlainSubclassed(keras.Model):
    def __init__(self, units=8, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(units, activation="tanh")
        self.out = keras.layers.Dense(2)

    def call(self, x):
        return self.out(self.hidden(x))


def subclassed(cls, **kwargs):
    keras.utils.set_random_seed(1)
    model = cls(**kwargs)
    model(X[:1])
    return model


def fit(model, optimizer, loss, epochs=2, batch_size=16, sample_weight=None, **compile_kw):
    model.compile(optimizer=optimizer, loss=loss, **compile_kw)
    return model.fit(X, Y, sample_weight=sample_weight, batch_size=batch_size, epochs=epochs,
                     shuffle=False, verbose=0)


def max_diff(a, b):
    return max(float(np.max(np.abs(u - v))) for u, v in zip(a.get_weights(), b.get_weights()))


@pytest.mark.parametrize("case", ["sgd", "adam_weighted", "regularized", "full_path",
                                  "subclassed"])
def test_default_chain_equals_plain_keras(case):
    opt = (lambda: keras.optimizers.Adam(0.01)) if case == "adam_weighted" else (
        lambda: keras.optimizers.SGD(0.1))
    sw = SW if case == "adam_weighted" else None
    reg = keras.regularizers.L2(0.01) if case == "regularized" else None
    if case == "subclassed":
        plain, ours = subclassed(PlainSubclassed), subclassed(Subclassed)
    else:
        plain = functional(keras.Model, reg)
        ours = functional(PerSampleModel, reg, path="full" if case == "full_path" else "auto")
    assert max_diff(plain, ours) == 0.0
    h_plain = fit(plain, opt(), "mse", sample_weight=sw, metrics=["mae"])
    h_ours = fit(ours, opt(), MSE(reduction=None), sample_weight=sw, metrics=["mae"])
    assert max_diff(plain, ours) < 1e-5
    np.testing.assert_allclose(h_ours.history["loss"], h_plain.history["loss"], rtol=1e-5)
    np.testing.assert_allclose(h_ours.history["mae"], h_plain.history["mae"], rtol=1e-5)
    if case in ("sgd", "subclassed"):  # evaluate / predict are Keras' own; check them twice
        np.testing.assert_allclose(ours.evaluate(X, Y, verbose=0),
                                   plain.evaluate(X, Y, verbose=0), rtol=1e-5)
        np.testing.assert_allclose(ours.predict(X, verbose=0), plain.predict(X, verbose=0),
                                   atol=1e-5)


def per_sample_grads_reference(model, x, y):
    """[B, params] gradients of each sample's loss, from tape.jacobian (the seed's method)."""
    variables = model.trainable_variables
    with tf.GradientTape() as tape:
        per_sample = tf.reduce_mean(tf.square(model(x) - y), axis=-1)  # [B]
    jac = tape.jacobian(per_sample, variables)
    return np.concatenate([tf.reshape(j, [x.shape[0], -1]).numpy() for j in jac], axis=1)


def flat_weights(model):
    return np.concatenate([w.reshape(-1) for w in model.get_weights()])


@pytest.mark.parametrize("path", ["auto", "full"])
def test_per_sample_clipping_bounds_every_sample(path):
    max_norm = 0.05
    model = functional(PerSampleModel, transform=[("clip_per_step", {"max_norm": max_norm}),
                                                  "mean_steps"], path=path)
    x, y = X[:8], Y[:8].copy()
    y[3] = 1e4  # one sample whose plain gradient would dominate the batch
    g = per_sample_grads_reference(model, x, y)  # [8, P]
    norms = np.linalg.norm(g, axis=1)
    assert norms[3] > 1e3 * max_norm
    clipped = g * np.minimum(1.0, max_norm / norms)[:, None]
    before = flat_weights(model)
    model.compile(optimizer=keras.optimizers.SGD(1.0), loss=MSE(reduction=None))
    logs = model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0).history
    step = before - flat_weights(model)  # SGD lr=1: the applied (descent) gradient
    np.testing.assert_allclose(step, clipped.mean(axis=0), rtol=1e-4, atol=1e-7)
    # Every sample contributes at most max_norm / B to the update, so it is bounded too.
    assert np.linalg.norm(step) <= max_norm + 1e-6
    assert logs["clip_per_step(0.05)/clip_fraction"][0] == pytest.approx(np.mean(norms > max_norm))


@pytest.mark.parametrize("spec", [["double", "mean_steps"], ["mean_steps", "double"]])
def test_seed_double_gradient_equals_sgd_at_twice_the_rate(spec):
    plain, ours = functional(keras.Model), functional(PerSampleModel, transform=spec)
    fit(plain, keras.optimizers.SGD(0.1), "mse")
    fit(ours, keras.optimizers.SGD(0.05), MSE(reduction=None))
    assert max_diff(plain, ours) < 1e-5
    # Per-sample (before the mean) needs the per-sample vectors; after it, one backward pass.
    assert pgrad.plan(ours.transform) == ("full" if spec[0] == "double" else "fused")


STATEFUL = [("weight_by_running", {"key": "losses", "center": False}),
            ("clip_per_step", {"max_norm": 0.5}), "mean_steps"]


@pytest.mark.parametrize("build", [functional, subclassed])
def test_save_load_round_trip_keeps_chain_and_state(build, tmp_path):
    cls = PerSampleModel if build is functional else Subclassed
    model = build(cls, transform=STATEFUL)
    fit(model, keras.optimizers.Adam(0.01), MSE(reduction=None), epochs=1)
    stats = model.transform_state.read()[0]
    assert float(stats.count) == len(X)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded) is type(model) and isinstance(loaded, cls)
    assert loaded.transform_spec == model.transform_spec
    for a, b in zip(tf.nest.flatten(loaded.transform_state.read()),
                    tf.nest.flatten(model.transform_state.read())):
        assert float(a) == float(b)
    np.testing.assert_array_equal(loaded.predict(X, verbose=0), model.predict(X, verbose=0))
    # Training on continues identically: same chain, same running statistics, same Adam slots.
    for m in (model, loaded):
        m.fit(X, Y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    assert max_diff(model, loaded) < 1e-6
    assert float(loaded.transform_state.read()[0].count) == 2 * len(X)


def test_state_is_checkpointed(tmp_path):
    model = functional(PerSampleModel, transform=STATEFUL)
    fit(model, keras.optimizers.SGD(0.01), MSE(reduction=None), epochs=1)
    ckpt = tf.train.Checkpoint(model=model)
    path = ckpt.write(str(tmp_path / "ckpt"))
    want = [float(v) for v in model.transform_state.values]
    for v in model.transform_state.values:
        v.assign(tf.zeros_like(v))
    ckpt.read(path).assert_existing_objects_matched()
    assert [float(v) for v in model.transform_state.values] == want
    # save_weights / load_weights carry it too.
    model.save_weights(str(tmp_path / "w.weights.h5"))
    fresh = functional(PerSampleModel, transform=STATEFUL)
    fresh.load_weights(str(tmp_path / "w.weights.h5"))
    assert [float(v) for v in fresh.transform_state.values] == want


def test_raw_transform_trains_but_refuses_to_serialise(tmp_path):
    raw = chain(stateless(double_grads), mean_steps())
    model = functional(PerSampleModel, transform=raw)
    assert model.transform_spec is None
    fit(model, keras.optimizers.SGD(0.01), MSE(reduction=None), epochs=1)
    with pytest.raises(ValueError, match="register_transform"):
        model.save(str(tmp_path / "m.keras"))
    model.set_transform(["double", "mean_steps"])  # the serialisable equivalent
    model.save(str(tmp_path / "m.keras"))


def test_clear_errors():
    model = functional(PerSampleModel)
    model.compile(optimizer="sgd", loss="mse")  # reduced loss: not per-sample
    with pytest.raises(ValueError, match="reduction=None"):
        model.fit(X, Y, epochs=1, verbose=0)
    with pytest.raises(ValueError, match="keeps the sample axis"):
        functional(PerSampleModel, transform=["identity"])
    with pytest.raises(ValueError, match="not registered"):
        functional(PerSampleModel, transform=["no_such_transform", "mean_steps"])
    with pytest.raises(ValueError, match="path"):
        functional(PerSampleModel, path="fast")
    inp = keras.Input((5,))
    with pytest.raises(TypeError, match="directly"):
        Subclassed(inp, keras.layers.Dense(2)(inp))
    # Functional construction never rewrites PerSampleModel's bases (Keras' class surgery).
    assert PerSampleModel.__bases__ == (keras.Model,)
    assert Subclassed.__bases__ == (PerSampleModel,)


def test_natural_gradient_spec_trains():
    model = functional(PerSampleModel, transform=[("natural_gradient", {"damping": 0.1})])
    history = fit(model, keras.optimizers.SGD(0.05), MSE(reduction=None), epochs=3)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert transform_from_spec(model.transform_spec).name == "chain"


def test_per_sample_clipping_in_fit_never_forms_per_sample_gradients(monkeypatch):
    """Dense-only model: norms and the clipped sum come from the taps of one batched pass.

    Run eagerly so every shape is static and only the branch that runs is built (in a traced
    fit() the generic branch exists in the graph behind a tf.cond but does not run).
    """
    import pgrad.core.per_step as per_step

    def forbidden(*args, **kwargs):
        raise AssertionError("per-sample gradient vectors were materialised")

    spec = [("clip_per_step", {"max_norm": 0.05}), "mean_steps"]
    reference = functional(PerSampleModel, transform=spec, use_taps=False)
    reference.compile(optimizer=keras.optimizers.SGD(0.5), loss=MSE(reduction=None),
                      run_eagerly=True)
    reference.fit(X, Y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    monkeypatch.setattr(per_step, "_vectorized", forbidden)
    model = functional(PerSampleModel, transform=spec)
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss=MSE(reduction=None),
                  run_eagerly=True)
    model.fit(X, Y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    assert max_diff(model, reference) < 1e-6
    generic = functional(PerSampleModel, transform=spec, use_taps=False)
    generic.compile(optimizer="sgd", loss=MSE(reduction=None), run_eagerly=True)
    with pytest.raises(AssertionError, match="materialised"):  # the patch is live
        generic.fit(X, Y, batch_size=16, epochs=1, verbose=0)


def test_unbuilt_subclassed_model_builds_its_state_in_fit():
    keras.utils.set_random_seed(1)
    model = Subclassed(transform=STATEFUL)
    assert model.transform_state is None  # no variables yet
    fit(model, keras.optimizers.SGD(0.01), MSE(reduction=None), epochs=1)
    assert float(model.transform_state.read()[0].count) == len(X)


def test_sample_weight_in_context_and_column_weights():
    """[B, 1] sample weights work (fit and evaluate); the context gets them as [B]."""
    seen = {}

    def record(grads, **ctx):
        seen["shape"] = ctx["sample_weight"].shape.as_list()
        return grads

    register_transform("record_ctx", lambda: stateless(record, name="record"), overwrite=True)
    model = functional(PerSampleModel, transform=["mean_steps", "record_ctx"])
    model.compile(optimizer="sgd", loss=MSE(reduction=None), run_eagerly=True)
    model.fit(X, Y, sample_weight=SW[:, None], batch_size=16, epochs=1, shuffle=False, verbose=0)
    assert seen["shape"] == [16]
    plain = functional(keras.Model)
    fit(plain, keras.optimizers.SGD(0.01), "mse", epochs=1, sample_weight=SW[:, None])
    assert max_diff(plain, model) < 1e-6
    np.testing.assert_allclose(model.evaluate(X, Y, sample_weight=SW[:, None], verbose=0),
                               plain.evaluate(X, Y, sample_weight=SW[:, None], verbose=0),
                               rtol=1e-5)


def test_spec_registry():
    assert {"clip_per_step", "mean_steps", "natural_gradient"} <= set(pgrad.registered_transforms())

    @pgrad.register_transform("halve_test", overwrite=True)  # re-runnable in one process
    def halve():
        return pgrad.scale(0.5)

    assert halve().name == "scale(0.5)"  # the decorator returns the factory
    with pytest.raises(ValueError, match="already registered"):
        pgrad.register_transform("halve_test", lambda: pgrad.scale(0.5))
    t = transform_from_spec([("scale", {"factor": 2.0}), "mean_steps"])
    assert [c.name for c in t.leaves] == ["scale(2.0)", "mean_steps"]
    with pytest.raises(ValueError, match="JSON"):
        transform_from_spec([("scale", {"factor": np.float32})])
    with pytest.raises(ValueError, match="arguments"):
        transform_from_spec([("scale", {"bogus": 1})])
    with pytest.raises(ValueError, match="name or"):
        transform_from_spec([("scale", 2.0)])


def test_functional_construction_is_guarded_by_the_keras_internals_it_needs(monkeypatch):
    """On the pinned Keras the private pieces exist; without them, functional construction is
    one clear TypeError and a subclassed PerSampleModel (public API only) still trains."""
    import keras
    import numpy as np

    from pgrad.tools import keras_model

    assert keras_model.FUNCTIONAL_SUPPORTED  # if this fails, Keras moved its internals
    monkeypatch.setattr(keras_model, "FUNCTIONAL_SUPPORTED", False)
    inputs = keras.Input((3,))
    outputs = keras.layers.Dense(1)(inputs)
    with pytest.raises(TypeError, match="subclass PerSampleModel instead"):
        keras_model.PerSampleModel(inputs, outputs)

    class Small(keras_model.PerSampleModel):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.dense = keras.layers.Dense(1)

        def call(self, x):
            return self.dense(x)

    model = Small()
    model.compile(optimizer="sgd", loss=keras.losses.MeanSquaredError(reduction=None))
    x, y = np.ones((8, 3), np.float32), np.zeros((8, 1), np.float32)
    history = model.fit(x, y, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
