"""Self-play's credit at connect four: each game the learner finishes reaches the update as one
terminal decision carrying the game's result, in both seats -- a loss's -1 (given at the
opponent's winning move, while the learner waits) on the learner's last move -- and nothing
else carries a reward; every move the learner took was legal under the mask it acted with."""

from __future__ import annotations

import numpy as np
import pytest

import agents

pytest.importorskip("pettingzoo.classic.connect_four_v3")


def test_every_finished_game_ends_on_a_terminal_learner_decision_with_its_result():
    agent = agents.make("ippo", "pettingzoo.classic.connect_four_v3:env", seed=0,
                        self_play=True, num_envs=16, n_steps=64, hidden=(16,), epochs=1,
                        num_minibatches=4, random_prob=0.5)
    try:
        traj, episodes = agent._rollout()[:2]
    finally:
        agent.close()
    live = traj.mask > 0  # [T, 2 B]
    terminal = live & (traj.terminated > 0)
    rewards = traj.rewards
    results = np.array([r for _, r, _ in episodes])
    assert len(results) == terminal.sum() >= 16
    assert (rewards[live & ~terminal] == 0).all()  # connect four rewards only the end
    for result in (1.0, -1.0):
        assert (rewards[terminal] == result).sum() == (results == result).sum()
    for seat in (0, 1):  # column 2 b + seat is always the learner's seat `seat` of copy b
        ends = rewards[:, seat::2][terminal[:, seat::2]]
        assert (ends == 1).any() and (ends == -1).any(), (seat, ends)
    actions = np.asarray(traj.actions).astype(int)
    legal = np.take_along_axis(traj.action_mask, actions[..., None], -1)[..., 0]
    assert legal[live].all()
    truncated = live & (traj.truncated > 0)  # games cut by the rollout's end: one per copy
    assert truncated.sum() <= 16 and not (truncated & terminal).any()
