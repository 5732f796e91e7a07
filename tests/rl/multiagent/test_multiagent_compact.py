"""Compacting agent rows: each row's decisions first, and GAE over them equals GAE over each
agent's own sequence of decisions computed by a plain loop."""

from __future__ import annotations

import numpy as np
import pytest

from pgrad.rl.advantages.returns import gae
from pgrad.rl.collection.trajectory import Trajectory
from pgrad.rl.multiagent import compact_rows


def _column(rng: np.random.Generator, T: int, start: float) -> tuple[dict, list]:
    """One row of a rollout built forward from its agent's decisions.

    Each decision is followed by 0-2 waiting steps (another agent's turn) that share its reward;
    with probability 0.3 its episode ends at the last of them (terminated or truncated), and
    0-2 dead steps (the agent left; random rewards the rows must not use) follow before the
    next episode's first decision. Every observation is a unique number.

    Returns the ``[T]`` arrays and the decisions ``(obs, action, reward, term, trunc, next)``.
    """
    ids = iter(start + np.arange(10 * T))
    col = {k: np.zeros(T) for k in ("obs", "next", "rew", "term", "trunc", "live", "act")}
    decisions = []
    t, first = 0, next(ids)  # first: the observation the decision at t acts on
    while t < T:
        col["obs"][t], col["act"][t], col["live"][t] = first, next(ids), 1
        end = min(t + int(rng.integers(0, 3)), T - 1)  # the last waiting step
        col["rew"][t: end + 1] = rng.normal(size=end + 1 - t)
        for s in range(t + 1, end + 1):  # waiting: the agent still observes
            col["obs"][s] = next(ids)
        for s in range(t, end):
            col["next"][s] = col["obs"][s + 1]
        kind = int(rng.integers(0, 2)) if rng.random() < 0.3 else -1  # 0 term, 1 trunc
        after = end + 1
        if kind >= 0:
            col["next"][end] = last = next(ids)  # the final observation
            col["term" if kind == 0 else "trunc"][end] = 1
            dead = min(int(rng.integers(0, 3)), T - after)
            for s in range(after, after + dead):
                col["obs"][s], col["rew"][s] = next(ids), rng.normal()
            for s in range(after, after + dead - 1):
                col["next"][s] = col["obs"][s + 1]
            after += dead
            first = next(ids)
            if dead:
                col["next"][after - 1] = first
        else:
            col["next"][end] = last = first = next(ids)
        decisions.append((col["obs"][t], col["act"][t], col["rew"][t: end + 1].sum(),
                          float(kind == 0), float(kind == 1), last))
        t = after
    return col, decisions


def _rollout(seed: int, T: int = 12, B: int = 5):
    rng = np.random.default_rng(seed)
    cols, decisions = zip(*(_column(rng, T, 1000.0 * (b + 1)) for b in range(B)))
    arr = {k: np.stack([c[k] for c in cols], 1) for k in cols[0]}  # [T, B]
    traj = Trajectory(
        observations=arr["obs"][..., None].astype(np.float32), actions=arr["act"],
        rewards=arr["rew"].astype(np.float32), terminated=arr["term"].astype(np.float32),
        truncated=arr["trunc"].astype(np.float32), log_probs=-arr["obs"].astype(np.float32),
        values=None, next_observations=arr["next"][..., None].astype(np.float32))
    return traj, arr["live"].astype(bool), decisions


@pytest.mark.parametrize("seed", range(6))
def test_each_rows_decisions_come_first_with_what_followed_them(seed):
    traj, live, decisions = _rollout(seed)
    out = compact_rows(traj, live)
    T = live.shape[0]
    for b, ds in enumerate(decisions):
        L = len(ds)
        assert out.mask[:, b].tolist() == [1.0] * L + [0.0] * (T - L)
        for k, (o, a, r, term, trunc, nxt) in enumerate(ds):
            assert out.observations[k, b, 0] == np.float32(o)
            assert out.actions[k, b] == a and out.log_probs[k, b] == -np.float32(o)
            assert out.rewards[k, b] == pytest.approx(r, abs=1e-5)
            assert out.terminated[k, b] == term
            last_open = k == L - 1 and not (term or trunc) and L < T
            assert out.truncated[k, b] == (1.0 if last_open else trunc)
            assert out.next_observations[k, b, 0] == np.float32(nxt)
        assert (out.terminated[L:, b] == 1).all() and (out.rewards[L:, b] == 0).all()


def _value(x):
    return np.sin(x) * 3.0  # any fixed function of the observation


@pytest.mark.parametrize("seed", range(6))
def test_gae_over_the_compacted_rows_is_gae_over_each_agents_decisions(seed):
    gamma, lam = 0.9, 0.8
    traj, live, decisions = _rollout(seed)
    out = compact_rows(traj, live)
    adv = gae(out.rewards, _value(out.observations[..., 0]), _value(out.next_observations[..., 0]),
              out.terminated, out.truncated, gamma, lam).numpy()
    for b, ds in enumerate(decisions):
        want, a_next = [], 0.0
        for o, _, r, term, trunc, nxt in reversed(ds):  # the plain loop, one step per decision
            delta = r + gamma * (1 - term) * _value(nxt) - _value(o)
            a_next = delta + gamma * lam * (1 - term) * (1 - trunc) * a_next
            want.append(a_next)
        np.testing.assert_allclose(adv[: len(ds), b], want[::-1], rtol=1e-4, atol=1e-4)


def test_rows_live_at_every_step_are_left_as_they_are():
    rng = np.random.default_rng(0)
    T, B = 6, 3
    done = rng.random((T, B)) < 0.3
    traj = Trajectory(
        observations=rng.normal(size=(T, B, 2)).astype(np.float32),
        actions=rng.integers(0, 4, (T, B)), rewards=rng.normal(size=(T, B)).astype(np.float32),
        terminated=done.astype(np.float32), truncated=np.zeros((T, B), np.float32),
        log_probs=rng.normal(size=(T, B)).astype(np.float32),
        values=rng.normal(size=(T, B)).astype(np.float32),
        next_observations=rng.normal(size=(T, B, 2)).astype(np.float32),
        action_mask=rng.random((T, B, 4)) < 0.7)
    out = compact_rows(traj, np.ones((T, B), bool))
    for name in ("observations", "actions", "rewards", "terminated", "truncated", "log_probs",
                 "values", "next_observations", "action_mask"):
        np.testing.assert_array_equal(getattr(out, name), getattr(traj, name), err_msg=name)
    assert (out.mask == 1).all() and not out.rewards.flags.writeable


def test_a_masked_rollout_and_a_wrong_live_shape_are_refused():
    traj, live, _ = _rollout(0)
    with pytest.raises(ValueError, match=r"live must be \[T, B\] = \(12, 5\); got \(12, 4\)"):
        compact_rows(traj, live[:, :4])
    with pytest.raises(ValueError, match="fixed length"):
        compact_rows(traj._replace(mask=np.ones(live.shape, np.float32)), live)
