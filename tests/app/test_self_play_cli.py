"""Self-play through the commands, as a user runs it: ``pgrad-train --resume`` of a run that
stopped ends where the run that did not stop ends, and ``pgrad-evaluate`` writes the learner's
win rates against the random player and the fixed earlier policy, as first and second player,
equal to ``agent.evaluate_team`` on the same checkpoint and seeds."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from cli_helpers import evaluate, train

import agents
from pgrad.rl.evaluation.evaluate_policy import eval_seed

pytest.importorskip("pettingzoo.classic.tictactoe_v3")
ENV = "pettingzoo.classic.tictactoe_v3:env"
SETS = ["self_play=true", "num_envs=2", "n_steps=16", "num_minibatches=2", "epochs=2",
        "hidden=[16]", "snapshot_interval=2", "pool_size=2", "anchor_update=3"]
STEP = 32  # env steps per update: 16 steps x 2 copies


def _train(out, total, capsys, *more):
    args = ["--algo", "ippo", "--env", ENV, "--total-steps", total, "--seed", 3, "--out", out,
            "--quiet"]
    for setting in SETS:
        args += ["--set", setting]
    return train(*args, *more, capsys=capsys)


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """A run of 6 updates that did not stop."""
    out = tmp_path_factory.mktemp("self_play") / "whole"
    code, _, err = _train(out, 6 * STEP, None)
    assert code == 0, err
    return out


def test_evaluate_reports_win_rates_as_first_and_second_player(whole, capsys):
    code, out, err = evaluate(whole, "--episodes", 5, "--env", ENV, capsys=capsys)
    assert code == 0, err
    result = json.loads((whole / "eval.json").read_text())
    games = result["games"]
    assert games["anchor_update"] == 3
    for opponent in ("random", "anchor"):
        for seat in ("first", "second"):
            got = games[opponent][seat]
            assert got["games"] == 5 and got["win"] + got["draw"] + got["loss"] == 1.0
    assert result["win_rate_first"] == games["random"]["first"]["win"]
    assert result["anchor_win_rate_second"] == games["anchor"]["second"]["win"]
    first = games["random"]["first"]  # the summary names each opponent and seat
    assert f"vs the random player: first: {first['win']:.1%} won" in out
    assert "vs the anchor (update 3): first:" in out
    tactics = games["tactics"]["second"]  # a game the tactical player knows
    assert result["tactics_win_rate_second"] == tactics["win"]
    assert (f"vs the tactical player (one move deep): first: {games['tactics']['first']['win']:.1%}"
            f" won") in out and f"second: {tactics['win']:.1%} won" in out
    agent = agents.load(whole, env_id=ENV)
    try:  # the same checkpoint and seeds through the Python API
        assert agent.evaluate_team(5, True, result["seed"])["games"] == games
    finally:
        agent.close()


def test_resume_continues_exactly(whole, tmp_path, capsys):
    """Stopped after 2 updates and resumed to 6: the weights, the pool and the anchor of the
    run that did not stop."""
    stopped = tmp_path / "stopped"
    code, _, err = _train(stopped, 2 * STEP, capsys)
    assert code == 0, err
    code, _, err = train("--resume", stopped, "--total-steps", 6 * STEP, "--quiet",
                         "--env", ENV, capsys=capsys)
    assert code == 0, err
    a, b = agents.load(whole, env_id=ENV), agents.load(stopped, env_id=ENV)
    try:
        ta, tb = a.trackables(), b.trackables()
        np.testing.assert_array_equal(ta["self_play_pool_updates"].numpy(), [4, 2])
        np.testing.assert_array_equal(ta["self_play_anchor_updates"].numpy(), [3])
        for key in ("self_play_pool_weights", "self_play_anchor_weights", "updates"):
            np.testing.assert_array_equal(ta[key].numpy(), tb[key].numpy())
        for x, y in zip(a.net.variables, b.net.variables):
            np.testing.assert_array_equal(x.numpy(), y.numpy())
    finally:
        a.close(), b.close()


def test_eval_every_keeps_the_best_policy_by_its_worse_seat(tmp_path, capsys):
    """``--eval-every`` on a game: each evaluation plays the random player in both seats (the
    line says the win rates), eval.csv ranks by the worse seat, and best/ evaluates as a run."""
    out = tmp_path / "evals"
    code, text, err = _train(out, 4 * STEP, capsys, "--eval-every", 2 * STEP,
                             "--eval-episodes", 4)
    assert code == 0, err
    assert "win rate against random" in text + err
    with open(out / "eval.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == [2 * STEP, 4 * STEP]
    kept = json.loads((out / "best" / "best.json").read_text())
    assert kept["score"] == max(float(r["score"]) for r in rows)
    code, _, err = evaluate(out / "best", "--episodes", 4, "--env", ENV, "--seed", eval_seed(3),
                            capsys=capsys)
    assert code == 0, err
    result = json.loads((out / "best" / "eval.json").read_text())
    assert min(result["win_rate_first"], result["win_rate_second"]) == kept["score"]
