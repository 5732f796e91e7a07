"""Gradient reversal (domain-adversarial training, Ganin & Lempitsky 2015) with pgrad's layer.

Two domains share a labelling rule on two signal features. Four nuisance channels read ~0 in
the labelled *source* domain and +2 in the unlabelled *target* domain (a new sensor site, say).
Training on the source never teaches the network to ignore those channels, so at the target
their offset moves its decision boundary.

The model is ``features -> label head`` plus ``features -> ReverseGradient -> domain head``.
The domain head learns to tell the domains apart; the reversed gradient pushes the features to
make that impossible, which removes the nuisance channels from them. Both are trained by one
loss and one optimizer: the reversal layer is the only difference from the baseline (factor 0).
Its factor is a variable, annealed from 0 to 1 with the schedule of the paper.

Prints, for the baseline and for gradient reversal: held-out source and target label accuracy,
and the accuracy of the model's own domain head (0.5 = it cannot tell the domains apart).

Run: ``python examples/gradient_reversal.py`` (about 10 s; ``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse

import numpy as np

# isort: off
from pgrad_app.quiet import silence  # noqa: I001

silence()  # first: TensorFlow's start-up noise off (what pgrad's commands do)
import pgrad  # noqa: E402
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

# isort: on


def make_domain(n: int, offset: float, rng) -> tuple[np.ndarray, np.ndarray]:
    """``[n, 6]`` inputs and ``[n]`` labels: the label from two signal features (same rule in
    both domains), four nuisance channels that read ~0 in the source and ``offset`` in the
    target."""
    signal = rng.normal(size=(n, 2))
    y = (signal[:, 0] + np.sin(2.0 * signal[:, 1]) > 0).astype(np.float32)
    nuisance = offset + 0.1 * rng.normal(size=(n, 4))
    return np.concatenate([signal, nuisance], axis=1).astype(np.float32), y


class Dann(keras.Model):
    """Feature extractor, label head, and a domain head behind a gradient reversal layer."""

    def __init__(self):
        super().__init__()
        self.features = keras.Sequential(
            [keras.layers.Dense(32, activation="relu"), keras.layers.Dense(8, activation="relu")]
        )
        self.label = keras.layers.Dense(1)
        self.reverse = pgrad.ReverseGradient(0.0)
        self.domain = keras.Sequential(
            [keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)]
        )

    def call(self, x):
        f = self.features(x)
        return self.label(f)[:, 0], self.domain(self.reverse(f))[:, 0]  # logits [N], [N]


def train(max_factor: float, data, steps: int, seed: int = 0) -> Dann:
    keras.utils.set_random_seed(seed)
    (xs, ys), (xt, _) = data
    model = Dann()
    optimizer = keras.optimizers.Adam(3e-3)
    bce = keras.losses.BinaryCrossentropy(from_logits=True)

    @tf.function
    def step(x_src, y_src, x_tgt, factor):
        model.reverse.factor.assign(factor)
        x = tf.concat([x_src, x_tgt], axis=0)
        domain = tf.concat([tf.zeros(tf.shape(x_src)[0]), tf.ones(tf.shape(x_tgt)[0])], 0)
        with tf.GradientTape() as tape:
            label_logits, domain_logits = model(x)
            n = tf.shape(x_src)[0]
            loss = bce(y_src, label_logits[:n]) + bce(domain, domain_logits)
        variables = model.trainable_variables
        optimizer.apply(tape.gradient(loss, variables), variables)

    rng = np.random.default_rng(seed)
    for i in range(steps):
        # The paper's schedule: 0 at the start (let the domain head learn first), -> max_factor.
        factor = max_factor * (2.0 / (1.0 + np.exp(-10.0 * i / steps)) - 1.0)
        a, b = rng.integers(0, len(xs), 128), rng.integers(0, len(xt), 128)
        step(xs[a], ys[a], xt[b], tf.constant(factor, tf.float32))
    return model


def accuracy(model: Dann, x, y) -> float:
    logits, _ = model(x)
    return float(np.mean((logits.numpy() > 0) == (y > 0.5)))


def domain_accuracy(model: Dann, xs, xt) -> float:
    """Accuracy of the model's own domain head (0.5: it cannot tell the domains apart)."""
    _, src = model(xs)
    _, tgt = model(xt)
    return float(np.mean(np.concatenate([src.numpy() <= 0, tgt.numpy() > 0])))


def main(quick: bool = False) -> None:
    rng = np.random.default_rng(0)
    n = 500 if quick else 3000
    source, target = make_domain(n, 0.0, rng), make_domain(n, 2.0, rng)
    test_source, test_target = make_domain(2000, 0.0, rng), make_domain(2000, 2.0, rng)
    steps = 100 if quick else 1500
    print(f"{n} labelled source and {n} unlabelled target samples, {steps} steps of batch 128+128")
    print(f"{'':24s} {'source acc':>10s} {'target acc':>10s} {'domain head acc':>16s}")
    for name, factor in (("baseline (factor 0)", 0.0), ("gradient reversal", 1.0)):
        model = train(factor, (source, target), steps)
        print(f"{name:24s} {accuracy(model, *test_source):10.3f} "
              f"{accuracy(model, *test_target):10.3f} "
              f"{domain_accuracy(model, test_source[0], test_target[0]):16.3f}")
    print("(label accuracy on held-out data; the domain head at 0.5 cannot tell the domains "
          "apart)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny run (tests)")
    main(parser.parse_args().quick)
