"""What the figures beside other projects (pgrad_app.perf.peers) share in pgrad_app.perf.common:
``alternate_rounds`` (the order of the runs A, B, B, A, ..., the per-round ratios and their
median, the load average around every run, its bad arguments; fake runners), ``side_process``
(one side's JSON line from a real child process, a failed run in one message) and
``interpreter_missing``."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from pgrad_app.perf import common


def fake_sides(order: list[str], walls: dict[str, list[float]]):
    """Runners that log their side and return ``{"side", "steps": 100, "wall_s", "cpu_s"}``."""
    left = {side: iter(values) for side, values in walls.items()}

    def runner(side: str):
        def run() -> dict:
            order.append(side)
            wall = next(left[side])
            return {"side": side, "steps": 100, "wall_s": wall, "cpu_s": 2 * wall}

        return run

    return {side: runner(side) for side in walls}


def per_wall(run: dict) -> float:
    return run["steps"] / run["wall_s"]


def per_cpu(run: dict) -> float:
    return run["steps"] / run["cpu_s"]


def test_sides_alternate_and_every_round_gives_its_ratios(monkeypatch):
    loads = itertools.count(1.0)  # 1, 2, 3, ...: one reading before the first run, one per run
    monkeypatch.setattr(common.os, "getloadavg", lambda: (next(loads) + 0.004, 0.0, 0.0))
    order: list[str] = []
    walls = {"ours": [1.0, 4.0, 2.0, 0.5, 1.0], "theirs": [3.0, 4.0, 3.0, 2.0, 1.0]}
    out = common.alternate_rounds(fake_sides(order, walls), 5, {"wall": per_wall, "cpu": per_cpu})
    assert order == ["ours", "theirs", "theirs", "ours", "ours", "theirs", "theirs", "ours",
                     "ours", "theirs"]
    assert [r["wall_s"] for r in out.runs["ours"]] == walls["ours"]
    assert [r["wall_s"] for r in out.runs["theirs"]] == walls["theirs"]
    want = [t / o for o, t in zip(walls["ours"], walls["theirs"])]  # rate = steps / wall
    np.testing.assert_allclose(out.ratios["wall"], want)
    np.testing.assert_allclose(out.ratios["cpu"], want)  # cpu = 2 x wall on both sides
    assert out.median("wall") == pytest.approx(float(np.median(want))) == pytest.approx(1.5)
    assert out.load_avg_1m == [float(k) for k in range(1, 12)]  # rounded to 2 decimals
    assert out.side_median("ours", per_wall) == 100.0  # median of 100, 25, 50, 200, 100
    assert out.side_median("theirs", per_wall) == 33.3


def test_one_round_runs_each_side_once_in_the_given_order(monkeypatch):
    monkeypatch.setattr(common.os, "getloadavg", lambda: (0.5, 0.0, 0.0))
    order: list[str] = []
    sides = fake_sides(order, {"b": [2.0], "a": [1.0]})  # the first named is the numerator
    out = common.alternate_rounds(sides, 1, {"wall": per_wall})
    assert order == ["b", "a"] and out.ratios == {"wall": [0.5]} and out.median("wall") == 0.5
    assert out.load_avg_1m == [0.5, 0.5, 0.5]


@pytest.mark.parametrize("sides, rounds, match", [
    ({"a": lambda: {}}, 1, "sides must name exactly two"),
    ({"a": lambda: {}, "b": lambda: {}, "c": lambda: {}}, 1, "sides must name exactly two"),
    ({"a": lambda: {}, "b": lambda: {}}, 0, "rounds must be >= 1"),
])
def test_bad_arguments_are_refused_before_any_run(sides, rounds, match):
    with pytest.raises(ValueError, match=f"alternate_rounds: {match}"):
        common.alternate_rounds(sides, rounds, {"wall": per_wall})


def test_a_side_process_gives_its_last_side_line_and_its_whole_process_times():
    code = ("import json; print('starting'); print(json.dumps({'side': 'x', 'n': 1})); "
            "print(json.dumps({'side': 'x', 'n': 2})); print('done')")
    out = common.side_process([sys.executable, "-c", code], "the x run")
    assert out["side"] == "x" and out["n"] == 2  # the last such line
    assert out["process_wall_s"] > 0 and out["process_cpu_s"] >= 0
    assert json.loads(json.dumps(out)) == out


@pytest.mark.parametrize("code, exit_code", [
    ("import json, sys; print(json.dumps({'side': 1})); sys.stderr.write('boom'); sys.exit(3)",
     3),
    ("import sys; print('no record'); sys.stderr.write('boom')", 0),
])
def test_a_failed_side_process_is_one_error_naming_the_run(code, exit_code):
    with pytest.raises(RuntimeError, match=rf"^the x run failed \(exit {exit_code}\):\nboom$"):
        common.side_process([sys.executable, "-c", code], "the x run")


def test_a_missing_or_unrunnable_interpreter_is_one_line(tmp_path):
    args = ("TRL", "torch and trl", "PGRAD_X_PYTHON")
    missing = tmp_path / "bin" / "python"
    plain = tmp_path / "plain"
    plain.write_text("")
    for python in (missing, plain, tmp_path):
        reason = common.interpreter_missing(python, *args)
        assert reason == (f"no TRL interpreter at {python} (a venv with torch and trl; "
                          "PGRAD_X_PYTHON names another)")
    assert common.interpreter_missing(Path(sys.executable), *args) is None
