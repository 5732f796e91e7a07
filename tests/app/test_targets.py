"""The learning targets (scripts/learning_targets.py): agent.learn with the target as a
callback, deterministic evaluations by pgrad's protocol, the table."""

from __future__ import annotations

import pytest

from pgrad_app.experiments.benchmark import targets


@pytest.fixture
def tiny_rows(monkeypatch):
    rows = {"easy": ("a2c", "CartPole-v1", 5000, 5.0, 2),     # reached at once, stops there
            "hard": ("a2c", "CartPole-v1", 320, 1e9, 0)}       # never reached: the whole budget
    monkeypatch.setattr(targets, "ROWS", rows)
    return rows


def test_a_reached_target_stops_the_run_and_an_unreached_one_runs_the_budget(tiny_rows):
    easy = targets.run("easy", 0, {"n_steps": 4, "hidden": [8]})
    assert easy["solved"] and easy["steps_to_target"] == easy["env_steps"] < 5000
    assert easy["eval_untrained"] is not None and easy["eval_mean"] is not None
    hard = targets.run("hard", 0, {"n_steps": 4, "hidden": [8]})
    assert not hard["solved"] and hard["steps_to_target"] is None
    assert hard["env_steps"] >= 320 and "eval_mean" not in hard
    table = targets.markdown([easy, hard])
    assert "| easy | 0 |" in table and "| hard | 0 | not reached |" in table


def test_overrides_are_typed_and_validated_as_set_is(tiny_rows):
    from pgrad_app.errors import UserError

    with pytest.raises(UserError, match="--set gamma"):
        targets.run("hard", 0, {"gamma": 1.5})
