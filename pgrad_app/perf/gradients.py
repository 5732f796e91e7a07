"""Gradient figures: per-step, fused, clipped, jacobian and diagnostics vs one batched gradient.

Shapes: a 64-64 tanh MLP with a Categorical head on CartPole shapes (obs 4, 2 actions),
T = 2048 steps (:class:`Setup`).
"""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import tensorflow as tf

import pgrad
from pgrad.core.per_step import num_params
from pgrad_app.perf.common import T, figure, interleaved, ms, ratio


class Setup:
    """64-64 tanh MLP + Categorical head, CartPole shapes; a batch of T steps."""

    def __init__(self, steps: int = T, seed: int = 0):
        tf.keras.utils.set_random_seed(seed)
        self.head = pgrad.make_head(gym.spaces.Discrete(2))
        self.net = pgrad.mlp(4, (64, 64), 2, output_gain=0.01)
        self.head.build(None)
        self.variables = self.net.trainable_variables
        rng = np.random.default_rng(seed)
        self.obs = tf.constant(rng.normal(size=(steps, 4)), tf.float32)  # [T, 4]
        self.act = self.head(self.net(self.obs)).sample(seed=seed)  # [T]
        self.adv = tf.constant(rng.normal(size=(steps,)), tf.float32)  # [T]
        self.steps = steps

    def log_prob(self, obs, act):
        return self.head(self.net(obs)).log_prob(act)  # [T]

    def batched_grad(self):
        """One ordinary batched gradient of sum_t log pi_t (the reference cost)."""

        @tf.function
        def run(obs, act):
            with tf.GradientTape() as tape:
                total = tf.reduce_sum(self.log_prob(obs, act))
            return tape.gradient(total, self.variables)

        return lambda: run(self.obs, self.act)

    def engine_grad(self, chain, state, **kwargs):
        """``pgrad.policy_gradients`` of ``chain`` as a tf.function of ``(obs, act, advantages)``
        (``kwargs``: e.g. ``path="full"``); returns the gradients."""

        @tf.function
        def run(obs, act, adv):
            return pgrad.policy_gradients(chain, state, self.log_prob, self.variables, (obs, act),
                                          {"advantages": adv}, **kwargs)[0]

        return run


def largest_tensor(concrete) -> tuple[int, list]:
    """Elements and shape of the largest statically-shaped tensor in a traced graph (and bodies)."""
    best = (0, [])
    graphs = [concrete.graph]
    while graphs:
        graph = graphs.pop()
        for op in graph.get_operations():
            for out in op.outputs:
                shape = out.shape
                if shape.rank is not None and shape.is_fully_defined():
                    n = int(np.prod(shape.as_list())) if shape.rank else 1
                    if n > best[0]:
                        best = (n, shape.as_list())
        for fn in graph._functions.values():  # while/cond bodies
            if hasattr(fn, "graph"):
                graphs.append(fn.graph)
    return best


def per_step_ratio(repeats: int) -> dict:
    s = Setup()

    @tf.function
    def taps(obs, act):
        return pgrad.per_step_grads(s.log_prob, s.variables, obs, act)

    @tf.function
    def generic(obs, act):
        return pgrad.per_step_grads(s.log_prob, s.variables, obs, act, use_taps=False)

    size = num_params(s.variables)

    @tf.function
    def fill(x):  # the floor: allocate and write a [T, params] float32 tensor
        return tf.fill([T, size], x)

    fns = {
        "batched": s.batched_grad(),
        "per_step": lambda: taps(s.obs, s.act),
        "generic": lambda: generic(s.obs, s.act),
        "fill": lambda: fill(tf.constant(1.0)),
    }
    times = interleaved(fns, repeats)
    value = ratio(times, "per_step", "batched")
    details = {
        "T": T, "params": size, "ms": {k: ms(times, k) for k in fns},
        "generic_vectorized_ratio": round(ratio(times, "generic", "batched"), 3),
        "fill_T_by_params_ratio": round(ratio(times, "fill", "batched"), 3),
        "allocator": "BFC" if os.environ.get("TF_CPU_ALLOCATOR_USE_BFC") == "true" else "malloc",
    }
    return figure("per_step_ratio", value, "<= 1.3", value <= 1.3, **details)


def jacobian_ratio(repeats: int) -> dict:
    """tape.jacobian vs one batched gradient (few repeats: it is ~1 s)."""
    s = Setup()

    @tf.function
    def jac(obs, act):
        with tf.GradientTape() as tape:
            out = s.log_prob(obs, act)
        # The plain (while-loop) jacobian: pfor's version holds [T, T, ...] intermediates.
        return tape.jacobian(out, s.variables, experimental_use_pfor=False)

    times = interleaved({"batched": s.batched_grad(), "jacobian": lambda: jac(s.obs, s.act)},
                        max(2, repeats // 20), warmup=1)
    value = ratio(times, "jacobian", "batched")
    return figure("jacobian_ratio", value, "(reference, no goal)", True, T=T,
                  ms={k: ms(times, k) for k in times})


def fused_ratio(repeats: int) -> dict:
    s = Setup()
    chain = pgrad.chain(pgrad.weight_by("advantages", standardize=True), pgrad.mean_steps())
    state = chain.init(s.variables)
    engine = s.engine_grad(chain, state)

    @tf.function
    def by_hand(obs, act, adv):
        mean, var = tf.nn.moments(adv, axes=[0])
        w = tf.stop_gradient((adv - mean) / (tf.sqrt(var) + 1e-8))  # [T]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(w * s.log_prob(obs, act))
        return tape.gradient(loss, s.variables)

    fns = {"by_hand": lambda: by_hand(s.obs, s.act, s.adv),
           "engine": lambda: engine(s.obs, s.act, s.adv)}
    times = interleaved(fns, repeats)
    value = ratio(times, "engine", "by_hand")
    diff = max(float(tf.reduce_max(tf.abs(a - b))) for a, b in
               zip(fns["engine"](), fns["by_hand"]()))
    return figure("fused_ratio", value, "<= 1.1", value <= 1.1, T=T, plan=pgrad.plan(chain),
                  ms={k: ms(times, k) for k in fns}, max_abs_diff=diff)


def clip_ratio(repeats: int) -> dict:
    s = Setup()
    chain = pgrad.chain(pgrad.weight_by("advantages"), pgrad.clip_per_step(1.0),
                        pgrad.mean_steps())
    state = chain.init(s.variables)
    engine = s.engine_grad(chain, state)
    full = s.engine_grad(chain, state, path="full")

    fns = {"batched": s.batched_grad(), "engine": lambda: engine(s.obs, s.act, s.adv),
           "full": lambda: full(s.obs, s.act, s.adv)}
    times = interleaved(fns, repeats)
    value = ratio(times, "engine", "batched")
    elements, shape = largest_tensor(engine.get_concrete_function(s.obs, s.act, s.adv))
    smallest_row = min(int(np.prod(v.shape)) for v in s.variables if len(v.shape) == 2)
    no_per_step = elements < T * smallest_row  # below the smallest per-step kernel gradient
    diff = max(float(tf.reduce_max(tf.abs(a - b))) for a, b in
               zip(fns["engine"](), fns["full"]()))
    return figure(
        "clip_ratio", value, "<= 1.15, no [T, params] tensor", value <= 1.15 and no_per_step,
        T=T, plan=pgrad.plan(chain), ms={k: ms(times, k) for k in fns},
        materialised_full_path_ratio=round(ratio(times, "full", "batched"), 3),
        largest_tensor_in_graph=shape, no_T_by_params_tensor=no_per_step,
        max_abs_diff_vs_full=diff,
    )


def diagnostics_ratio(repeats: int) -> dict:
    """Per-step gradient diagnostics (norm quantiles, SNR, cosine) vs one batched gradient."""
    from pgrad.tools import diagnostics

    s = Setup()

    @tf.function
    def diag(obs, act, adv):
        return diagnostics.policy_diagnostics(s.log_prob, s.variables, (obs, act), weights=adv,
                                              max_norm=1.0)

    times = interleaved({"batched": s.batched_grad(), "diagnostics":
                         lambda: diag(s.obs, s.act, s.adv)}, repeats)
    value = ratio(times, "diagnostics", "batched")
    return figure("diagnostics_ratio", value, "(informative, no goal)", True, T=T,
                  ms={k: ms(times, k) for k in times})
