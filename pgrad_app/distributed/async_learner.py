"""The asynchronous actor-learner on Ray: IMPALA's actors stream trajectories, no barrier.

:func:`distribute` gives an :class:`agents.impala.IMPALA` (or APPO) agent an
:class:`AsyncSource` of N :class:`TrajectoryActor` Ray actors. Each actor owns ``num_envs``
envs (actor ``k``'s sub-env ``i`` is seeded ``seed + k * num_envs + i``) and a copy of the
agent whose numpy mirror acts. The learner keeps up to ``queue_size`` collect requests in flight
(at least one per actor, spread evenly); whichever trajectory is ready first is learned from,
and its actor is at once asked for the next one with the newest broadcast weights -- so actors
act while the learner updates, and a slow learner throttles the actors (nothing is collected
that was not asked for: the queue is bounded by ``queue_size`` trajectories). Each trajectory
carries its behaviour log-probs and the weight version that acted; the agent's V-trace update
corrects for the lag and reports it as ``policy_lag``.

Sampling: actor ``k``'s ``j``-th trajectory draws from ``default_rng([seed, k, j])``. Unlike the
synchronous workers (:mod:`pgrad_app.distributed.workers`) the order in which trajectories
arrive depends on timing, so runs are not bit-for-bit repeatable.

Faults: an actor that dies is restarted by Ray (``max_restarts``) from its seeds and asked
again (one warning line); once its restarts are used up the step raises
:class:`pgrad_app.distributed.workers.WorkerError`. An env error inside an actor is raised as
itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from typing import Any

import numpy as np

from pgrad_app.distributed.session import start_with, worker_runtime_env
from pgrad_app.distributed.workers import (
    MAX_RESTARTS,
    RESTART_TIMEOUT_S,
    WorkerError,
    env_id_of,
    raised_inside,
)
from pgrad_app.errors import UserError


class TrajectoryActor:
    """A Ray actor: ``cfg.num_envs`` envs and a numpy copy of the policy; collects on request."""

    def __init__(self, agent_cls: type, cfg: Any, env_spec: Any, seed: int, index: int):
        from pgrad_app.quiet import silence

        silence()  # this actor's process: before TensorFlow

        self.index, self.seed = index, int(seed)
        self.agent = agent_cls(dataclasses.replace(cfg, lag=0), env_id=env_id_of(env_spec),
                               seed=seed)
        self.collector = self.agent.collector
        self.collector.reset(seed=self.seed + index * cfg.num_envs)
        self.count = 0
        import ray

        self.restarted = ray.get_runtime_context().was_current_actor_reconstructed

    def ready(self) -> bool:
        return True

    def collect(self, state: dict, version: int) -> dict:
        """One trajectory of ``n_steps`` vector steps acted with ``state["weights"]``.

        Returns ``{"traj", "episodes": [(env steps into it, return, length)], "steps",
        "version", "collect_s", "restarted"}``.
        """
        agent = self.agent
        agent.mirror.load_flat(state["weights"])
        policy_fn = agent.acting_fn(np.random.default_rng([self.seed, self.index, self.count]))
        self.count += 1
        self.collector.env_steps = 0
        began = time.perf_counter()
        traj, eps = self.collector.collect(policy_fn, agent.cfg.n_steps)
        restarted, self.restarted = self.restarted, False
        return {"traj": traj, "episodes": eps, "steps": self.collector.env_steps,
                "version": int(version), "collect_s": time.perf_counter() - began,
                "restarted": restarted}

    def close(self) -> None:
        self.agent.close()


class AsyncSource:
    """The source of :class:`agents.impala.IMPALA` over :class:`TrajectoryActor` Ray actors.

    Args:
      agent: the learner (its own envs are not stepped).
      workers: number of actors.
      env_spec: what each actor builds its envs from (default ``agent.env_id``).
      max_restarts: restarts per actor before a death stops the run.
    """

    def __init__(self, agent, workers: int, env_spec: Any = None,
                 max_restarts: int = MAX_RESTARTS):
        import ray

        from agents.impala import Batch

        self._ray, self._batch, self.agent = ray, Batch, agent
        self.max_restarts = int(max_restarts)
        self.per_actor = max(1, int(agent.cfg.queue_size) // workers)
        cls = ray.remote(TrajectoryActor).options(
            num_cpus=1, max_restarts=self.max_restarts, max_task_retries=0,
            runtime_env=worker_runtime_env())
        spec = agent.env_id if env_spec is None else env_spec
        self.actors = [cls.remote(type(agent), agent.cfg, spec, agent.seed, k)
                       for k in range(workers)]
        for k, a in enumerate(self.actors):
            self._get(k, a.ready.remote())  # constructor errors show here
        self.pending: dict = {}  # object ref -> actor index
        self.state_ref, self.version = None, 0
        #: Seconds the learner waited for a trajectory, summed (0 when actors keep ahead).
        self.wait_s = 0.0

    def reset(self, version: int, state: dict) -> None:
        """New weights for every request from here on (a start or a restore); requests in
        flight are kept (their version says what acted)."""
        self.broadcast(version, state)
        for k in range(len(self.actors)):
            while sum(1 for j in self.pending.values() if j == k) < self.per_actor:
                self._submit(k)

    def broadcast(self, version: int, state: dict) -> None:
        self.state_ref, self.version = self._ray.put(state), int(version)

    def _submit(self, k: int) -> None:
        self.pending[self.actors[k].collect.remote(self.state_ref, self.version)] = k

    def next(self, updates: int):
        """The first trajectory to arrive; its actor is asked for the next one at once."""
        del updates
        ray = self._ray
        while True:
            began = time.perf_counter()
            ready, _ = ray.wait(list(self.pending), num_returns=1)
            self.wait_s += time.perf_counter() - began
            k = self.pending.pop(ready[0])
            result = self._get(k, ready[0])
            self._submit(k)
            if result is not None:
                break
        if result["restarted"]:
            print(f"warning: actor {k + 1} of {len(self.actors)} died and was restarted with its "
                  "envs re-seeded; the run goes on.", file=sys.stderr, flush=True)
        return self._batch(result["traj"], result["episodes"], result["steps"],
                           result["version"], k)

    def _get(self, k: int, ref):
        """``ray.get``; an error inside the actor is raised as itself; a dead actor is waited
        for (Ray restarts it) and None returned, so the caller asks it again."""
        ray = self._ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as err:  # raised by our code or the env
            raise raised_inside(err) from None
        except ray.exceptions.RayActorError as err:
            died = err
        deadline = time.monotonic() + RESTART_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                ray.get(self.actors[k].ready.remote())
                return None
            except ray.exceptions.ActorUnavailableError:  # restarting
                time.sleep(0.2)
            except ray.exceptions.RayError:  # dead for good
                break
        raise WorkerError(f"actor {k + 1} of {len(self.actors)} died ({type(died).__name__}) "
                          f"and could not be restarted (max_restarts={self.max_restarts})") \
            from None

    def close(self) -> None:
        for actor in getattr(self, "actors", []):
            with contextlib.suppress(Exception):
                self._ray.kill(actor, no_restart=True)
        self.actors, self.pending = [], {}


def distribute(agent, workers: int, env_spec: Any = None,
               max_restarts: int = MAX_RESTARTS) -> Any:
    """Makes the IMPALA/APPO ``agent`` learn from ``workers`` Ray actors (needs a Ray
    connection, e.g. :func:`ray_session`); returns the agent. ``agent.close()`` stops them.

    Raises:
      UserError: not an asynchronous agent, fewer free CPUs than workers, or an option the
        actors cannot follow (normalisers, adversarial acting).
    """
    if not hasattr(agent, "use_source"):
        raise UserError(f"the asynchronous learner needs --agent impala or appo; got "
                        f"{agent.name!r}.")
    cfg = agent.cfg
    if workers < 1:
        raise UserError(f"--workers must be >= 1; got {workers}.")
    if cfg.normalize_obs or cfg.normalize_reward:
        raise UserError("impala with --workers does not merge the actors' normaliser statistics; "
                        "turn normalize_obs and normalize_reward off.")
    if cfg.adversarial_epsilon > 0:
        raise UserError("adversarial_epsilon attacks the learner's network at every env step; "
                        "it does not run with --workers.")
    import ray

    deadline = time.monotonic() + 10.0  # actors just stopped give their CPUs back soon
    while (free := ray.available_resources().get("CPU", 0.0)) < workers \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    if free < workers:
        raise UserError(f"--workers {workers} needs {workers} free CPUs in the Ray cluster; it "
                        f"has {free:g} (of {ray.cluster_resources().get('CPU', 0.0):g}).")
    agent.use_source(AsyncSource(agent, workers, env_spec, max_restarts))
    return agent


def start(agent, workers: int, address: str | None = None, env_spec: Any = None,
          num_cpus: int | None = None) -> contextlib.ExitStack:
    """:func:`pgrad_app.distributed.session.start_with` of :func:`distribute`."""
    return start_with(distribute, agent, workers, address, env_spec, num_cpus)
