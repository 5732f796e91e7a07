#!/usr/bin/env python
"""pgrad's performance figures, each a ratio measured side by side in this one process.

    python scripts/bench.py                 # every figure, then a table
    python scripts/bench.py --only clip_ratio --repeats 50

Prints one JSON object per figure (``name``, ``value``, ``goal``, ``met``, ``details``) as it is
measured, then a readable table. Timed ratios interleave the two sides (A, B, A, B, ...) after a
warm-up and report the median of the per-round ratios, so machine load shared by both sides
cancels. Shapes: a 64-64 tanh MLP with a Categorical head on CartPole shapes (obs 4, 2 actions),
T = 2048 steps. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# isort: off
import pgrad_app.quiet  # noqa: E402,F401  (first: silences TensorFlow and picks its allocator)
import pgrad  # noqa: E402
import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from pgrad.core.per_step import num_params  # noqa: E402
# isort: on

T = 2048
# Peer: Stable-Baselines3 A2C (PyTorch, rl-zoo CartPole settings) on this machine class (issue 5).
SB3_A2C_STEPS = 100_000
SB3_A2C_WALL_S = 12.0  # its 11-13 s, midpoint


# ---------------------------------------------------------------------------------------------
# Timing helpers.
# ---------------------------------------------------------------------------------------------


def interleaved(fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 3):
    """``{name: [seconds per call]}``; calls alternate between the functions every round.

    Odd rounds run the functions in reverse order, so neither side always follows the other.
    """
    for f in fns.values():
        for _ in range(warmup):
            f()
    times: dict[str, list[float]] = {k: [] for k in fns}
    order = list(fns.items())
    for i in range(repeats):
        for name, f in order if i % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - start)
    return {k: np.asarray(v) for k, v in times.items()}


def ratio(times, num: str, den: str) -> float:
    """Median over rounds of ``time[num] / time[den]``."""
    return float(np.median(times[num] / times[den]))


def ms(times, name: str) -> float:
    return round(float(np.median(times[name])) * 1e3, 3)


def figure(name: str, value: float, goal: str, met: bool, **details) -> dict:
    return {"name": name, "value": round(float(value), 3), "goal": goal, "met": bool(met),
            "details": details}


# ---------------------------------------------------------------------------------------------
# The policy and batch all gradient figures share.
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# Figures.
# ---------------------------------------------------------------------------------------------


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
    return figure("per_step_ratio", value, "<= 2.0", value <= 2.0, **details)


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

    @tf.function
    def engine(obs, act, adv):
        return pgrad.policy_gradients(chain, state, s.log_prob, s.variables, (obs, act),
                                      {"advantages": adv})[0]

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

    @tf.function
    def engine(obs, act, adv):
        return pgrad.policy_gradients(chain, state, s.log_prob, s.variables, (obs, act),
                                      {"advantages": adv})[0]

    @tf.function
    def full(obs, act, adv):
        return pgrad.policy_gradients(chain, state, s.log_prob, s.variables, (obs, act),
                                      {"advantages": adv}, path="full")[0]

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
        "clip_ratio", value, "<= 2.0, no [T, params] tensor", value <= 2.0 and no_per_step,
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


def rollout_ratio(repeats: int) -> dict:
    """Rollout collection with the A2C policy vs random-action stepping of the same vector env."""
    import agents
    from pgrad.rl import rollout

    num_envs, steps = 8, 256
    cls = agents.get("a2c")
    agent = cls(cls.Config(num_envs=num_envs), env_id="CartPole-v1", seed=0)
    raw_envs = rollout.make_vec_env("CartPole-v1", num_envs)
    raw_envs.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 2, size=(steps, num_envs))

    def raw():
        for a in actions:
            raw_envs.step(a)

    def policy():
        agent.collector.collect(agent.acting_fn(rng), steps)

    times = interleaved({"raw": raw, "policy": policy}, max(5, repeats // 6), warmup=1)
    value = ratio(times, "raw", "policy")  # throughput ratio = inverse time ratio
    steps_per_s = {k: round(steps * num_envs / float(np.median(v))) for k, v in times.items()}
    agent.close()
    raw_envs.close()
    return figure("rollout_ratio", value, ">= 0.5", value >= 0.5, num_envs=num_envs,
                  vector_steps_per_round=steps, env_steps_per_s=steps_per_s,
                  policy="A2C collector with its numpy mirror of the TensorFlow policy")


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM; ru_maxrss would include a parent's at fork)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def a2c_run(seed: int, max_steps: int) -> dict:
    """One A2C run on CartPole-v1 until the last-20 mean return reaches 475 (worker process)."""
    import agents

    start, cpu_start = time.perf_counter(), time.process_time()
    cls = agents.get("a2c")
    agent = cls(cls.Config(), env_id="CartPole-v1", seed=seed)
    returns: list[float] = []
    steps, solved = 0, False
    while steps < max_steps:
        info = agent.step()
        steps = info["env_steps"]
        returns.extend(r for _, r, _ in info["episodes"])
        if len(returns) >= 20 and np.mean(returns[-20:]) >= 475:
            solved = True
            break
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    agent.close()
    rss_mb = peak_rss_mb()
    return {"seed": seed, "solved": solved, "env_steps": steps, "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2), "peak_rss_mb": round(rss_mb, 1)}


def a2c_cartpole(repeats: int, seeds=(0, 1, 2), max_steps: int = 300_000) -> list[dict]:
    """A2C to a last-20 mean of 475 on CartPole-v1, one fresh process per seed."""
    del repeats
    runs = []
    for seed in seeds:
        out = subprocess.run(
            [sys.executable, __file__, "--a2c-worker", str(seed), "--max-steps", str(max_steps)],
            capture_output=True, text=True, check=True,
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    solved = all(r["solved"] for r in runs)
    steps = float(np.median([r["env_steps"] for r in runs]))
    wall = float(np.median([r["wall_s"] for r in runs]))
    rss = max(r["peak_rss_mb"] for r in runs)
    goal = f"<= {SB3_A2C_WALL_S / 2:.1f} s and <= {SB3_A2C_STEPS} steps (SB3: ~100k, 11-13 s)"
    met = solved and wall <= SB3_A2C_WALL_S / 2 and steps <= SB3_A2C_STEPS
    return [
        figure("a2c_cartpole_wall_s", wall, goal, met, median_env_steps=steps, runs=runs,
               note="median over seeds; wall from agent construction to solved, in-process; "
               "cpu_s = process CPU time over all threads (less sensitive to machine load)"),
        figure("a2c_cartpole_peak_rss_mb", rss, "(reported, no goal)", True, runs=len(runs),
               note="max over the per-seed worker processes (VmHWM)"),
    ]


FIGURES: dict[str, Callable] = {
    "per_step_ratio": per_step_ratio,
    "fused_ratio": fused_ratio,
    "clip_ratio": clip_ratio,
    "jacobian_ratio": jacobian_ratio,
    "diagnostics_ratio": diagnostics_ratio,
    "rollout_ratio": rollout_ratio,
    "a2c_cartpole": a2c_cartpole,
}


def table(results: list[dict]) -> str:
    rows = [("figure", "value", "goal", "met")]
    rows += [(r["name"], f"{r['value']:g}", r["goal"], "yes" if r["met"] else "NO")
             for r in results]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(FIGURES), action="append",
                        help="run only this figure (repeatable)")
    parser.add_argument("--repeats", type=int, default=60, help="interleaved rounds per figure")
    parser.add_argument("--a2c-worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--max-steps", type=int, default=300_000,
                        help="A2C env-step budget per seed")
    args = parser.parse_args(argv)
    if args.a2c_worker is not None:
        print(json.dumps(a2c_run(args.a2c_worker, args.max_steps)))
        return 0
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in lscpu.splitlines()
                  if ln.startswith("Model name")), "unknown")
    print(json.dumps({"machine": model, "cpus": os.cpu_count(), "tensorflow": tf.__version__,
                      "load_avg_1m": os.getloadavg()[0]}), flush=True)
    results = []
    for name in args.only or list(FIGURES):
        kwargs = {"max_steps": args.max_steps} if name == "a2c_cartpole" else {}
        out = FIGURES[name](args.repeats, **kwargs)
        for r in out if isinstance(out, list) else [out]:
            print(json.dumps(r), flush=True)
            results.append(r)
    print()
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
