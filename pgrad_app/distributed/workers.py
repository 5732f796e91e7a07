"""Rollout workers on Ray: one learner, its vector envs spread over actors, the same algorithm.

:func:`distribute` replaces an agent's in-process collector by a :class:`RemoteCollector` of N
Ray actors (:class:`RolloutWorker`). Worker ``k`` owns envs ``[start_k, start_k + n_k)`` of the
agent's ``num_envs`` (split as evenly as they go, in order), seeded as in one process (sub-env
``i`` gets ``seed + i``), and a copy of the agent whose numpy mirror acts. Each ``agent.step()``
is synchronous:

1. the learner puts ``agent.acting_state()`` (flat actor weights ``[P]``, the sampler key,
   normaliser statistics) into the object store once; every worker collects its share of the
   rollout with it (``n_steps`` vector steps, or whole episodes of ``batch_steps * n_k / B``
   steps);
2. the learner concatenates the ``[T, n_k, ...]`` pieces along the env axis in env order
   (``[T, B, ...]``, shorter whole-episode pieces padded and masked), orders the finished
   episodes by vector step and env, merges the workers' normaliser statistics, and updates.

A recurrent policy's state travels with the rollout: ``acting_state()`` carries the learner's
``rollout_state`` ``[B, S]``, each worker acts from its rows (its envs' states, reset where an
episode starts) and returns them after the rollout with its envs' ``episode_start``; the
learner concatenates them in env order, so the next rollout (and the checkpoint) starts from
them, as in one process.

Sampling: worker 0 draws from the generator the in-process step would use, worker ``k > 0`` from
``default_rng([*key, k])``. Running statistics: each worker normalises with the learner's
statistics at the start of the rollout updated by its own observations (per vector step, as in
one process); the learner then takes worker 0's statistics and merges in each other worker's
batch moments (Chan et al.), so after every rollout they are the statistics of every
observation (return) seen. With one worker all of this is the in-process run exactly (same
episodes, same weights); with N workers a fixed seed gives the same run every time.

Faults: a worker actor that dies is restarted (``max_restarts``) with its envs re-seeded and the
interrupted collection retried (one warning line); once its restarts are used up the step raises
:class:`WorkerError` (a ``RunError``: the trainer stops with one line, the last checkpoint as it
was). An env error inside a worker is raised as the same error in-process collection raises.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
import time
from typing import Any

import numpy as np

from pgrad.rl.collection.rollout import Trajectory
from pgrad_app.distributed.merge import merge_stats, merge_trajectories
from pgrad_app.distributed.session import start_with, wait_for_cpus, worker_runtime_env
from pgrad_app.errors import RunError, UserError, one_line

MAX_RESTARTS = 3
RESTART_TIMEOUT_S = 300.0  # a restarted worker imports TensorFlow and builds its envs


def raised_inside(err) -> BaseException:
    """What a Ray task error wraps: the exception our code (or the env) raised in the actor,
    else the error as one line."""
    cause = getattr(err, "cause", None)
    return cause if isinstance(cause, BaseException) else RunError(one_line(err))


class WorkerError(RunError):
    """A rollout worker died and could not be restarted (the message names it)."""


def split_envs(num_envs: int, workers: int) -> list[tuple[int, int]]:
    """``[(start, count)]`` per worker: ``num_envs`` envs in order, counts differing by <= 1."""
    base, extra = divmod(num_envs, workers)
    out, start = [], 0
    for k in range(workers):
        count = base + (1 if k < extra else 0)
        out.append((start, count))
        start += count
    return out


def env_id_of(spec: Any) -> Any:
    """A ``module:EnvId`` spec -> the bare id, after importing the module (in a worker)."""
    from pgrad.rl.envs.recipe import EnvRecipe

    if isinstance(spec, EnvRecipe) and isinstance(spec.env, str) and ":" in spec.env:
        return dataclasses.replace(spec, env=env_id_of(spec.env))
    if isinstance(spec, str) and ":" in spec:
        from pgrad_app.config.plugins import resolve_env

        return resolve_env(spec)
    return spec


class _Delta:
    """Mean/var/count of the batches a running statistic saw since :meth:`start`."""

    def __init__(self, rms):
        self.rms, self._update = rms, rms.update
        self.moments = None
        rms.update = self._tee  # the collector updates the statistic; we see each batch too

    def start(self) -> None:
        self.moments = type(self.rms)(np.shape(self.rms.mean))
        self.moments.count = 0.0

    def _tee(self, x) -> None:
        self._update(x)
        if self.moments is not None:
            self.moments.update(x)

    def state(self) -> tuple:
        m = self.moments
        return m.mean, m.var, m.count


class RolloutWorker:
    """A Ray actor: ``count`` of the agent's envs (``start`` on) and a numpy copy of its policy.

    Args:
      agent_cls / cfg / seed: as the learner's agent (``cfg.num_envs`` becomes ``count``).
      env_spec: a registered id, ``module:EnvId`` (imported here) or an env factory.
      index: this worker's number (0-based), start / count: its envs.
    """

    def __init__(self, agent_cls: type, cfg: Any, env_spec: Any, seed: int, index: int,
                 start: int, count: int):
        from pgrad_app.quiet import silence

        silence()  # this actor's process: before TensorFlow

        self.index, self.start, self.count = index, start, count
        self.agent = agent_cls(dataclasses.replace(cfg, num_envs=count), env_id=env_id_of(env_spec),
                               seed=seed)
        self.collector = self.agent.collector
        if start:  # sub-env i of the run gets seed + i, as in one process
            self.collector.reset(seed=seed + start)
        self.deltas = {key: _Delta(norm.rms) for key, norm in
                       (("obs_norm", self.agent.obs_norm), ("reward_norm", self.agent.reward_norm))
                       if norm is not None}
        import ray

        self.restarted = ray.get_runtime_context().was_current_actor_reconstructed

    def ready(self) -> bool:
        return True

    def collect(self, state: dict, num_steps: int, episodes: bool) -> dict:
        """One rollout of this worker's envs with the learner's ``state`` (``acting_state()``).

        Returns ``{"traj": Trajectory [T, n, ...], "episodes": [(vector step, return, length)],
        "successes": ``info["is_success"]`` (1.0 / 0.0) of the episodes that ended and reported
        it, oldest first, "steps": env steps taken, "stats": {name: (final (mean, var, count),
        batch moments)}, "collect_s": seconds collecting, "restarted": bool}``; for a recurrent
        policy also ``"rollout_state"`` ``[n, S]`` and ``"episode_start"`` ``[n]``
        after the rollout.
        """
        agent = self.agent
        agent.mirror.load_flat(state["weights"])
        if state.get("rollout_state") is not None:  # a recurrent policy: its envs' state rows
            agent.rollout_state = state["rollout_state"][self.start:self.start + self.count]
        for key, delta in self.deltas.items():
            mean, var, count = state[key]
            delta.rms.mean, delta.rms.var, delta.rms.count = mean.copy(), np.copy(var), count
            delta.start()
        key = list(state["sampler_key"]) + ([self.index] if self.index else [])
        policy_fn = agent.acting_fn(np.random.default_rng(key))
        start = self.collector.env_steps = int(state.get("env_steps", 0))  # errors: run's step
        began = time.perf_counter()
        if episodes:
            traj, eps = self.collector.collect_episodes(policy_fn, num_steps)
        else:
            traj, eps = self.collector.collect(policy_fn, num_steps)
        stats = {k: ((d.rms.mean, d.rms.var, d.rms.count), d.state())
                 for k, d in self.deltas.items()}
        restarted, self.restarted = self.restarted, False
        carried = {}
        if state.get("rollout_state") is not None:  # the state after the rollout, and where
            carried = {"rollout_state": agent.rollout_state,  # the next observation starts
                       "episode_start": self.collector.episode_start.copy()}
        return {"traj": traj, "steps": self.collector.env_steps - start, "stats": stats,
                **carried,
                "collect_s": time.perf_counter() - began,
                "episodes": [((step - start) // self.count - 1, r, n) for step, r, n in eps],
                "successes": self.collector.take_successes(),
                "restarted": restarted}

    def close(self) -> None:
        self.agent.close()


class RemoteCollector:
    """The :class:`pgrad.rl.collection.rollout.Collector` interface over :class:`RolloutWorker`
    actors.

    Args:
      agent: the learner's agent (its own envs stay open for ``preprocess`` and are not
        stepped).
      workers: number of actors.
      env_spec: what each worker builds its envs from (default ``agent.env_id``; a
        ``module:EnvId`` spec makes workers import the module that registers the id).
      max_restarts: restarts per actor before a death stops the run.
    """

    def __init__(self, agent, workers: int, env_spec: Any = None,
                 max_restarts: int = MAX_RESTARTS):
        import ray

        self._ray, self.agent, self.local = ray, agent, agent.collector
        self.name, self.num_envs = self.local.name, self.local.num_envs
        self.preprocess, self.obs_dim = self.local.preprocess, self.local.obs_dim
        self.env_steps = self.local.env_steps
        #: ``[B]`` bool: whether each env's next observation starts an episode (as
        #: ``Collector.episode_start``; the workers' after each rollout).
        self.episode_start = np.ones(self.num_envs, bool)
        self.shares = split_envs(self.num_envs, workers)
        self.max_restarts = int(max_restarts)
        #: ``info["is_success"]`` the workers' episodes reported, as ``Collector.successes``
        #: (worker 0's of a rollout first, then worker 1's...: the order within one rollout
        #: differs from one process's with more than one worker, the set does not).
        self.successes: list[float] = []
        #: The last rollout: its wall time on the learner (weights out, trajectories in) and
        #: each worker's time collecting; the difference is the cost of distributing it.
        self.timing: dict[str, Any] = {}
        cls = ray.remote(RolloutWorker).options(
            num_cpus=1, max_restarts=self.max_restarts, max_task_retries=0,
            runtime_env=worker_runtime_env())
        if env_spec is None and getattr(agent, "env_unbuildable", None):
            raise ValueError(f"Ray workers build their envs in other processes, and "
                             f"{agent.env_unbuildable}.")
        spec = agent.env_id if env_spec is None else env_spec
        self.actors = [cls.remote(type(agent), agent.cfg, spec, agent.seed, k, start, count)
                       for k, (start, count) in enumerate(self.shares)]
        self._calls = [a.ready.remote for a in self.actors]
        self._get([call() for call in self._calls])  # constructor errors show here

    def _get(self, refs: list) -> list:
        """``ray.get`` of one call per actor; an error raised inside a worker is raised again
        as itself; a dead worker is waited for (Ray restarts it) and its call made again."""
        return [self._get_one(k, ref) for k, ref in enumerate(refs)]

    def _get_one(self, k: int, ref):
        ray = self._ray
        for _ in range(self.max_restarts + 1):
            try:
                return ray.get(ref)
            except ray.exceptions.RayTaskError as err:  # raised by our code or the env
                raise raised_inside(err) from None
            except ray.exceptions.RayActorError as err:
                died = err
            if not self._restarted(k):
                break
            ref = self._calls[k]()  # the same call on the restarted actor
        raise WorkerError(f"rollout worker {k + 1} of {len(self.actors)} died "
                          f"({type(died).__name__}) and could not be restarted "
                          f"(max_restarts={self.max_restarts})") from None

    def _restarted(self, k: int) -> bool:
        """Waits until Ray has restarted actor ``k``; False once its restarts are used up."""
        ray = self._ray
        deadline = time.monotonic() + RESTART_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                return ray.get(self.actors[k].ready.remote())
            except ray.exceptions.ActorUnavailableError:  # restarting
                time.sleep(0.2)
            except ray.exceptions.RayError:  # dead for good
                return False
        return False

    def reset(self, seed: int | None = None) -> None:
        """Sub-env ``i`` of worker ``k`` gets ``seed + start_k + i`` (the in-process seeds)."""
        del seed  # the workers were built seeded; resets happen inside their collectors

    def _rollout(self, num_steps: int, episodes: bool) -> tuple[Trajectory, list]:
        B = self.num_envs
        began = time.perf_counter()
        state = self._ray.put({**self.agent.acting_state(), "env_steps": self.env_steps})
        self._calls = [
            functools.partial(a.collect.remote, state,
                              self._share(num_steps, count) if episodes else num_steps, episodes)
            for a, (_, count) in zip(self.actors, self.shares)]
        results = self._get([call() for call in self._calls])
        for k, r in enumerate(results):
            if r["restarted"]:
                print(f"warning: rollout worker {k + 1} of {len(self.actors)} died and was "
                      "restarted with its envs re-seeded; the run goes on (from here it differs "
                      "from an uninterrupted one).", file=sys.stderr, flush=True)
        eps = sorted((t, k, i, r, n) for k, res in enumerate(results)
                     for i, (t, r, n) in enumerate(res["episodes"]))
        base = self.env_steps
        episodes_out = [(base + (t + 1) * B, r, n) for t, _, _, r, n in eps]
        self.env_steps = base + sum(r["steps"] for r in results)
        for key, norm in (("obs_norm", self.agent.obs_norm),
                          ("reward_norm", self.agent.reward_norm)):
            if norm is not None:
                merge_stats(results, key, norm.rms)
        traj = merge_trajectories([r["traj"] for r in results])
        self.successes.extend(s for r in results for s in r["successes"])
        if "rollout_state" in results[0]:  # a recurrent policy: the state goes on from here
            self.agent.rollout_state = np.concatenate([r["rollout_state"] for r in results])
            self.episode_start = np.concatenate([r["episode_start"] for r in results])
        self.timing = {"rollout_s": time.perf_counter() - began,
                       "worker_collect_s": [r["collect_s"] for r in results]}
        return traj, episodes_out

    def take_successes(self) -> list[float]:
        """The :attr:`successes` recorded since the last call (then forgotten here)."""
        out, self.successes = self.successes, []
        return out

    def _share(self, steps: int, count: int) -> int:
        return -(-steps * count // self.num_envs)  # ceil: the shares cover ``steps``

    def collect(self, policy_fn, num_steps: int) -> tuple[Trajectory, list]:
        """``num_steps`` vector steps of every worker -> ``(Trajectory [T, B], episodes)``.

        ``policy_fn`` (the learner's) is not called: the workers act with the agent's
        ``acting_state()``.
        """
        del policy_fn
        return self._rollout(num_steps, episodes=False)

    def collect_episodes(self, policy_fn, min_steps: int) -> tuple[Trajectory, list]:
        """Whole episodes, each worker at least its share of ``min_steps`` steps."""
        del policy_fn
        return self._rollout(min_steps, episodes=True)

    def close(self) -> None:
        """Stops the actors and closes the learner's own envs."""
        for actor in getattr(self, "actors", []):
            with contextlib.suppress(Exception):
                self._ray.kill(actor, no_restart=True)
        self.actors = []
        self.local.close()


def start(agent, workers: int, address: str | None = None, env_spec: Any = None,
          num_cpus: int | None = None) -> contextlib.ExitStack:
    """:func:`pgrad_app.distributed.session.start_with` of :func:`distribute`."""
    return start_with(distribute, agent, workers, address, env_spec, num_cpus)


def distribute(agent, workers: int, env_spec: Any = None,
               max_restarts: int = MAX_RESTARTS) -> Any:
    """Makes ``agent`` collect on ``workers`` Ray actors (needs a Ray connection, e.g.
    :func:`ray_session`); returns the agent. ``agent.close()`` stops the actors.

    Raises:
      UserError: fewer envs or free CPUs than workers, or an agent option that needs the
        learner's network at every env step (``adversarial_epsilon``).
    """
    cfg = agent.cfg
    if workers < 1:
        raise UserError(f"--workers must be >= 1; got {workers}.")
    if cfg.num_envs < workers:
        raise UserError(f"--workers {workers} needs at least as many envs; num_envs is "
                        f"{cfg.num_envs} (--num-envs).")
    if getattr(cfg, "adversarial_epsilon", 0) > 0:
        raise UserError("adversarial_epsilon attacks the learner's network at every env step; "
                        "it does not run with --workers.")
    wait_for_cpus(workers)
    agent.collector = RemoteCollector(agent, workers, env_spec, max_restarts)
    return agent
