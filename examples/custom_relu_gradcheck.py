"""Validating custom gradients with ``pgrad.check_gradients`` (the seed's "correctness" point).

1. The seed's custom ReLU (``tf.custom_gradient``) against central finite differences in
   float64: it agrees away from 0 and the check reports the kink at 0, where ReLU has no
   derivative to agree with.
2. Two plausible bugs in hand-written gradients, both caught.
3. A custom *layer* built from the ReLU, checked with respect to its input and its weights.
4. Deliberately modified gradients (``pgrad.scale_gradient``, ``pgrad.clip_gradient``) are checked
   against the function whose derivative they are meant to equal (``reference=``).

Run: ``python examples/custom_relu_gradcheck.py`` (a few seconds).
"""

from __future__ import annotations

import numpy as np

# isort: off
from pgrad_app.quiet import silence  # noqa: I001

silence()  # first: TensorFlow's start-up noise off (what pgrad's commands do)
import pgrad  # noqa: E402
import tensorflow as tf  # noqa: E402

# isort: on


@tf.custom_gradient
def my_relu(x):
    """The seed's custom ReLU, verbatim."""
    out = tf.maximum(x, 0)

    def grad(dy):
        return dy * tf.cast(x > 0, dtype=dy.dtype)

    return out, grad


@tf.custom_gradient
def leaky_relu_bug(x):
    """Leaky ReLU (slope 0.1) whose gradient forgot the slope on the negative side."""
    out = tf.where(x > 0, x, 0.1 * x)

    def grad(dy):
        return dy * tf.cast(x > 0, dy.dtype)  # bug: should be tf.where(x > 0, 1.0, 0.1)

    return out, grad


@tf.custom_gradient
def stable_softplus_bug(x):
    """softplus written for stability; its gradient has sigmoid(-x) for sigmoid(x)."""
    out = tf.maximum(x, 0) + tf.math.log1p(tf.exp(-tf.abs(x)))

    def grad(dy):
        return dy * tf.sigmoid(-x)  # bug: d softplus / dx = sigmoid(x)

    return out, grad


def verdict(result, tol=1e-6) -> str:
    return "PASS" if result.ok(tol) else "FAIL"


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=8)
    x = np.where(np.abs(x) < 0.05, 0.5, x)  # keep +-eps away from the kink

    print("1. the seed's custom ReLU")
    r = pgrad.check_gradients(my_relu, x)
    print(f"   at 8 random points   {verdict(r)}  {r}")
    r0 = pgrad.check_gradients(my_relu, np.array([0.0, 1.0]))
    print(f"   at x = 0 (the kink)  {verdict(r0)}  {r0}")
    print(f"     finite differences give {r0.numerical[0][0, 0]:.2f} at 0, the custom gradient "
          f"{r0.theoretical[0][0, 0]:.2f}: ReLU is not differentiable there")

    print("2. bugs in hand-written gradients")
    for fn in (leaky_relu_bug, stable_softplus_bug):
        r = pgrad.check_gradients(fn, x)
        print(f"   {fn.__name__:20s} {verdict(r)}  {r}")

    print("3. a dense layer with the custom ReLU: gradient w.r.t. input and weights")
    w0 = rng.normal(size=(3, 4))
    b0 = rng.normal(size=4)
    inputs = rng.normal(size=(5, 3))

    def layer(w, b, inputs):
        return my_relu(inputs @ w + b)  # [5, 4]

    pre = inputs @ w0 + b0
    print(f"   (closest pre-activation to the kink: {np.min(np.abs(pre)):.3f})")
    r = pgrad.check_gradients(layer, w0, b0, inputs)
    print(f"   inputs (w, b, x)     {verdict(r)}  {r}")

    print("4. gradients modified on purpose, checked against what they should equal")
    w = np.array([3.0, -0.2, 0.6, -2.0])
    z = np.array([0.3, -1.2, 2.0, 0.7])
    cases = [
        ("2.5 * dy (scale_gradient)", lambda v: w * pgrad.scale_gradient(v, 2.5),
         lambda v: 2.5 * w * v),
        ("-dy (reverse_gradient)", lambda v: w * pgrad.reverse_gradient(v),
         lambda v: -w * v),
        ("clip(dy, -1, 1) (clip_gradient)", lambda v: w * pgrad.clip_gradient(v, -1.0, 1.0),
         lambda v: np.clip(w, -1.0, 1.0) * v),
    ]
    for name, fn, ref in cases:
        plain = pgrad.check_gradients(fn, z)
        against = pgrad.check_gradients(fn, z, reference=ref)
        differs = "differs" if not plain.ok() else "AGREES (unexpected)"
        print(f"   {name:32s} vs plain derivative: {differs} (max rel "
              f"{plain.max_rel_error:.2f});  vs reference: {verdict(against)} (max rel "
              f"{against.max_rel_error:.1e})")


if __name__ == "__main__":
    main()
