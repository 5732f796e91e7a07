"""pgrad-evaluate on a run of a game of many agents: the team's return (the mean over agents of
each agent's episode return) beside each agent's, equal to the agent's own evaluate_team."""

from __future__ import annotations

import json

import pytest
from cli_helpers import evaluate, one_error_line, train

import agents

pytest.importorskip("mpe2")
ENV = "mpe2.simple_spread_v3:parallel_env"


def test_evaluate_reports_the_team_and_each_agent(tmp_path, capsys):
    run = tmp_path / "run"
    code, _, err = train("--algo", "ippo", "--env", ENV, "--total-steps", 800, "--out", run,
                         "--quiet", capsys=capsys)
    assert code == 0, err
    code, out, err = evaluate(run, "--episodes", 3, "--env", ENV, capsys=capsys)
    assert code == 0, err
    result = json.loads((run / "eval.json").read_text())
    each = result["agent_return_mean"]
    assert set(each) == {"agent_0", "agent_1", "agent_2"} and result["episodes"] == 3
    assert result["return_mean"] == pytest.approx(sum(each.values()) / 3)
    assert "the team's: the mean over agents" in out and "agent_2" in out
    agent = agents.load(run, env_id=ENV)
    try:  # the same checkpoint and seeds through the Python API
        mine = agent.evaluate_team(3, True, result["seed"])
    finally:
        agent.close()
    assert mine["return_mean"] == pytest.approx(result["return_mean"], rel=1e-6)
    code, _, err = evaluate(run, "--episodes", 2, "--env", ENV, "--attack", "fgsm",
                            capsys=capsys)
    assert code != 0 and "team's return only" in one_error_line(err)
