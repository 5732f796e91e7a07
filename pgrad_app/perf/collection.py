"""Collection figures: the Collector against bare env stepping, and the vector-env backends."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pgrad.rl.envs.native import gymnasium_envs
from pgrad_app.perf.common import figure, interleaved, ratio


@gymnasium_envs()  # against Gymnasium's own CartPole (not pgrad's numpy one)
def rollout_ratio(repeats: int) -> dict:
    """Rollout collection with the A2C policy vs random-action stepping of the same vector env."""
    import agents
    from pgrad.rl.collection import rollout

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


@gymnasium_envs()  # against Gymnasium's own CartPole (not pgrad's numpy one)
def collection_backends(repeats: int, env_id: str = "CartPole-v1", num_envs: int = 8) -> dict:
    """Collection speed over the vector-env backends: Gymnasium sync and async, envpool.

    Each backend is timed twice per round: random-action stepping of the bare vector env, and
    the Collector with the A2C policy (numpy mirror, recording). Value: envpool's collector
    env steps/s over Gymnasium sync's.
    """
    import agents
    from pgrad.rl.collection import rollout
    from pgrad.rl.envs import envpool as envpool_env
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
    modes = [m for m in rollout.VECTOR_MODES  # (overlap: cnn_collection_ratio)
             if m != "overlap" and (m != "async" or num_envs <= 16)]
    # (async: one process per env, not tried past 16 on 2 cores)
    times = _raw_and_collect({m: lambda m=m: rollout.make_vec_env(env_id, num_envs, m)
                              for m in modes}, env_id, actions, policy_fn, repeats)
    agent.close()
    value = ratio(times, "sync_collect", "envpool_collect")
    steps_per_s = {k: round(steps * num_envs / float(np.median(v))) for k, v in times.items()}
    return figure(name, value, "(informative: envpool / sync collection)", True, env=env_id,
                  num_envs=num_envs, vector_steps_per_round=steps, env_steps_per_s=steps_per_s,
                  envpool_over_sync_raw=round(ratio(times, "sync_raw", "envpool_raw"), 3),
                  async_over_sync_collect=(round(ratio(times, "sync_collect", "async_collect"), 3)
                                           if "async" in modes else None))


def collection_cartpole_64(repeats: int) -> dict:
    return collection_backends(repeats, "CartPole-v1", num_envs=64)


def collection_cheetah(repeats: int) -> dict:
    return collection_backends(repeats, "HalfCheetah-v5")


@gymnasium_envs()  # against Gymnasium's own CartPole (not pgrad's numpy one)
def naive_acting_ratio(repeats: int, vector_steps: int = 400) -> dict:
    """Collection with the numpy mirror, and with one ``tf.function`` policy call per vector step
    (the naive alternative), each against random-action stepping of the same 8-env CartPole
    vector env: what the mirror buys. Interleaved rounds, median of per-round ratios."""
    import tensorflow as tf

    import agents

    agent = agents.make("a2c", "CartPole-v1", seed=0, num_envs=8)
    envs, rng = agent.collector.envs, np.random.default_rng(0)
    net, head = agent.net, agent.head

    @tf.function
    def tf_act(obs, seed):
        dist = head.distribution(net.params(obs))
        actions = dist.sample(seed=seed)
        return actions, dist.log_prob(actions)

    def naive_fn(obs):
        a, lp = tf_act(tf.constant(obs), tf.constant([0, 1]))
        a = a.numpy()
        return a, head.to_env(a), lp.numpy(), None

    policy_fn = agent.acting_fn(rng)
    agent.collector.collect(naive_fn, 5)  # trace
    times = interleaved({
        "raw": lambda: [envs.step(rng.integers(0, 2, 8)) for _ in range(vector_steps)],
        "mirror": lambda: agent.collector.collect(policy_fn, vector_steps),
        "naive": lambda: agent.collector.collect(naive_fn, vector_steps),
    }, max(3, repeats // 10), warmup=1)
    agent.close()
    mirror, naive = ratio(times, "raw", "mirror"), ratio(times, "raw", "naive")
    return figure("naive_acting_ratio", naive, "(informative)", True,
                  mirror_ratio=mirror, env_steps_per_s_raw=round(
                      8 * vector_steps / float(np.median(times["raw"]))))


def cnn_collection_ratio(repeats: int, env_id: str = "ALE/Pong-v5", num_envs: int = 8,
                         vector_steps: int = 20) -> dict:
    """Collection with a NatureCNN policy against raw stepping of the same envs (goal: >= 0.7x):
    PPO's collector on 8 Atari envs with the standard preprocessing (84x84x4 uint8), acting
    through :class:`pgrad.rl.acting.compiled_actor.CompiledActor`, in the default
    ``vector_mode="sync"`` (acting and stepping one after the other; the value) and in
    ``"overlap"`` (the network acts on one half of the envs while a thread steps the other;
    ``overlap_ratio``), against random-action stepping of the sync collector's own envs (one
    process, the emulators one after the other: what ``step`` of those 8 envs costs).
    Interleaved rounds of ``vector_steps``, median of per-round ratios (throughput: raw time
    over collection time); ``cpu_ratio`` the same with the process's CPU time instead of the
    wall clock (the ratio a machine with no idle core would give). Needs ale-py
    (``pgrad[atari]``)."""
    import importlib.util
    import time

    name = "cnn_collection_ratio"
    if importlib.util.find_spec("ale_py") is None:
        return figure(name, float("nan"), ">= 0.7", False,
                      skipped="ale-py is not installed (pip install 'pgrad[atari]')")
    import gymnasium as gym

    import agents

    made = {mode: agents.make("ppo", env_id, seed=0, num_envs=num_envs, n_steps=128,
                              vector_mode=mode) for mode in ("sync", "overlap")}
    envs, rng = made["sync"].collector.envs, np.random.default_rng(0)
    space = envs.single_action_space
    assert isinstance(space, gym.spaces.Discrete), space  # Atari's actions
    actions = int(space.n)
    cpu: dict[str, list[float]] = {"raw": [], "sync": [], "overlap": []}

    def timed(key, fn):
        def run():
            start = time.process_time()
            fn()
            cpu[key].append(time.process_time() - start)
        return run

    def raw():
        for _ in range(vector_steps):
            envs.step(rng.integers(0, actions, num_envs))

    fns: dict[str, Callable[[], object]] = {"raw": timed("raw", raw)}
    for mode, agent in made.items():
        policy_fn = agent.acting_fn(np.random.default_rng(0))
        agent.collector.collect(policy_fn, 2)  # trace the acting call
        fns[mode] = timed(mode, lambda a=agent, f=policy_fn: a.collector.collect(f, vector_steps))
    times = interleaved(fns, max(5, repeats // 4), warmup=1)
    for key in cpu:  # drop the warm-up call's
        cpu[key] = cpu[key][1:]
    value = ratio(times, "raw", "sync")
    cpu_times = {k: np.asarray(v) for k, v in cpu.items()}
    per_step = {k: round(float(np.median(v)) * 1e3 / vector_steps, 2) for k, v in times.items()}
    cpu_per_step = {k: round(float(np.median(v)) * 1e3 / vector_steps, 2)
                    for k, v in cpu_times.items()}
    encoder = getattr(made["sync"].net.encoder, "kind", None)
    for agent in made.values():
        agent.close()
    return figure(name, value, ">= 0.7", value >= 0.7, env=env_id, num_envs=num_envs,
                  encoder=encoder, vector_steps_per_round=vector_steps,
                  overlap_ratio=round(ratio(times, "raw", "overlap"), 3),
                  cpu_ratio={k: round(ratio(cpu_times, "raw", k), 3)
                             for k in ("sync", "overlap")},
                  ms_per_vector_step=per_step, cpu_ms_per_vector_step=cpu_per_step)


def native_cartpole(repeats: int, num_envs: int = 16, steps: int = 256) -> dict:
    """pgrad's numpy CartPole (:mod:`pgrad.rl.envs.native`) against Gymnasium's sync vector env
    of the same envs: random-action stepping of each, and the A2C collector on each (numpy
    mirror, recording). Value: the collector's env steps/s on the native env over Gymnasium's
    (the two give the same numbers: ``tests/rl/test_native_envs.py``)."""
    import agents
    from pgrad.rl.collection import rollout

    agent = agents.make("a2c", "CartPole-v1", seed=0, num_envs=num_envs)
    rng = np.random.default_rng(0)
    policy_fn = agent.acting_fn(rng)
    actions = rng.integers(0, 2, size=(steps, num_envs))
    def gymnasiums():
        with gymnasium_envs():
            return rollout.make_vec_env("CartPole-v1", num_envs)

    times = _raw_and_collect({"native": lambda: rollout.make_vec_env("CartPole-v1", num_envs),
                              "gymnasium": gymnasiums}, "CartPole-v1", actions, policy_fn,
                             repeats)
    agent.close()
    value = ratio(times, "gymnasium_collect", "native_collect")
    steps_per_s = {k: round(steps * num_envs / float(np.median(v))) for k, v in times.items()}
    return figure("native_cartpole", value, "(informative: native / Gymnasium collection)", True,
                  num_envs=num_envs, vector_steps_per_round=steps, env_steps_per_s=steps_per_s,
                  native_over_gymnasium_raw=round(ratio(times, "gymnasium_raw", "native_raw"), 3))


def _raw_and_collect(backends: dict[str, Callable], env_id: str, actions: np.ndarray,
                     policy_fn: Callable, repeats: int) -> dict:
    """Interleaved timings of each backend's vector env (``backends[name]()`` builds it):
    ``NAME_raw`` steps it with ``actions`` ``[T, B]``, ``NAME_collect`` collects ``T`` steps of
    it with ``policy_fn`` through a Collector."""
    from pgrad.rl.collection import rollout

    fns, closers = {}, []
    for name, make in backends.items():
        envs = make()
        envs.reset(seed=0)
        col = rollout.Collector(envs, env_id)
        col.reset(seed=0)
        closers.append(col)

        def raw(envs=envs):
            for a in actions:
                envs.step(a)

        fns[f"{name}_raw"] = raw
        fns[f"{name}_collect"] = lambda col=col: col.collect(policy_fn, len(actions))
    try:
        return interleaved(fns, max(5, repeats // 6), warmup=1)
    finally:
        for c in closers:
            c.close()
