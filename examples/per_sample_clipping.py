"""Per-sample gradient clipping inside Keras fit(): robust regression with corrupted labels.

A regression set where 5% of the training targets are corrupted by a large offset. Plain Keras
averages every sample's gradient, so the corrupted ones dominate each batch. ``PerSampleModel``
with ``[clip_per_step(c), mean_steps]`` bounds every sample's contribution to ``c / B`` before
averaging (the clipping step of DP-SGD, without the noise). The same Adam, the same initial
weights, the same batches; only the train_step differs. Prints the clean test error of both,
the fraction of samples clipped, the time per epoch, and checks a ``.keras`` round trip.

Run: ``python examples/per_sample_clipping.py`` (about 20 s on 2 CPU cores; ``--quick`` for a
smoke run). ``--bench`` instead times one fit() step of a 784-256-256-10 MLP at batch 256 for
plain Keras, several chains, and the seed's ``tape.jacobian`` train_step (about 2 minutes).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

# isort: off
from pgrad_app.quiet import silence  # noqa: I001

silence()  # first: TensorFlow's start-up noise off (what pgrad's commands do)
import pgrad  # noqa: E402
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

# isort: on


def make_data(n_train: int, n_test: int, seed: int = 0):
    """``y = sin(x . w1) + 0.5 (x . w2)^2`` with noise; 5% of training targets shifted by +30."""
    rng = np.random.default_rng(seed)
    w1, w2 = rng.normal(size=(2, 8)) / np.sqrt(8)

    def sample(n):
        x = rng.normal(size=(n, 8)).astype(np.float32)
        y = np.sin(x @ w1) + 0.5 * (x @ w2) ** 2 + 0.05 * rng.normal(size=n)
        return x, y.astype(np.float32)[:, None]

    x_train, y_train = sample(n_train)
    bad = rng.random(n_train) < 0.05
    y_train[bad] += 30.0
    x_test, y_test = sample(n_test)
    return x_train, y_train, x_test, y_test, bad


def build(cls, **kwargs):
    keras.utils.set_random_seed(1)  # identical initial weights for both models
    inputs = keras.Input((8,))
    h = keras.layers.Dense(64, activation="relu")(inputs)
    h = keras.layers.Dense(64, activation="relu")(h)
    return cls(inputs, keras.layers.Dense(1)(h), **kwargs)


def train(model, loss, data, epochs: int, **adam_kwargs):
    x, y, x_test, y_test, _ = data
    model.compile(optimizer=keras.optimizers.Adam(3e-3, **adam_kwargs), loss=loss)
    start = time.perf_counter()
    history = model.fit(x, y, batch_size=64, epochs=epochs, shuffle=False, verbose=0)
    per_epoch = (time.perf_counter() - start) / epochs
    test_mse = float(np.mean((model.predict(x_test, verbose=0) - y_test) ** 2))
    return history.history, per_epoch, test_mse


def main(quick: bool = False) -> None:
    epochs = 2 if quick else 10
    data = make_data(256 if quick else 2000, 1000)
    print(f"{len(data[0])} training samples, {int(data[4].sum())} with corrupted targets (+30); "
          f"{epochs} epochs, batch 64, Adam(3e-3)")

    plain = build(keras.Model)
    _, t_plain, mse_plain = train(plain, "mse", data, epochs)
    # What one tries first: clip the *batch* gradient. It bounds the step, not each sample's say.
    _, t_norm, mse_norm = train(build(keras.Model), "mse", data, epochs, clipnorm=1.0)

    clip = 1.0
    spec = [("clip_per_step", {"max_norm": clip}), "mean_steps"]
    clipped = build(pgrad.PerSampleModel, transform=spec)
    logs, t_clip, mse_clip = train(clipped, keras.losses.MeanSquaredError(reduction=None), data,
                                   epochs)
    fraction = logs[f"clip_per_step({clip})/clip_fraction"][-1]

    rows = [("plain Keras fit()", mse_plain, t_plain),
            ("plain Keras, Adam(clipnorm=1.0)", mse_norm, t_norm),
            (f"PerSampleModel, clip_per_step({clip})", mse_clip, t_clip)]
    for name, mse, seconds in rows:
        print(f"{name:36s} clean test MSE {mse:8.4f}   "
              f"{seconds * 1e3:5.0f} ms/epoch (incl. tracing)")
    print(f"fraction of samples clipped in the last batch: {fraction:.2f}")

    # The chain is part of the model's config: it is rebuilt on load, state included.
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "clipped.keras")
        clipped.save(path)
        loaded = keras.saving.load_model(path)
    same = np.allclose(loaded.predict(data[2], verbose=0), clipped.predict(data[2], verbose=0))
    print(f"reloaded from .keras: transform {loaded.transform_spec}, same predictions: {same}")


class SeedJacobianModel(keras.Model):
    """The textbook method: ``tape.jacobian`` of the per-sample losses in train_step, then
    per-sample clipping to norm 1 and the mean, applied with the compiled optimizer."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            losses = self.compute_loss(x, y, self(x, training=True))  # [B]
        jac = tape.jacobian(losses, self.trainable_variables)  # [B, *shape] each
        sq = [tf.reduce_sum(tf.reshape(tf.square(j), [tf.shape(j)[0], -1]), 1) for j in jac]
        factor = tf.minimum(1.0, 1.0 / tf.sqrt(tf.add_n(sq)))  # [B]
        grads = [tf.reduce_mean(j * tf.reshape(factor, [-1] + [1] * (j.shape.rank - 1)), 0)
                 for j in jac]
        self.optimizer.apply(grads, self.trainable_variables)
        return {"clip_factor": tf.reduce_mean(factor)}


def bench(batch: int = 256, steps: int = 8, repeats: int = 5) -> None:
    """Median time of one fit() step per variant, measured interleaved (noisy machines).

    The seed's jacobian step is ~100x slower than the rest, so it is timed once.
    """
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch * steps, 784)).astype(np.float32)
    y = rng.integers(0, 10, batch * steps)
    pgrad.register_transform(
        "double", lambda: pgrad.stateless(lambda g, **c: [2.0 * v for v in g]), overwrite=True
    )
    clip = [("clip_per_step", {"max_norm": 1.0}), "mean_steps"]
    variants = {
        "plain keras.Model": (keras.Model, {}),
        "PerSampleModel, default [mean_steps]": (pgrad.PerSampleModel, {}),
        "PerSampleModel, clip_per_step (taps)": (pgrad.PerSampleModel, {"transform": clip}),
        "PerSampleModel, clip_per_step, use_taps=False": (
            pgrad.PerSampleModel, {"transform": clip, "use_taps": False}),
        "PerSampleModel, stateless fn before the mean": (
            pgrad.PerSampleModel, {"transform": ["double", "mean_steps"]}),
        "seed: tape.jacobian train_step, clipped": (SeedJacobianModel, {}),
    }
    models = {}
    for name, (cls, kwargs) in variants.items():
        keras.utils.set_random_seed(0)
        inputs = keras.Input((784,))
        h = keras.layers.Dense(256, activation="relu")(inputs)
        h = keras.layers.Dense(256, activation="relu")(h)
        model = cls(inputs, keras.layers.Dense(10)(h), **kwargs)
        reduction = "sum_over_batch_size" if cls is keras.Model else None  # per-sample [B]
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=reduction)
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss=loss)
        model.fit(x[:batch], y[:batch], batch_size=batch, epochs=1, verbose=0)  # trace
        models[name] = model
    times = {name: [] for name in models}
    for i in range(repeats):
        for name, model in models.items():
            if i and isinstance(model, SeedJacobianModel):
                continue
            start = time.perf_counter()
            model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
            times[name].append((time.perf_counter() - start) / steps)
    base = float(np.median(times["plain keras.Model"]))
    print(f"784-256-256-10 MLP (269,322 parameters), batch {batch}, "
          f"median of {repeats} fits of {steps} steps:")
    for name, values in times.items():
        t = float(np.median(values))
        print(f"  {name:46s} {t * 1e3:8.1f} ms/step  {t / base:6.1f}x plain")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny run (tests)")
    parser.add_argument("--bench", action="store_true", help="time fit() steps instead")
    args = parser.parse_args()
    if args.bench:
        bench()
    else:
        main(args.quick)
