"""A population's members acting in one call per env step, and their rollouts in lock-step.

Acting alone, a member's policy costs one numpy forward pass and one sampling call per env step
(~20 us for a 64-64 MLP on 16 envs, most of it numpy's per-call overhead). Here the members'
weights are stacked ``[N, ...]`` and one ``np.matmul`` per layer runs every member's layer on its
own observations: numpy calls the same matrix product for each member's ``[B, D] @ [D, H]``
slice as for the member alone, so the outputs are bit for bit those of each member's
:class:`~pgrad.rl.acting.policy.NumpyPolicy` (``tests/agents/test_population_acting.py``).
Each member then samples with its own generator (the generator of its single run: seed and
update); for Categorical heads without masks the draws go through one inverse-CDF call over
all members' rows, which is row by row the same arithmetic.

:func:`lockstep_ready` says whether a population's members can act so (feed-forward numpy
mirrors of one architecture, fixed-length rollouts, no adversarial observations, no gSDE);
otherwise each member collects alone (:meth:`agents.population.members.Population.start`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pgrad.rl.acting.policy import NumpyPolicy
from pgrad.rl.acting.sampling import _categorical
from pgrad.rl.collection.lockstep import collect_lockstep
from pgrad.rl.distributions import CategoricalHead


def lockstep_ready(agents: Sequence[Any]) -> bool:
    """Whether ``agents`` (a population's members) can collect in lock-step with
    :class:`BatchedActing`."""
    if len(agents) < 2:
        return False
    first = agents[0]
    for a in agents:
        cfg = a.cfg
        mirror = a.mirror
        if (type(mirror) is not NumpyPolicy or a.net.recurrent or cfg.rollout != "steps"
                or cfg.adversarial_epsilon > 0 or a.head.uses_latent or a.values_from_acting
                or a.collector.overlap or cfg.n_steps != first.cfg.n_steps
                or mirror._shapes != first.mirror._shapes
                or type(a.head) is not type(first.head)):
            return False
    return True


class BatchedActing:
    """The members' policies as one stacked forward pass (module docstring).

    Args:
      agents: the members (their current ``mirror``, a :class:`~pgrad.rl.acting.policy.
        NumpyPolicy` of one architecture, acts).
    """

    def __init__(self, agents: Sequence[Any]):
        self.agents = list(agents)
        self.head = self.agents[0].mirror.head
        self._layers: dict[str, list] = {}
        self._rows: tuple[int, ...] = ()

    def refresh(self, rows: Sequence[int]) -> None:
        """Stacks the current weights of the members ``rows`` (after their updates)."""
        ms = [self.agents[i].mirror for i in rows]
        self._rows = tuple(rows)
        self._layers = {
            key: [(np.stack([m._weights[key][j][0] for m in ms]),
                   np.stack([m._weights[key][j][1] for m in ms])[:, None, :],
                   layer[2]) for j, layer in enumerate(ms[0]._weights[key])]
            for key in ("trunk", "actor")}

    @staticmethod
    def _run(layers: list, x: np.ndarray) -> np.ndarray:
        # NumpyPolicy._run's arithmetic on [n, B, D]: matmul, then bias and activation in place
        for w, b, act in layers:
            x = np.matmul(x, w)
            x += b
            if act is not None:
                act(x, out=x)
        return x

    def act(self, rows: list[int], obs: list[np.ndarray], masks: list[Any],
            rngs: Sequence[np.random.Generator]) -> list[tuple]:
        """``(actions, env_actions, log_probs, None)`` of each member in ``rows`` (a subset of
        the rows last :meth:`refresh` ed, in order) at its observations ``obs[k]`` ``[B, D]``,
        sampled with ``rngs[k]``."""
        layers = self._layers
        if tuple(rows) != self._rows:  # a member stopped mid-rollout: its weights left out
            index = [self._rows.index(i) for i in rows]
            layers = {k: [(w[index], b[index], a) for w, b, a in v] for k, v in layers.items()}
        params = self._run(layers["actor"], self._run(layers["trunk"], np.stack(obs)))  # [n,B,P]
        n, b = params.shape[:2]
        out = []
        if isinstance(self.head, CategoricalHead) and all(m is None for m in masks):
            u = np.concatenate([rngs[k].random(b) for k in range(n)])
            actions, log_probs = _categorical(params.reshape(n * b, -1), u, np.float32)
            for k in range(n):
                a = actions[k * b:(k + 1) * b]
                out.append((a, self.head.to_env(a), log_probs[k * b:(k + 1) * b], None))
            return out
        for k, i in enumerate(rows):
            mirror = self.agents[i].mirror
            a, lp = mirror.sample(params[k], rngs[k], None, masks[k])
            out.append((a, mirror.head.to_env(a), lp, None))
        return out


def lockstep_rollouts(agents: Sequence[Any], acting: BatchedActing, rows: Sequence[int]
                      ) -> dict[int, tuple | Exception]:
    """One rollout of each member in ``rows``, collected in lock-step: ``{row: (traj,
    episodes, updates, base, taken)}`` as each member's ``_rollout`` returns them, or the
    exception that stopped it."""
    out: dict[int, tuple | Exception] = {}
    starts = {}  # (updates, rng, base)
    for i in rows:
        try:
            starts[i] = agents[i]._rollout_start(trust=True)  # the population ran its updates
        except Exception as err:
            out[i] = err
    rows = [i for i in rows if i in starts]
    if not rows:
        return out
    acting.refresh(rows)
    rngs = {i: starts[i][1] for i in rows}

    def act(live: list[int], obs: list, masks: list) -> list[tuple]:
        return acting.act([rows[k] for k in live], obs, masks, [rngs[rows[k]] for k in live])

    results = collect_lockstep([agents[i].collector for i in rows], act,
                               agents[rows[0]].cfg.n_steps)
    for i, got in zip(rows, results):
        if isinstance(got, Exception):
            out[i] = got
            continue
        traj, episodes = got
        updates, _, base = starts[i]
        out[i] = (traj, episodes, updates, base, agents[i].collector.env_steps - base)
    return out


__all__ = ["BatchedActing", "lockstep_ready", "lockstep_rollouts"]
