"""Self-play's opponent mix (``random_prob``): a share of the games against a uniform random
legal player, on PettingZoo's tic-tac-toe. The random player's moves are uniform over the legal
ones (not the learner's), the other games draw the opponents a run without it draws, and only
the learner's rows enter the update."""

from __future__ import annotations

import numpy as np
import pytest

import agents
from pgrad.rl.multiagent.self_play import LATEST, RANDOM

pytest.importorskip("pettingzoo.classic.tictactoe_v3")

TTT = "pettingzoo.classic.tictactoe_v3:env"
TINY = dict(num_envs=16, n_steps=64, epochs=1, num_minibatches=2, hidden=(8,),
            snapshot_interval=1, pool_size=3)


@pytest.fixture(scope="module")
def agent():
    """An agent whose pool holds 2 snapshots (updates 0 and 1)."""
    made = agents.make("ippo", TTT, seed=0, self_play=True, **TINY)
    made.step()
    made.step()
    yield made
    made.close()


def _lowest_legal_spy(agent, seen):
    """The learner's rollout policy, its moves replaced by the lowest legal one; records
    ``(seats [B], live [2 B], masks [2 B, 9], opponents [B])`` before each step."""
    policy = agent.acting_fn(np.random.default_rng(1))
    collector = agent.collector

    def spy(obs, action_mask=None):
        seen.append((collector.seat.copy(), collector.live.copy(), action_mask.copy(),
                     collector.opponent.copy()))
        out = policy(obs, action_mask=action_mask)
        lowest = np.argmax(action_mask, axis=1)  # [2 B] the first legal move
        return (lowest.astype(np.asarray(out[0]).dtype), lowest.astype(np.asarray(out[1]).dtype),
                *out[2:])

    return spy


def _action_at(traj, seen, t, row):
    """The env action ``row`` sent at step ``t``, from the compacted trajectory (a row's masked
    steps follow its live ones in time order)."""
    live_steps = [s for s, (seat, live, _, _) in enumerate(seen)
                  if live[row] and seat[row // 2] == row % 2]
    dead_steps = [s for s in range(len(seen)) if s not in live_steps]
    return int(traj.actions[len(live_steps) + dead_steps.index(t), row])


def test_random_opponents_move_uniformly_among_legal_moves(agent):
    """random_prob 1: every game is against the random player. The learner always plays its
    lowest legal move, so an opponent acting as the latest policy would too; the random
    player's moves are legal and pick the lowest legal one at the uniform rate
    mean(1 / legal moves) (within 4 standard errors), and the update keeps exactly the
    learner's live steps."""
    seen: list = []
    pool = agent.self_play.pool.snapshots()[0]
    T = 64
    traj, episodes = agent.collector.collect_games(_lowest_legal_spy(agent, seen), T, [0, 9],
                                                   pool, 0.5, random_prob=1.0)
    B = len(seen[0][0])
    hits, rates = [], []
    learner = np.zeros((T, 2 * B), bool)
    for t, (seat, live, mask, opponent) in enumerate(seen):
        assert (opponent == RANDOM).all()
        learner[t, 2 * np.arange(B) + seat] = True
        learner[t] &= live
        for b in range(B):
            row = 2 * b + 1 - seat[b]
            if live[row]:
                moved = _action_at(traj, seen, t, row)
                assert mask[row, moved]
                hits.append(moved == np.argmax(mask[row]))
                rates.append(1.0 / mask[row].sum())
    assert len(hits) > 400 and len(episodes) >= 3 * B
    p = np.asarray(rates)
    se = np.sqrt((p * (1 - p)).sum()) / len(p)
    assert abs(np.mean(hits) - p.mean()) < 4 * se, (np.mean(hits), p.mean(), se)
    np.testing.assert_array_equal(traj.mask.sum(0), learner.sum(0))


def test_the_other_games_draw_the_opponents_of_a_run_without_random_games(agent):
    """Per game, the random player replaces the opponent a run with random_prob 0 draws (the
    same key): the first games' opponents agree wherever they are not the random player, and
    about random_prob of them are (256 draws, within 4 standard errors)."""
    pool = agent.self_play.pool.snapshots()[0]
    first = {}
    for prob in (0.0, 0.3):
        draws = []
        for key in range(16):
            seen: list = []
            agent.collector.collect_games(_lowest_legal_spy(agent, seen), 1, [key, 2], pool,
                                          0.5, random_prob=prob)
            draws.append(seen[0][3])
        first[prob] = np.concatenate(draws)  # [16 B]
    without, mixed = first[0.0], first[0.3]
    assert RANDOM not in without and {LATEST, 0, 1} <= set(without.tolist())
    kept = mixed != RANDOM
    np.testing.assert_array_equal(mixed[kept], without[kept])
    share = 1 - kept.mean()
    assert abs(share - 0.3) < 4 * np.sqrt(0.3 * 0.7 / len(mixed)), share


@pytest.mark.parametrize("prob", [-0.1, 1.5])
def test_random_prob_out_of_range_is_one_line(prob):
    with pytest.raises(ValueError, match=r"random_prob must be in \[0, 1\]") as caught:
        agents.make("ippo", TTT, seed=0, self_play=True, random_prob=prob, **TINY)
    assert "\n" not in str(caught.value)
