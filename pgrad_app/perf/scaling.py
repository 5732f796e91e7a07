"""The Ray scaling figure: A2C on 1 and 2 Ray rollout workers against in-process collection."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from pgrad_app.perf.common import figure, interleaved, rounds


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
    from pgrad_app.distributed import session, workers

    slow = "pgrad_app.perf.slow_env:SlowCartPole-v1"
    cfg = {"num_envs": num_envs, "n_steps": n_steps}
    per_update = num_envs * n_steps
    details: dict = {"num_envs": num_envs, "n_steps": n_steps, "env_steps_per_update": per_update,
                     "agent": "a2c (its defaults, num_envs and n_steps as given)",
                     "load_avg_1m_before": round(os.getloadavg()[0], 2)}
    # Three actors exist at once (the 1- and the 2-worker agent) but at most two collect at a
    # time (the rounds interleave): one logical CPU more than the machine has.
    with session.ray_session(num_cpus=max(3, (os.cpu_count() or 2) + 1), what="ray_scaling"):
        for label, spec in (("slow_1ms", slow), ("sleep_1ms", slow.replace("Slow", "Sleepy")),
                            ("cartpole", "CartPole-v1")):
            env_id = workers.env_id_of(spec)
            sides = {}
            for n in (0, 1, 2):  # not "workers": that is the module
                agent = agents.make("a2c", env_id, seed=0, **cfg)
                if n:
                    workers.distribute(agent, n, env_spec=spec)
                sides[f"{n}_workers" if n else "in_process"] = agent
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
