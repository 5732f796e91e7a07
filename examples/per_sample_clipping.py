"""Per-sample gradient clipping inside Keras fit(): robust regression with corrupted labels.

A regression set where 5% of the training targets are corrupted by a large offset. Plain Keras
averages every sample's gradient, so the corrupted ones dominate each batch. ``PerSampleModel``
with ``[clip_per_step(c), mean_steps]`` bounds every sample's contribution to ``c / B`` before
averaging (the clipping step of DP-SGD, without the noise). The same Adam, the same initial
weights, the same batches; only the train_step differs. Prints the clean test error of both,
the fraction of samples clipped, the time per epoch, and checks a ``.keras`` round trip.

Run: ``python examples/per_sample_clipping.py`` (about 20 s on 2 CPU cores; ``--quick`` for a
smoke run).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

# isort: off
import pgrad  # (first: silences TensorFlow's start-up noise before keras imports it)
import keras

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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny run (tests)")
    main(parser.parse_args().quick)
