"""Many collectors stepped in lock-step, their policies acting in one call per step.

A population (:mod:`agents.population`) collects one rollout of each member. One member after
the other, each env step pays one policy call per member; here step ``t`` of every member is
taken together, so ``act`` sees all their observations at once (one batched forward pass:
:class:`agents.population.acting.BatchedActing`). Each collector still steps its own envs,
normalisers and checks exactly as :meth:`~pgrad.rl.collection.rollout.Collector.collect` does
(:class:`~pgrad.rl.collection.rollout.RolloutRun`), so a member's rollout is the one it would
collect alone, given the same actions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pgrad.rl.collection.rollout import Collector, EnvError, RolloutRun
from pgrad.rl.envs.native import step_together

#: ``act(rows, obs, masks) -> acted``: for the collectors ``rows`` (indices into the list given
#: to :func:`collect_lockstep`), their observations and action masks (None: no masks), each
#: one's policy output (``(actions, env_actions, log_probs, values)``, as a ``PolicyFn``'s).
ActMany = Callable[[list[int], list[Any], list[Any]], list[tuple]]


def collect_lockstep(collectors: Sequence[Collector], act: ActMany, num_steps: int
                     ) -> list[tuple | Exception]:
    """``num_steps`` vector steps of every collector, step ``t`` of all before step ``t + 1``.

    Returns, per collector, ``(Trajectory [num_steps, B], episodes)`` as its ``collect`` would
    return it, or the exception that stopped it (its env failed: an EnvError; the others go on).
    An exception from ``act`` itself stops every collector still stepping.
    """
    runs = [RolloutRun(c, num_steps) for c in collectors]
    out: list[Any] = [None] * len(collectors)
    live = list(range(len(collectors)))

    def stop(i: int, err: Exception) -> None:
        if isinstance(err, EnvError):
            try:  # a non-finite value stepped before may be the cause: named first
                runs[i].failed()
            except EnvError as earlier:
                err = earlier
        out[i] = err

    for t in range(num_steps):
        seen, rows = [], []
        for i in live:
            try:
                seen.append(collectors[i].observe())
                rows.append(i)
            except Exception as err:  # its first reset failed
                stop(i, err)
        if not rows:
            break
        try:
            acted = act(rows, [o for o, _ in seen], [m for _, m in seen])
        except Exception as err:
            for i in rows:
                out[i] = err
            return out
        # The members' native CartPoles' physics in one numpy call (each still steps itself)
        step_together([collectors[i].envs for i in rows], [a[1] for a in acted])
        live = []
        for i, (obs, mask), a in zip(rows, seen, acted):
            try:
                parts, eps = collectors[i].advance(obs, a, mask, runs[i].check)
            except Exception as err:
                stop(i, err)
                continue
            runs[i].add(t, parts, eps)
            live.append(i)
    for i in live:
        try:
            out[i] = runs[i].finish()
        except Exception as err:
            out[i] = err
    return out


__all__ = ["ActMany", "collect_lockstep"]
