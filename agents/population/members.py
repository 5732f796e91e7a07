"""Populations: many seeds of one agent trained in one process, each exactly its own run.

    import agents
    pop = agents.Population("a2c", "CartPole-v1", seeds=range(80, 90), learning_rate=1.4e-3)
    pop.learn(100_000)                    # each seed 100k env steps; returns the population
    pop.agents[0].save("runs/seed80")     # each member is an ordinary agent
    pop.close()

A population is N independent agents that share one process, one training loop and one traced
update. Each round collects every member's rollout (its own vector env, RNG, numpy mirror and
normalisers: :meth:`agents.step_methods.StepMethods._rollout`; in lock-step, the members acting in
one stacked forward pass per env step, where :mod:`agents.population.acting` allows), then
updates all of them
in ONE call of one ``tf.function`` (:class:`agents.update.batched.BatchedUpdate`: one member's
traced update run for each member on its own inputs and variables,
:mod:`agents.update.shared_trace`; TensorFlow pays its call overhead once and may run the N
parts on both cores). Nothing crosses between members: weights, optimizer state,
transform state, counters and normaliser statistics are each agent's own, and a member's
numbers are those of the same agent trained alone with its seed (tests/agents/
test_population.py checks the weights to float32 round-off).

Supported: the on-policy feed-forward presets :data:`SUPPORTED` (``a2c``, ``ppo``,
``reinforce``, ``npg``, ``trpo``) with vector envs in this process; anything else is refused in
one line naming the algorithm. A member whose env fails stops (its message in
:attr:`Population.failures`); the others go on. ``pgrad-train --seeds`` runs the same
population into one run directory per seed (:mod:`pgrad_app.run.population`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from agents.learning import Callback, Loop
from agents.population.acting import BatchedActing, lockstep_ready, lockstep_rollouts

#: The algorithms a population trains (registered names): on-policy, feed-forward, one rollout
#: and one update per step of the shared actor-critic agent.
SUPPORTED = ("a2c", "ppo", "reinforce", "npg", "trpo")
#: Collect the members' rollouts in lock-step, acting in one call per env step, where they
#: allow it (:func:`agents.population.acting.lockstep_ready`); False: one member after another.
LOCKSTEP = True
#: MiB each member adds once training runs, beyond what building it added: its part of the
#: traced update graph and the update's working memory (measured: ten A2C CartPole seeds held
#: ~125 MiB more at their peak than one run, ~12.5 per further seed, of which ~1 is built).
TRAINING_MB = 12.0
#: Multiplies the estimate per member in :func:`check_memory` (what it does not model).
MEMORY_MARGIN = 1.25


def check_seeds(seeds: Any, where: str = "seeds") -> list[int]:
    """``seeds`` as a list of distinct ints; an empty list, a non-integer or a repeated seed is
    a ValueError/TypeError naming ``where`` (a repeated seed would train the same run twice)."""
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Iterable):
        raise TypeError(f"{where} must be a list of integer seeds; got {type(seeds).__name__}.")
    out = []
    for s in seeds:
        if isinstance(s, bool) or not hasattr(s, "__index__"):
            raise TypeError(f"{where}: seeds are integers; got {s!r}.")
        out.append(int(s))
    if not out:
        raise ValueError(f"{where} is empty: give at least one seed.")
    repeated = sorted({s for s in out if out.count(s) > 1})
    if repeated:
        raise ValueError(f"{where} repeats seed(s) {', '.join(map(str, repeated))}: each seed "
                         "is one independent run, so each may appear once.")
    if any(s < 0 for s in out):
        raise ValueError(f"{where}: seeds are >= 0; got {min(out)}.")
    return out


def check_supported(cls: type, cfg: Any) -> None:
    """One line (ValueError) if a population cannot train agents of class ``cls`` with ``cfg``
    (``None``: the class only)."""
    name = getattr(cls, "name", cls.__name__)
    from agents.base import ActorCriticAgent

    if (name not in SUPPORTED or not issubclass(cls, ActorCriticAgent)
            or cls.step is not ActorCriticAgent.step):
        raise ValueError(f"a population cannot train {name!r}: it trains the on-policy "
                         f"feed-forward agents {', '.join(SUPPORTED)}; train {name!r} one seed "
                         "per process (pgrad-sweep runs many).")
    if cfg is None:
        return
    if getattr(cfg, "recurrent", ""):
        raise ValueError(f"a population cannot train {name!r} with recurrent={cfg.recurrent!r}: "
                         "it trains feed-forward policies only.")
    if getattr(cfg, "rollout", "steps") not in ("steps", "episodes"):
        raise ValueError(f"a population cannot train {name!r} with rollout={cfg.rollout!r}.")
    if getattr(cfg, "vector_mode", "sync") == "async":
        raise ValueError("a population steps its envs in this process: vector_mode='async' "
                         "would start one process per env of every seed; use 'sync' or "
                         "'envpool'.")


def resident_mb() -> float:
    """This process's resident memory now (VmRSS), in MiB; 0 where /proc is not readable."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def available_mb() -> float | None:
    """Memory the system can still give (MemAvailable), in MiB; None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def check_memory(count: int, built: int, per_seed_mb: float,
                 available: float | None = None) -> str:
    """The one-line estimate for ``count`` seeds after ``built`` were built, each measured to
    add ``per_seed_mb``; a MemoryError with that line when the rest would not fit in the
    available memory (:func:`available_mb` unless given)."""
    more = max(0, count - built) * per_seed_mb * MEMORY_MARGIN
    available = available_mb() if available is None else available
    line = (f"{count} seeds: about {per_seed_mb:.1f} MiB per seed (what the second added when "
            f"built, its traced update and rollout), {more / 1024:.2f} GiB more for the "
            f"{count - built} still to build and train")
    if available is not None and more > 0.9 * available:
        fit = built + int(0.9 * available / max(per_seed_mb * MEMORY_MARGIN, 1e-3))
        raise MemoryError(f"{line}, more than the {available / 1024:.2f} GiB available: train "
                          f"at most about {fit} seeds at once, or the seeds in several "
                          "populations.")
    return line


def rollout_mb(member: Any) -> float:
    """MiB of one member's rollout in the update: observations and next observations as
    float32, plus ~16 floats a step of the rest, about three copies (the trajectory, the packed
    inputs, the graph's)."""
    from gymnasium.spaces import flatdim

    steps = int(member.steps_per_update())
    try:
        floats = int(flatdim(member.observation_space))
    except (ValueError, TypeError, NotImplementedError):  # a space without a flat form
        floats = 1
    return 3 * steps * (2 * floats + 16) * 4 / 2**20


def build_members(make_one: Callable[[int], Any], seeds: Sequence[int],
                  available: float | None = None, say: Callable[[str], None] | None = None
                  ) -> list:
    """``[make_one(seed) for seed in seeds]``, the memory checked once two are built
    (:func:`check_memory`); on any error the members built so far are closed first."""
    members: list = []
    try:
        after_first = 0.0
        for k, seed in enumerate(seeds):
            members.append(make_one(seed))
            if k == 0:
                after_first = resident_mb()
            elif k == 1 and len(seeds) > 2:
                built = max(resident_mb() - after_first, 0.1)
                per_seed = built + TRAINING_MB + rollout_mb(members[0])
                line = check_memory(len(seeds), 2, per_seed, available)
                if say is not None:
                    say(line)
    except BaseException:
        for member in members:
            member.close()
        raise
    return members


class Population:
    """N agents of one algorithm and env, one per seed, trained together (module docstring).

    Args:
      algo: a registered name in :data:`SUPPORTED`.
      env: as :func:`agents.make` takes it (an id, a factory; each seed builds its own envs).
      seeds: distinct integer seeds, one member each.
      transform, env_kwargs, env_wrapper, **hyperparameters: as :func:`agents.make` (the same
        for every member).

    Raises:
      ValueError / TypeError: bad seeds, an unsupported algorithm or setting (one line).
      MemoryError: the seeds would not fit in memory (estimated once two members are built).
    """

    def __init__(self, algo: str, env: Any = "CartPole-v1", seeds: Iterable[int] = (0,),
                 transform: Any = None, *, env_kwargs: dict | None = None,
                 env_wrapper: Any = None, **hyperparameters: Any):
        import agents

        seeds = check_seeds(seeds)
        check_supported(agents.get(algo), None)  # before any env is built

        def make_one(seed: int) -> Any:
            agent = agents.make(algo, env, seed=seed, transform=transform,
                                env_kwargs=env_kwargs, env_wrapper=env_wrapper,
                                **hyperparameters)
            try:
                check_supported(type(agent), agent.cfg)
            except BaseException:
                agent.close()
                raise
            return agent

        self._setup(build_members(make_one, seeds))

    @classmethod
    def of(cls, members: Sequence[Any]) -> Population:
        """A population of agents built already (distinct seeds, one class; e.g. restored)."""
        members = list(members)
        check_seeds([m.seed for m in members], "the members' seeds")
        for m in members:
            check_supported(type(m), m.cfg)
        self = cls.__new__(cls)
        self._setup(members)
        return self

    def _setup(self, members: list) -> None:
        from agents.update.batched import BatchedUpdate

        self.agents = members
        self.seeds = [int(m.seed) for m in members]
        #: seed -> the one line that stopped it (its env failed, a callback raised, ...).
        self.failures: dict[int, str] = {}
        from agents.update.shared_trace import member_variables

        self.update = BatchedUpdate([m.updater for m in members],
                                    [member_variables(m) for m in members])
        self._thread: Any = None  # the update thread of start(background=True), made on use
        #: The members' acting in one call per env step (None: each collects alone), see
        #: :mod:`agents.population.acting`; ``LOCKSTEP = False`` turns it off.
        self.acting = BatchedActing(members) if LOCKSTEP and lockstep_ready(members) else None

    def __len__(self) -> int:
        return len(self.agents)

    # -- one round -------------------------------------------------------------------------------

    def step(self, rows: Sequence[int] | None = None) -> dict[int, Any]:
        """One rollout of each member in ``rows`` (default: all), then one update of all of them
        in one call. Returns ``{row: info}`` with ``info`` as :meth:`agent.step` returns it,
        or the exception that stopped that member's rollout or update (the others go on)."""
        return self.start(range(len(self.agents)) if rows is None else rows).finish()

    def start(self, rows: Iterable[int], background: bool = False) -> Round:
        """The rollouts of the members in ``rows``, then their update started: in this thread,
        or with ``background`` in the population's update thread (TensorFlow runs the graph
        without Python's lock, so the caller may collect other members' rollouts meanwhile).
        ``.finish()`` of the result waits for it and returns what :meth:`step` returns."""
        out: dict[int, Any] = {}
        pending = []
        rows = list(rows)
        if self.acting is not None and len(rows) > 1:  # the members' steps taken together
            collected = lockstep_rollouts(self.agents, self.acting, rows)
        else:
            collected = {i: self._rollout(i) for i in rows}
        for i in rows:
            got = collected[i]
            if isinstance(got, Exception):  # its env failed: this member stops, the others go on
                out[i] = got
                continue
            traj, episodes, updates, base, taken = got
            try:
                agent = self.agents[i]  # numpy inputs: converted once per round, stacked
                args = agent._update_args(traj, updates, base, taken, host=agent.layout.flat)
            except Exception as err:
                out[i] = err
                continue
            pending.append((i, args, traj.mask is None, (episodes, updates, base, taken)))
        call = None
        if pending:
            fixed = all(p[2] for p in pending)
            call = (self.update, [p[0] for p in pending], [p[1] for p in pending], fixed)
            if background:
                if self._thread is None:
                    from concurrent.futures import ThreadPoolExecutor

                    self._thread = ThreadPoolExecutor(1, thread_name_prefix="pgrad-population")
                call = self._thread.submit(*call)
        return Round(self.agents, out, pending, call)

    def _rollout(self, i: int) -> tuple | Exception:
        """Member ``i``'s rollout collected alone: ``(traj, episodes, updates, base, taken)``,
        or the exception that stopped it."""
        try:
            traj, episodes, updates, base, taken, _ = self.agents[i]._rollout()
        except Exception as err:
            return err
        return traj, episodes, updates, base, taken

    # -- training --------------------------------------------------------------------------------

    def learn(self, total_steps: int, callbacks: Mapping[int, Any] | Callable[[int], Any]
              | None = None) -> Population:
        """Trains every member ``total_steps`` more env steps; returns the population.

        Args:
          total_steps: env steps per member (rounded up to whole updates).
          callbacks: per member, as ``agent.learn`` takes them: ``{seed: callbacks}``, or a
            factory ``fn(seed) -> callbacks`` (e.g. ``lambda s: RunDirectory(f"runs/s{s}")``).
            A member whose callback stops it stops alone.
        """
        if int(total_steps) < 0:
            raise ValueError(f"total_steps must be >= 0; got {total_steps}.")
        if callbacks is None:
            made: dict[int, Any] = {}
        elif isinstance(callbacks, Mapping):
            unknown = sorted(set(callbacks) - set(self.seeds))
            if unknown:
                raise ValueError(f"callbacks name seed(s) {unknown} outside the population's "
                                 f"{self.seeds}.")
            made = dict(callbacks)
        elif callable(callbacks) and not isinstance(callbacks, Callback):
            made = {s: callbacks(s) for s in self.seeds}
        else:
            raise TypeError("callbacks must be {seed: callbacks} or a factory fn(seed) -> "
                            f"callbacks; got {type(callbacks).__name__}.")
        loops = {i: Loop(a, a.env_steps + int(total_steps), made.get(a.seed), progress=False)
                 for i, a in enumerate(self.agents) if a.seed not in self.failures}
        from agents.population.loop import run_loops

        run_loops(self, loops, self._failed)
        return self

    def _failed(self, row: int, err: BaseException) -> None:
        seed = self.seeds[row]
        self.failures[seed] = _line(err)
        print(f"warning: seed {seed} stopped: {self.failures[seed]}; the other seeds go on.",
              file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=True)
            self._thread = None
        for agent in self.agents:
            agent.close()


class Round:
    """The members' rollouts of one :meth:`Population.start` and their update (done, or
    running in the update thread); :meth:`finish` completes it."""

    def __init__(self, agents: list, out: dict[int, Any], pending: list, call: Any):
        self.agents, self.out, self.pending, self.call = agents, out, pending, call

    def finish(self) -> dict[int, Any]:
        """Waits for the update; each member's acting copy and counters then follow it.
        Returns ``{row: info or the exception that stopped that member}``."""
        if self.call is None:
            return self.out
        results = self.call.result() if hasattr(self.call, "result") else self.call[0](
            *self.call[1:])
        self.call = None
        for (i, _, _, (episodes, updates, base, taken)), result in zip(self.pending, results):
            try:
                metrics = self.agents[i]._finish_update(result, updates, base, taken)
            except FloatingPointError as err:
                self.out[i] = err
                continue
            self.out[i] = {"env_steps": base + taken, "episodes": episodes, "metrics": metrics}
        return self.out


def _line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 500 else text[:497] + "..."


__all__ = ["SUPPORTED", "Population", "Round", "build_members", "check_memory", "check_seeds",
           "check_supported"]
