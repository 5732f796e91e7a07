"""The asynchronous actor-learner on Ray: IMPALA's actors stream trajectories, no barrier.

:func:`distribute` gives an :class:`agents.learners.actor_learner.IMPALA` (or APPO) agent an
:class:`AsyncSource` of N :class:`TrajectoryActor` Ray actors. Each actor owns ``num_envs``
envs (actor ``k``'s sub-env ``i`` is seeded ``seed + k * num_envs + i``) and a copy of the
agent whose numpy mirror acts. The learner keeps up to ``queue_size`` collect requests in flight
(at least one per actor, spread evenly); whichever trajectory is ready first is learned from,
and its actor is at once asked for the next one with the newest broadcast weights -- so actors
act while the learner updates, and a slow learner throttles the actors (nothing is collected
that was not asked for: the queue is bounded by ``queue_size`` trajectories). Each trajectory
carries its behaviour log-probs and the weight version that acted; the agent's V-trace update
corrects for the lag and reports it as ``policy_lag``.

Normalisers (``normalize_obs`` / ``normalize_reward``), as RLlib's ``MeanStdFilter``: the
broadcast carries the learner's running statistics with the weights; an actor normalises with
them, updated by its own observations (rewards) as it collects, and sends the moments of what it
counted with the trajectory; the learner merges those moments into its statistics (Chan et al.)
when it learns from the trajectory. So the learner's statistics are those of every observation
(discounted return) of every trajectory learned from, each counted once, whatever the order of
arrival; an actor acting on a stale broadcast normalises with slightly older statistics, as it
acts with slightly older weights. A reward normaliser's per-env return accumulators stay on the
actor that owns the envs.

Checkpoints and restores: the learner's state (weights, optimizer, counters, statistics) is what
a checkpoint holds; trajectories in flight are not part of it. They are **dropped**: after a
restore (``--resume`` starts new actors; a restore into a running agent marks every request then
in flight stale, and a stale trajectory is thrown away when it arrives and its actor asked again
with the restored weights), so ``episodes.csv`` holds every episode of every trajectory learned
from once: the rows up to the checkpoint's env step are kept, later ones are dropped by the
resume and written anew. An episode running on an actor at the checkpoint is not counted.

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

from pgrad_app.distributed.session import start_with, wait_for_cpus, worker_runtime_env
from pgrad_app.distributed.workers import (
    MAX_RESTARTS,
    RESTART_TIMEOUT_S,
    WorkerError,
    _Delta,
    env_id_of,
    raised_inside,
)
from pgrad_app.errors import UserError


def _reconstructed() -> bool:
    """True in a Ray actor that Ray restarted; False in a first start or outside Ray."""
    import ray

    return ray.is_initialized() and ray.get_runtime_context().was_current_actor_reconstructed


def merge_statistics(agent, stats: dict) -> None:
    """Merges an actor's ``{"obs_norm" | "reward_norm": (mean, var, count)}`` batch moments into
    the learner's running statistics (``agent.obs_norm.rms`` / ``agent.reward_norm.rms``, which
    the next update stores)."""
    for key, norm in (("obs_norm", agent.obs_norm), ("reward_norm", agent.reward_norm)):
        if norm is not None and key in stats and stats[key][2] > 0:
            norm.rms.update_from_moments(*stats[key])


class TrajectoryActor:
    """A Ray actor: ``cfg.num_envs`` envs and a numpy copy of the policy; collects on request.

    (A plain class: the tests also run it in this process.)
    """

    def __init__(self, agent_cls: type, cfg: Any, env_spec: Any, seed: int, index: int):
        from pgrad_app.quiet import silence

        silence()  # this actor's process: before TensorFlow

        self.index, self.seed = index, int(seed)
        self.agent = agent_cls(dataclasses.replace(cfg, lag=0), env_id=env_id_of(env_spec),
                               seed=seed)
        self.collector = self.agent.collector
        self.collector.reset(seed=self.seed + index * cfg.num_envs)
        self.count = 0
        self.deltas = {key: _Delta(norm.rms) for key, norm in
                       (("obs_norm", self.agent.obs_norm), ("reward_norm", self.agent.reward_norm))
                       if norm is not None}
        self.restarted = _reconstructed()

    def ready(self) -> bool:
        return True

    def collect(self, state: dict, version: int) -> dict:
        """One trajectory of ``n_steps`` vector steps acted with ``state["weights"]``.

        Returns ``{"traj", "episodes": [(env steps into it, return, length)], "successes":
        ``info["is_success"]`` (1.0 / 0.0) of the episodes that ended and reported it, "steps",
        "version", "stats": {name: batch (mean, var, count) of what it counted}, "collect_s",
        "restarted"}``.
        """
        agent = self.agent
        agent.mirror.load_flat(state["weights"])
        for key, delta in self.deltas.items():  # normalise with the broadcast statistics
            mean, var, count = state[key]
            delta.rms.mean, delta.rms.var, delta.rms.count = np.copy(mean), np.copy(var), count
            delta.start()
        policy_fn = agent.acting_fn(np.random.default_rng([self.seed, self.index, self.count]))
        self.count += 1
        self.collector.env_steps = 0
        began = time.perf_counter()
        traj, eps = self.collector.collect(policy_fn, agent.cfg.n_steps)
        restarted, self.restarted = self.restarted, False
        return {"traj": traj, "episodes": eps, "successes": self.collector.take_successes(),
                "steps": self.collector.env_steps,
                "version": int(version), "collect_s": time.perf_counter() - began,
                "stats": {k: d.state() for k, d in self.deltas.items()},
                "restarted": restarted}

    def close(self) -> None:
        self.agent.close()


class AsyncSource:
    """The source of :class:`agents.learners.actor_learner.IMPALA` over :class:`TrajectoryActor` Ray
    actors.

    Args:
      agent: the learner (its own envs are not stepped).
      workers: number of actors.
      env_spec: what each actor builds its envs from (default ``agent.env_id``).
      max_restarts: restarts per actor before a death stops the run.
      actors: the first ``workers`` of these :class:`TrajectoryActor` handles instead of new
        actors (built for the same agent class, config and env; sides of a benchmark whose
        rounds never overlap share them, saving start-ups).
    """

    def __init__(self, agent, workers: int, env_spec: Any = None,
                 max_restarts: int = MAX_RESTARTS, actors: list | None = None):
        import ray

        from agents.learners.actor_learner import Batch

        self._ray, self._batch, self.agent = ray, Batch, agent
        self.max_restarts = int(max_restarts)
        self.per_actor = max(1, int(agent.cfg.queue_size) // workers)
        if actors is not None:  # another source's actors (scripts/bench.py shares them)
            self.actors = list(actors[:workers])
        else:
            cls = ray.remote(TrajectoryActor).options(
                num_cpus=1, max_restarts=self.max_restarts, max_task_retries=0,
                runtime_env=worker_runtime_env())
            spec = agent.env_id if env_spec is None else env_spec
            self.actors = [cls.remote(type(agent), agent.cfg, spec, agent.seed, k)
                           for k in range(workers)]
        for k, a in enumerate(self.actors):
            self._get(k, a.ready.remote())  # constructor errors show here
        self.pending: dict = {}  # object ref -> (actor index, generation)
        self.state_ref: Any = None  # the object-store copy of the last broadcast
        self.version = 0
        self.generation = 0  # + 1 at every reset: what was asked for before is stale
        #: Trajectories thrown away because a reset (a restore) made them stale.
        self.dropped = 0
        #: Seconds the learner waited for a trajectory, summed (0 when actors keep ahead).
        self.wait_s = 0.0
        #: Trajectories handed to the learner, and the actors' seconds collecting them.
        self.learned, self.collect_s = 0, 0.0

    def reset(self, version: int, state: dict) -> None:
        """New weights for every request from here on (a start or a restore); requests in
        flight become stale (acted before the restore: dropped when they arrive)."""
        self.broadcast(version, state)
        self.generation += 1
        for k in range(len(self.actors)):
            while sum(1 for j, g in self.pending.values()
                      if j == k and g == self.generation) < self.per_actor:
                self._submit(k)

    def broadcast(self, version: int, state: dict) -> None:
        self.state_ref, self.version = self._ray.put(state), int(version)

    def _submit(self, k: int) -> None:
        self.pending[self.actors[k].collect.remote(self.state_ref, self.version)] = \
            (k, self.generation)

    def next(self, updates: int):
        """The first trajectory to arrive; its actor is asked for the next one at once."""
        del updates
        ray = self._ray
        while True:
            began = time.perf_counter()
            ready, _ = ray.wait(list(self.pending), num_returns=1)
            self.wait_s += time.perf_counter() - began
            k, generation = self.pending.pop(ready[0])
            result = self._get(k, ready[0])
            if generation != self.generation:  # acted before a restore: not counted
                self.dropped += result is not None
                continue  # its actor still has its share of current requests
            self._submit(k)
            if result is not None:
                break
        if result["restarted"]:
            print(f"warning: actor {k + 1} of {len(self.actors)} died and was restarted with its "
                  "envs re-seeded; the run goes on.", file=sys.stderr, flush=True)
        merge_statistics(self.agent, result["stats"])
        # the learner's own collector is never stepped: it carries the actor's successes to the
        # training loop, which takes them from there as from an in-process run
        self.agent.collector.successes.extend(result["successes"])
        self.learned += 1
        self.collect_s += result["collect_s"]
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
      UserError: not an asynchronous agent, fewer free CPUs than workers, or adversarial acting
        (it attacks the learner's network at every env step).
    """
    if not hasattr(agent, "use_source"):
        raise UserError(f"the asynchronous learner needs --agent impala or appo; got "
                        f"{agent.name!r}.")
    cfg = agent.cfg
    if workers < 1:
        raise UserError(f"--workers must be >= 1; got {workers}.")
    if cfg.adversarial_epsilon > 0:
        raise UserError("adversarial_epsilon attacks the learner's network at every env step; "
                        "it does not run with --workers.")
    wait_for_cpus(workers)
    agent.use_source(AsyncSource(agent, workers, env_spec, max_restarts))
    return agent


def start(agent, workers: int, address: str | None = None, env_spec: Any = None,
          num_cpus: int | None = None) -> contextlib.ExitStack:
    """:func:`pgrad_app.distributed.session.start_with` of :func:`distribute`."""
    return start_with(distribute, agent, workers, address, env_spec, num_cpus)
