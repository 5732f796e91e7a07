"""Evaluations during training (``EvalCallback``, ``pgrad-train --eval-every``) of an agent of a
game of many agents: it is evaluated on its own game by ``evaluate_team``; under self-play the
score that picks ``best/`` is the worse seat's win rate against the random player, and the
policy kept in ``best/`` is the one that scored it."""

from __future__ import annotations

import csv

import pytest

import agents
from agents.callbacks import EVAL_LOG, EvalCallback, row_score
from pgrad.rl.evaluation.evaluate_policy import eval_seed

pytest.importorskip("pettingzoo.classic.tictactoe_v3")

TTT = "pettingzoo.classic.tictactoe_v3:env"
TINY = dict(num_envs=8, n_steps=32, epochs=1, num_minibatches=2, hidden=(8,),
            snapshot_interval=1, pool_size=3, verbose=0)
GAMES = 12  # games per seat in each evaluation


def _rows(path):
    with open(path / EVAL_LOG, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Self-play for 4 updates, evaluated after each; the rows and the scores of each update's
    policy, evaluated by hand at the same seed."""
    log = tmp_path_factory.mktemp("eval")
    agent = agents.make("ippo", TTT, seed=3, self_play=True, **TINY)
    by_hand = []

    def score_now(loop):  # after EvalCallback (listed first): the policy it just evaluated
        r = agent.evaluate_team(GAMES, True, eval_seed(3))
        by_hand.append(min(r["win_rate_first"], r["win_rate_second"]))

    evals = EvalCallback(every=agent.steps_per_update(), episodes=GAMES, log_dir=log,
                         verbose=False)
    agent.learn(4 * agent.steps_per_update(), callbacks=[evals, score_now], progress=False)
    yield agent, log, by_hand
    agent.close()


def test_the_score_is_the_worse_seat_win_rate_against_random(trained):
    agent, log, by_hand = trained
    rows = _rows(log)
    assert [int(r["step"]) for r in rows] == [agent.steps_per_update() * k for k in (1, 2, 3, 4)]
    assert [float(r["score"]) for r in rows] == pytest.approx(by_hand, abs=0)
    for r in rows:  # the team's return of a zero-sum game stays in its column
        assert float(r["return_mean"]) == pytest.approx(0.0, abs=1e-9)
    best = [int(r["best"]) for r in rows]
    assert best == [1] + [int(by_hand[k] > max(by_hand[:k])) for k in range(1, 4)]


def test_best_holds_the_policy_that_scored_best(trained):
    """The agent loaded from best/ scores, at the same seed, the best row's score."""
    _, log, by_hand = trained
    kept = agents.load(log / "best", env_id=TTT)
    try:
        r = kept.evaluate_team(GAMES, True, eval_seed(3))
    finally:
        kept.close()
    assert min(r["win_rate_first"], r["win_rate_second"]) == max(by_hand)


def test_a_game_is_evaluated_on_its_own_game_only(tmp_path):
    agent = agents.make("ippo", TTT, seed=0, self_play=True, **TINY)
    try:
        with pytest.raises(ValueError, match="on its own game; leave env_id out"):
            agent.learn(agent.steps_per_update(), progress=False, callbacks=EvalCallback(
                env_id="pettingzoo.classic.connect_four_v3:env", every=1, episodes=1))
    finally:
        agent.close()


def test_rows_of_an_older_eval_csv_rank_by_their_return():
    assert row_score({"step": "5", "return_mean": "2.5"}) == 2.5
    assert row_score({"step": "5", "return_mean": "2.5", "score": ""}) == 2.5
    assert row_score({"step": "5", "return_mean": "0.0", "score": "0.75"}) == 0.75


def test_a_resumed_run_keeps_its_best_score_from_an_older_log(tmp_path):
    """An eval.csv written before the score column: resuming ranks its rows by return_mean and
    rewrites the log with the new column, losing no row."""
    log = tmp_path / EVAL_LOG
    log.write_text("step,wall_s,return_mean,return_std,length_mean,episodes,deterministic,best\n"
                   "100,1.0,3.5,0.1,10,2,1,1\n200,2.0,1.5,0.1,10,2,1,0\n")
    evals = EvalCallback(every=100, episodes=2, log_dir=tmp_path, best_dir=tmp_path / "none")
    evals._continue_log(log, 200)
    assert evals.best is None  # no policy in best/: the next evaluation is kept
    rows = _rows(tmp_path)
    assert [(r["step"], r["return_mean"], r["score"]) for r in rows] == [
        ("100", "3.5", ""), ("200", "1.5", "")]
    (tmp_path / "none").mkdir()
    evals._continue_log(log, 200)
    assert evals.best == 3.5
