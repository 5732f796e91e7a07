#!/usr/bin/env python
"""pgrad's performance figures, each a ratio of two things measured side by side.

    python scripts/bench.py                 # every default figure, then a table
    python scripts/bench.py --only clip_ratio --repeats 50
    python scripts/bench.py --only ppo_mujoco_vs_sb3 --steps 1000000   # opt-in, long

Prints one JSON object per figure (``name``, ``value``, ``goal``, ``met``, ``details``) as it is
measured, then a readable table. Each figure runs in a fresh process, whose peak memory (VmHWM)
is in its details (``figure_process_peak_rss_mb``; both sides of an in-process ratio share it).
Timed ratios interleave the two sides (A, B, A, B, ...) after a warm-up and report the median
of the per-round ratios, so machine load shared by both sides cancels. Gradient shapes: a 64-64
tanh MLP with a Categorical head on CartPole shapes (obs 4, 2 actions), T = 2048 steps.
Figures against Stable-Baselines3 (``pip install 'pgrad[bench]'``) run each training run in its
own process (scripts/bench_runs.py) and report each side's peak memory; without SB3 they are
marked skipped. See docs/performance.md.
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
RUNS = ROOT / "scripts" / "bench_runs.py"  # one training run per process (pgrad or SB3)


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


def rounds(fn: Callable[[], object], calls: int) -> Callable[[], None]:
    """``fn`` called ``calls`` times (one timed round of a fast call)."""

    def run():
        for _ in range(calls):
            fn()

    return run


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
    return figure("rollout_ratio", value, ">= 0.8", value >= 0.8, num_envs=num_envs,
                  vector_steps_per_round=steps, env_steps_per_s=steps_per_s,
                  policy="A2C collector with its numpy mirror of the TensorFlow policy")


def a2c_speed_ratio(repeats: int) -> dict:
    """A2C training (collect + update, default config) vs random stepping of the same vector env.

    Throughput ratio: env steps per second of ``agent.step()`` over those of random-action
    stepping of a vector env like the agent's (CartPole-v1, same number of envs and steps).
    """
    import agents
    from pgrad.rl import rollout

    cls = agents.get("a2c")
    cfg = cls.Config()
    agent = cls(cfg, env_id="CartPole-v1", seed=0)
    updates = 10
    vector_steps = updates * cfg.n_steps
    raw_envs = rollout.make_vec_env("CartPole-v1", cfg.num_envs)
    raw_envs.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 2, size=(vector_steps, cfg.num_envs))

    def raw():
        for a in actions:
            raw_envs.step(a)

    times = interleaved({"raw": raw, "a2c": rounds(agent.step, updates)},
                        max(5, repeats // 3), warmup=2)
    value = ratio(times, "raw", "a2c")
    env_steps = vector_steps * cfg.num_envs
    steps_per_s = {k: round(env_steps / float(np.median(v))) for k, v in times.items()}
    agent.close()
    raw_envs.close()
    return figure("a2c_speed_ratio", value, ">= 0.5", value >= 0.5, num_envs=cfg.num_envs,
                  n_steps=cfg.n_steps, updates_per_round=updates, env_steps_per_s=steps_per_s,
                  note="A2C's episodes grow longer as it learns (fewer resets than random "
                  "stepping): a slight advantage to the A2C side")


def update_overhead(repeats: int) -> dict:
    """Fixed cost per update: ``agent.step()`` on a 1 env x 1 step rollout minus collecting it."""
    import agents
    from pgrad.rl import rollout

    cls = agents.get("a2c")
    agent = cls(cls.Config(num_envs=1, n_steps=1), env_id="CartPole-v1", seed=0)
    rng = np.random.default_rng(0)
    policy_fn = agent.acting_fn(rng)
    raw_envs = rollout.make_vec_env("CartPole-v1", 1)
    raw_envs.reset(seed=0)
    one = np.zeros(1, np.int64)
    calls = 50
    fns = {"step": rounds(agent.step, calls),
           "collect": rounds(lambda: agent.collector.collect(policy_fn, 1), calls),
           "env": rounds(lambda: raw_envs.step(one), calls)}
    times = interleaved(fns, max(10, repeats // 2))
    per_call = {k: v / calls for k, v in times.items()}
    value = float(np.median(per_call["step"] - per_call["collect"])) * 1e3
    agent.close()
    raw_envs.close()
    return figure("update_overhead_ms", value, "<= 0.5 ms", value <= 0.5,
                  ms_per_call={k: round(float(np.median(v)) * 1e3, 4) for k, v in per_call.items()},
                  what="agent.step() of A2C with num_envs=1, n_steps=1 on CartPole-v1 minus "
                  "collecting the same 1-step rollout (policy + env + recording); median over "
                  f"rounds of {calls} calls each")


def collection_backends(repeats: int, env_id: str = "CartPole-v1", num_envs: int = 8) -> dict:
    """Collection speed over the vector-env backends: Gymnasium sync and async, envpool.

    Each backend is timed twice per round: random-action stepping of the bare vector env, and
    the Collector with the A2C policy (numpy mirror, recording). Value: envpool's collector
    env steps/s over Gymnasium sync's.
    """
    import agents
    from pgrad.rl import envpool_env, rollout

    name = "collection_envpool_" + env_id.split("-")[0].lower() + f"_{num_envs}envs"
    if not envpool_env.is_available():
        return figure(name, float("nan"), "(informative)", False,
                      skipped=f"envpool is not installed ({envpool_env.INSTALL_HINT})")
    steps = 128
    cls = agents.get("a2c")
    agent = cls(cls.Config(num_envs=num_envs), env_id=env_id, seed=0)
    rng = np.random.default_rng(0)
    policy_fn = agent.acting_fn(rng)
    space = agent.collector.envs.single_action_space
    actions = np.stack([np.stack([space.sample() for _ in range(num_envs)])
                        for _ in range(steps)])
    fns, closers = {}, []
    modes = [m for m in rollout.VECTOR_MODES if m != "async" or num_envs <= 16]
    for mode in modes:  # (async: one process per env, not tried past 16 on 2 cores)
        envs = rollout.make_vec_env(env_id, num_envs, mode)
        envs.reset(seed=0)
        col = rollout.Collector(envs, env_id)
        col.reset(seed=0)
        closers.append(col)

        def raw(envs=envs):
            for a in actions:
                envs.step(a)

        fns[f"{mode}_raw"] = raw
        fns[f"{mode}_collect"] = lambda col=col: col.collect(policy_fn, steps)
    times = interleaved(fns, max(5, repeats // 6), warmup=1)
    for c in closers:
        c.close()
    agent.close()
    value = ratio(times, "sync_collect", "envpool_collect")
    steps_per_s = {k: round(steps * num_envs / float(np.median(v))) for k, v in times.items()}
    return figure(name, value, "(informative: envpool / sync collection)", True, env=env_id,
                  num_envs=num_envs, vector_steps_per_round=steps, env_steps_per_s=steps_per_s,
                  envpool_over_sync_raw=round(ratio(times, "sync_raw", "envpool_raw"), 3),
                  async_over_sync_collect=(round(ratio(times, "sync_collect", "async_collect"), 3)
                                           if "async" in modes else None))


def sb3_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("stable_baselines3") is not None


def train_run(side: str, spec: dict) -> dict:
    """One training run in a fresh process (scripts/bench_runs.py); its JSON result."""
    out = subprocess.run([sys.executable, str(RUNS), side, json.dumps(spec)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{side} run {spec} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def a2c_cartpole(repeats: int, seeds=(0, 1, 2), max_steps: int = 300_000) -> list[dict]:
    """A2C to a last-20 mean of 475 on CartPole-v1, pgrad and Stable-Baselines3 side by side.

    One fresh process per run; per seed pgrad then SB3 (next seed: SB3 first), each side with
    its own defaults (pgrad's A2C: 16 envs, lr 1.4e-3; SB3: rl-zoo's CartPole A2C, 8 envs).
    """
    del repeats
    runs: dict[str, list[dict]] = {"pgrad": [], "sb3": []}
    sides = ["pgrad", "sb3"] if sb3_available() else ["pgrad"]
    for i, seed in enumerate(seeds):
        for side in sides if i % 2 == 0 else sides[::-1]:
            spec = {"agent": "a2c", "env": "CartPole-v1", "seed": seed,
                    "max_steps": max_steps, "target": 475}
            runs[side].append(train_run(side, spec))

    def med(side, key):
        return float(np.median([r[key] for r in runs[side]]))

    ours = runs["pgrad"]
    solved = all(r["solved"] for r in ours)
    wall = med("pgrad", "wall_s")
    rss = max(r["peak_rss_mb"] for r in ours)
    out = [figure("a2c_cartpole_wall_s", wall, "(reported; the goal is the SB3 ratio)", solved,
                  median_env_steps=med("pgrad", "env_steps"), runs=ours,
                  note="median over seeds; wall from agent construction to solved, fresh "
                  "process per run; cpu_s = process CPU time over all threads")]
    goal = "<= 0.33 x SB3's solve wall"
    if "sb3" in sides:
        theirs = runs["sb3"]
        value = wall / med("sb3", "wall_s")
        out.append(figure(
            "a2c_cartpole_vs_sb3", value, goal, solved and value <= 0.33,
            pgrad_median_wall_s=wall, sb3_median_wall_s=med("sb3", "wall_s"),
            cpu_ratio=round(med("pgrad", "cpu_s") / med("sb3", "cpu_s"), 3),
            pgrad_median_env_steps=med("pgrad", "env_steps"),
            sb3_median_env_steps=med("sb3", "env_steps"),
            sb3_all_solved=all(r["solved"] for r in theirs), sb3_runs=theirs,
            peak_rss_mb={"pgrad": rss, "sb3": max(r["peak_rss_mb"] for r in theirs)}))
    else:
        out.append(figure("a2c_cartpole_vs_sb3", float("nan"), goal, False,
                          skipped="stable-baselines3 is not installed (pip install "
                          "'pgrad[bench]')"))
    out.append(figure("a2c_cartpole_peak_rss_mb", rss, "(reported, no goal)", True,
                      sb3_peak_rss_mb=(max(r["peak_rss_mb"] for r in runs["sb3"])
                                       if runs["sb3"] else None),
                      note="max over the per-seed run processes (VmHWM of each)"))
    return out


def side_by_side_vs_sb3(name: str, goal: str, spec: dict, steps: int, full: int) -> dict:
    """One training run per side in its own process, pgrad then SB3, same env steps and seed.

    Value: pgrad's wall over SB3's at the same number of env steps (``full``: the length the
    goal is stated for; shorter runs give the steps/s ratio at their length, labelled so).
    """
    if not sb3_available():
        return figure(name, float("nan"), goal, False,
                      skipped="stable-baselines3 is not installed (pip install 'pgrad[bench]')")
    spec = {**spec, "max_steps": steps}
    ours, theirs = train_run("pgrad", spec), train_run("sb3", spec)
    sps = {r["side"]: r["env_steps"] / r["wall_s"] for r in (ours, theirs)}
    value = sps["sb3"] / sps["pgrad"]  # = pgrad wall / SB3 wall at equal env steps
    return figure(name, value, goal, value <= 0.5,
                  measured_at_env_steps=steps, full_length=steps >= full,
                  env_steps_per_s={k: round(v, 1) for k, v in sps.items()},
                  cpu_ratio=round((ours["cpu_s"] / ours["env_steps"])
                                  / (theirs["cpu_s"] / theirs["env_steps"]), 3),
                  runs=[ours, theirs],
                  peak_rss_mb={"pgrad": ours["peak_rss_mb"], "sb3": theirs["peak_rss_mb"]},
                  note="run one after the other (pgrad first); the last-20 training return "
                  "is in each run")


def ppo_mujoco_vs_sb3(repeats: int, steps: int = 50_000, seed: int = 0) -> dict:
    """PPO on HalfCheetah-v5, pgrad then Stable-Baselines3, same settings and env steps (opt-in).

    Both with SB3's PPO defaults (1 env, 2048 steps x 10 epochs x minibatch 64, Adam 3e-4,
    64-64 tanh actor and critic). The goal is stated for 1M steps (``--steps 1000000``).
    """
    del repeats
    return side_by_side_vs_sb3(
        "ppo_mujoco_vs_sb3", "<= 0.5 x SB3's wall (1M steps)",
        {"agent": "ppo", "env": "HalfCheetah-v5", "seed": seed}, steps, 1_000_000)


def a2c_mujoco_vs_sb3(repeats: int, steps: int = 50_000, seed: int = 21) -> dict:
    """A2C on HalfCheetah-v5 with rl-zoo's MuJoCo A2C setting, pgrad then SB3 (opt-in).

    SB3's A2C defaults plus rl-zoo's ``normalize: true``: 1 env, 5-step updates (one update
    per 5 env steps: the per-update fixed cost decides the wall), RMSprop 7e-4, observations
    and rewards normalised; pgrad with the same settings. The goal is stated for 300k steps
    (``--steps 300000``), seed 21.
    """
    del repeats
    hp = {"num_envs": 1, "n_steps": 5, "normalize_obs": True, "normalize_reward": True}
    return side_by_side_vs_sb3(
        "a2c_mujoco_vs_sb3", "<= 0.5 x SB3's wall (300k steps)",
        {"agent": "a2c", "env": "HalfCheetah-v5", "seed": seed, "hp": hp}, steps, 300_000)


def _collection_cartpole_64(repeats: int) -> dict:
    return collection_backends(repeats, "CartPole-v1", num_envs=64)


def _collection_cheetah(repeats: int) -> dict:
    return collection_backends(repeats, "HalfCheetah-v5")


def _ray_cost_model(sides: dict, updates: int, per_update: int) -> dict:
    """Learner time per update (``step`` minus collection, in-process), a worker's time per env
    step, the learner's wait beyond the workers' collection (transfer, merge), and bytes."""
    local, remote = sides["in_process"], sides["1_workers"]
    spent = [0.0]
    collect = local.collector.collect

    def timed(*args, **kwargs):
        began = time.perf_counter()
        try:
            return collect(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - began

    local.collector.collect = timed
    began = time.perf_counter()
    for _ in range(updates):
        local.step()
    total = time.perf_counter() - began
    local.collector.collect = collect
    waits, worker = [], []
    for _ in range(updates):
        remote.step()
        t = remote.collector.timing
        waits.append(t["rollout_s"] - max(t["worker_collect_s"]))
        worker.append(max(t["worker_collect_s"]))
    traj, _ = collect(local.acting_fn(np.random.default_rng(0)), local.cfg.n_steps)
    return {
        "learner_update_ms": round(1e3 * (total - spent[0]) / updates, 2),
        "in_process_collect_us_per_env_step": round(1e6 * spent[0] / updates / per_update, 2),
        "worker_collect_us_per_env_step": round(1e6 * float(np.median(worker)) / per_update, 2),
        "distribution_overhead_ms_per_update": round(1e3 * float(np.median(waits)), 2),
        "bytes_to_each_worker_per_update": sum(  # the arrays; Ray's framing adds ~100 B
            np.asarray(v).nbytes for v in tf.nest.flatten(local.acting_state()) if v is not None),
        "trajectory_bytes_per_env_step": round(
            sum(x.nbytes for x in traj if x is not None) / per_update, 1),
        "params": int(local.mirror.flat_numpy().size),
    }


def _spin_tasks(steps: int) -> dict[str, Callable[[], object]]:
    """``steps`` 1 ms busy-waits as one Ray task, and split over two concurrent tasks."""
    import ray

    @ray.remote(num_cpus=0)
    def spin(n: int) -> None:
        for _ in range(n):
            end = time.perf_counter() + 1e-3
            while time.perf_counter() < end:
                pass

    return {"spin_1_task": lambda: ray.get(spin.remote(steps)),
            "spin_2_tasks": lambda: ray.get([spin.remote(steps // 2),
                                             spin.remote(steps - steps // 2)])}


def ray_scaling(repeats: int, num_envs: int = 8, n_steps: int = 32) -> dict:
    """A2C ``agent.step()`` steps/s in-process, on 1 and on 2 Ray rollout workers.

    On ``SlowCartPole-v1`` (each env step busy-waits 1 ms: a slow simulator) the value is the
    2-worker over 1-worker throughput, beside the ceiling the machine's free cores allowed
    (plain Ray tasks spinning alike); ``SleepyCartPole-v1`` (each step sleeps 1 ms) shows the
    scaling of the design itself where the env needs no CPU; on plain CartPole-v1 the details
    give the overhead of the workers against in-process collection. The three agents exist side
    by side and their rounds interleave, so load shared by all cancels. Also measured, for the
    cost model in docs/distributed.md: bytes sent and received per update, the learner's update
    time, and a worker's time per env step.
    """
    try:
        import ray  # noqa: F401
    except ImportError:
        return figure("ray_scaling", 0.0, ">= 1.6", False, skipped="ray is not installed "
                      "(pip install 'pgrad[ray]')")
    import agents
    from pgrad_app import distributed

    slow = "pgrad_app.slow_env:SlowCartPole-v1"
    cfg = {"num_envs": num_envs, "n_steps": n_steps}
    per_update = num_envs * n_steps
    details: dict = {"num_envs": num_envs, "n_steps": n_steps, "env_steps_per_update": per_update,
                     "agent": "a2c (its defaults, num_envs and n_steps as given)",
                     "load_avg_1m_before": round(os.getloadavg()[0], 2)}
    # Three actors exist at once (the 1- and the 2-worker agent) but at most two collect at a
    # time (the rounds interleave): one logical CPU more than the machine has.
    with distributed.ray_session(num_cpus=max(3, (os.cpu_count() or 2) + 1), what="ray_scaling"):
        for label, spec in (("slow_1ms", slow), ("sleep_1ms", slow.replace("Slow", "Sleepy")),
                            ("cartpole", "CartPole-v1")):
            env_id = distributed.env_id_of(spec)
            sides = {}
            for workers in (0, 1, 2):
                agent = agents.make("a2c", env_id, seed=0, **cfg)
                if workers:
                    distributed.distribute(agent, workers, env_spec=spec)
                sides[f"{workers}_workers" if workers else "in_process"] = agent
            updates = 20 if label == "cartpole" else 4
            fns = {k: rounds(a.step, updates) for k, a in sides.items()}
            if label == "slow_1ms":  # the machine's own ceiling: plain tasks spinning alike
                fns.update(_spin_tasks(updates * per_update))
            times = interleaved(fns, max(5, repeats // 10), warmup=1)
            details[label] = {k: round(per_update * updates / float(np.median(v)))
                              for k, v in times.items()}
            details[label]["ms_per_update"] = {k: round(1e3 * float(np.median(v)) / updates, 2)
                                               for k, v in times.items()}
            if label == "cartpole":  # where an update's time goes, for the cost model
                details["cost_model"] = _ray_cost_model(sides, updates, per_update)
            for agent in sides.values():
                agent.close()
    slow_sps = details["slow_1ms"]
    value = slow_sps["2_workers"] / slow_sps["1_workers"]
    ceiling = slow_sps.pop("spin_2_tasks") / slow_sps.pop("spin_1_task")
    details["machine_ceiling_2_over_1"] = round(ceiling, 3)
    details["value_over_ceiling"] = round(value / ceiling, 3)
    details["ceiling_note"] = ("the same 1 ms busy-waits as plain Ray tasks, all on one task vs "
                               "split over two, in the same interleaved rounds: the speed-up "
                               "this machine's free cores allowed at the time")
    sleepy = details["sleep_1ms"]
    details["sleep_1ms_2_over_1"] = round(sleepy["2_workers"] / sleepy["1_workers"], 3)
    cart = details["cartpole"]
    details["cartpole_1_worker_over_in_process"] = round(cart["1_workers"] / cart["in_process"], 3)
    details["cartpole_2_workers_over_in_process"] = round(cart["2_workers"] / cart["in_process"],
                                                          3)
    details["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    return figure("ray_scaling", value, ">= 1.6", value >= 1.6, **details)


FIGURES: dict[str, Callable] = {
    "per_step_ratio": per_step_ratio,
    "fused_ratio": fused_ratio,
    "clip_ratio": clip_ratio,
    "jacobian_ratio": jacobian_ratio,
    "diagnostics_ratio": diagnostics_ratio,
    "rollout_ratio": rollout_ratio,
    "update_overhead": update_overhead,
    "a2c_speed_ratio": a2c_speed_ratio,
    "collection_envpool_cartpole": collection_backends,
    "collection_envpool_cartpole_64envs": _collection_cartpole_64,
    "collection_envpool_halfcheetah": _collection_cheetah,
    "a2c_cartpole": a2c_cartpole,
    "ray_scaling": ray_scaling,
}
#: Figures run only when named with --only (long).
OPT_IN: dict[str, Callable] = {"ppo_mujoco_vs_sb3": ppo_mujoco_vs_sb3,
                               "a2c_mujoco_vs_sb3": a2c_mujoco_vs_sb3}


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


def run_figure(name: str, args) -> list[dict]:
    """Runs one figure here; adds this process's peak memory to each result."""
    fn = {**FIGURES, **OPT_IN}[name]
    kwargs = {}
    if name == "a2c_cartpole":
        kwargs = {"max_steps": args.max_steps, "seeds": tuple(args.seeds)}
    elif name in ("ppo_mujoco_vs_sb3", "a2c_mujoco_vs_sb3"):
        kwargs = {"steps": args.steps}
    out = fn(args.repeats, **kwargs)
    out = out if isinstance(out, list) else [out]
    for r in out:
        r["details"]["figure_process_peak_rss_mb"] = round(peak_rss_mb(), 1)
    return out


def table(results: list[dict]) -> str:
    rows = [("figure", "value", "goal", "met")]
    for r in results:
        met = "skipped" if "skipped" in r["details"] else ("yes" if r["met"] else "NO")
        rows.append((r["name"], f"{r['value']:g}", r["goal"], met))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted({**FIGURES, **OPT_IN}), action="append",
                        help="run only this figure (repeatable); opt-in figures: "
                        + ", ".join(OPT_IN))
    parser.add_argument("--repeats", type=int, default=60, help="interleaved rounds per figure")
    parser.add_argument("--max-steps", type=int, default=300_000,
                        help="a2c_cartpole: env-step budget per run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2],
                        help="a2c_cartpole: seeds (one pgrad and one SB3 run each)")
    parser.add_argument("--steps", type=int, default=50_000,
                        help="ppo_mujoco_vs_sb3 / a2c_mujoco_vs_sb3: env steps per side (the "
                        "goals are for 1000000 / 300000)")
    parser.add_argument("--figure-worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.figure_worker is not None:
        for r in run_figure(args.figure_worker, args):
            print(json.dumps(r), flush=True)
        return 0
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in lscpu.splitlines()
                  if ln.startswith("Model name")), "unknown")
    print(json.dumps({"machine": model, "cpus": os.cpu_count(), "tensorflow": tf.__version__,
                      "load_avg_1m_5m_15m": os.getloadavg()}), flush=True)
    results = []
    passthrough = ["--repeats", str(args.repeats), "--max-steps", str(args.max_steps),
                   "--steps", str(args.steps), "--seeds", *map(str, args.seeds)]
    for name in args.only or list(FIGURES):
        # Each figure in a fresh process: its peak memory is its own.
        proc = subprocess.run([sys.executable, __file__, "--figure-worker", name, *passthrough],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"figure {name} failed:\n{proc.stderr[-3000:]}", file=sys.stderr)
            return 1
        for line in proc.stdout.strip().splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                print(json.dumps(r), flush=True)
                results.append(r)
    print(json.dumps({"load_avg_1m_5m_15m_at_end": os.getloadavg()}))
    print()
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
