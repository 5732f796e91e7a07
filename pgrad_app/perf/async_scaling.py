"""The asynchronous actor-learner figure: IMPALA on 1, 2 and 4 Ray actors against synchronous A2C
on as many rollout workers, on CartPole-v1 and on a slow env (1 ms busy-wait per step)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from pgrad_app.perf.common import figure, interleaved, rounds

SLOW = "pgrad_app.perf.slow_env:SlowCartPole-v1"
WORKERS = (1, 2, 4)
#: Requests each actor keeps in flight.
PER_ACTOR = 2
#: (label, env spec, updates per timed round): a slow-env update collects 256 ms of env steps.
#: Multiples of every side's queue (PER_ACTOR x W): a round takes the requests finished in the
#: previous round's drain, asks each actor for as many new ones and drains them, so the actors
#: are evenly loaded (a round of 3 updates on 2 actors would wait for one actor's 2 in a row).
ENVS = (("cartpole", "CartPole-v1", 16), ("slow_1ms", SLOW, 8))


class _AsyncRound:
    """``updates`` steps of an IMPALA agent on Ray actors, then a wait for every trajectory still
    in flight: a round starts and ends with the same requests finished, so it is charged the
    collection of exactly the ``updates`` trajectories it learned from (none done for free while
    the other sides' rounds run). Keeps the learner's time waiting (for a trajectory, and for
    the ones in flight at the end) to split the round into learner work and waiting."""

    def __init__(self, agent, updates: int):
        self.agent, self.updates = agent, updates
        self.drain_s = 0.0

    def __call__(self) -> None:
        import ray

        for _ in range(self.updates):
            self.agent.step()
        began = time.perf_counter()
        pending = list(self.agent.source.pending)
        ray.wait(pending, num_returns=len(pending))
        self.drain_s += time.perf_counter() - began


def _sides(spec: str, cfg: dict, queue_per_actor: int) -> dict:
    """``{side: agent}``: A2C in-process, A2C on W synchronous workers (splitting ``num_envs``)
    and IMPALA on W asynchronous actors (``num_envs`` each), for W in :data:`WORKERS`. The
    IMPALA sides share the largest side's actors (rounds never overlap, and each ends with no
    request in flight): 4 actor start-ups instead of 7, minutes on a loaded 2-core machine."""
    import agents
    from pgrad_app.distributed import async_learner, workers

    env_id = workers.env_id_of(spec)  # imports the module registering the slow env
    sides = {"a2c_in_process": agents.make("a2c", env_id, seed=0, **cfg)}
    for w in WORKERS:
        sides[f"a2c_{w}_sync"] = workers.distribute(agents.make("a2c", env_id, seed=0, **cfg), w,
                                                    env_spec=spec)
    most = max(WORKERS)
    biggest = async_learner.distribute(
        agents.make("impala", env_id, seed=0, queue_size=queue_per_actor * most, **cfg), most,
        env_spec=spec)
    for w in WORKERS:
        agent: Any = biggest
        if w != most:
            agent = agents.make("impala", env_id, seed=0, queue_size=queue_per_actor * w, **cfg)
            agent.use_source(async_learner.AsyncSource(agent, w, actors=biggest.source.actors))
        sides[f"impala_{w}_async"] = agent
    return sides


def _one_env(spec: str, updates: int, repeats: int, cfg: dict, per_update: int) -> dict:
    """Env steps/s of every side (rounds interleaved), and where the asynchronous learner's
    time goes: learner work per update (its time not waiting for trajectories), the actors'
    collection time per env step, the fraction of the round the learner waited, the policy lag."""
    sides = _sides(spec, cfg, queue_per_actor=PER_ACTOR)
    try:
        fns: dict[str, Callable[[], object]] = {k: rounds(a.step, updates)
                                                for k, a in sides.items()}
        async_fns = {k: _AsyncRound(a, updates) for k, a in sides.items() if "async" in k}
        fns.update(async_fns)
        for fn in fns.values():  # a warm-up round each, then count from here
            fn()
        marks = {k: (sides[k].source.wait_s, sides[k].source.collect_s, sides[k].source.learned)
                 for k in async_fns}
        for fn in async_fns.values():
            fn.drain_s = 0.0
        times = interleaved(fns, repeats, warmup=0)
        out: dict = {"env_steps_per_s": {k: round(per_update * updates / float(np.median(v)))
                                         for k, v in times.items()}}
        learner = {}
        for k, fn in async_fns.items():
            source = sides[k].source
            wait0, collect0, learned0 = marks[k]
            total = float(np.sum(times[k]))
            waited = source.wait_s - wait0 + fn.drain_s
            n = repeats * updates
            lags = [sides[k].step()["metrics"]["policy_lag"] for _ in range(updates)]
            learner[k] = {
                "learner_ms_per_update": round(1e3 * (total - waited) / n, 2),
                "learner_wait_fraction": round(waited / total, 3),
                "actor_collect_us_per_env_step": round(
                    1e6 * (source.collect_s - collect0) / max(1, source.learned - learned0)
                    / per_update, 2),
                "policy_lag_mean": round(float(np.mean(lags)), 2)}
        out["async_learner"] = learner
        return out
    finally:
        for agent in sides.values():
            agent.close()


def async_scaling(repeats: int, num_envs: int = 8, n_steps: int = 32) -> dict:
    """Env steps/s of ``agent.step()``: A2C in-process, A2C on 1/2/4 synchronous Ray rollout
    workers, IMPALA on 1/2/4 asynchronous Ray actors, on CartPole-v1 and SlowCartPole-v1.

    Every side learns from ``num_envs x n_steps`` env steps per update (the IMPALA actors run
    ``num_envs`` envs each and each keeps :data:`PER_ACTOR` requests in flight; the synchronous
    workers split ``num_envs``), with the learner busy updating as on a real run. The value is
    IMPALA on 2 actors over A2C on 2 synchronous workers on CartPole-v1 (the issue's goal:
    >= 1.5 on this 2-core machine); the details hold every side, the same ratios at 1 and 4
    workers and on the slow env, and the costs docs/distributed.md's model takes. The sides of
    an env exist at once and their rounds interleave, so load shared by all cancels; the load
    average is recorded before and after.
    """
    try:
        import ray  # noqa: F401
    except ImportError:
        return figure("async_scaling", 0.0, ">= 1.5", False, skipped="ray is not installed "
                      "(pip install 'pgrad[ray]')")
    from pgrad_app.distributed import session

    cfg = {"num_envs": num_envs, "n_steps": n_steps}
    per_update = num_envs * n_steps
    details: dict = {"num_envs": num_envs, "n_steps": n_steps,
                     "env_steps_per_update": per_update, "cpus": os.cpu_count(),
                     "load_avg_1m_before": round(os.getloadavg()[0], 2)}
    # 1 + 2 + 4 synchronous workers and 4 actors exist at once, at most 4 (one side)
    # collecting at a time.
    with session.ray_session(num_cpus=sum(WORKERS) + max(WORKERS), what="async_scaling"):
        for label, spec, updates in ENVS:
            found = _one_env(spec, updates, max(3, repeats // 10), cfg, per_update)
            sps = found["env_steps_per_s"]
            found["async_over_sync"] = {
                str(w): round(sps[f"impala_{w}_async"] / sps[f"a2c_{w}_sync"], 3)
                for w in WORKERS}
            found["updates_per_round"] = updates
            details[label] = found
    details["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    value = details["cartpole"]["async_over_sync"]["2"]
    return figure("async_scaling", value, ">= 1.5", value >= 1.5, **details)
