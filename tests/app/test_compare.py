"""pgrad-compare on hand-written run directories (5 seeds x 2 algorithms): rliable's numbers
against numpy computed here, the command end to end, bad input in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import one_error_line

from pgrad_app.errors import run_cli
from pgrad_app.experiments.benchmark import stats

if not stats.has_rliable():
    pytest.skip("rliable does not import here (pip install 'pgrad[compare]')",
                allow_module_level=True)

from pgrad_app.cli import compare as compare_cli  # noqa: E402
from pgrad_app.experiments.compare import comparison, references, runs, scores  # noqa: E402

GOOD = [480.0, 490.0, 500.0, 470.0, 495.0]  # final evaluations of seeds 0-4
BAD = [20.0, 30.0, 25.0, 40.0, 35.0]
STEPS = np.arange(100, 10_001, 100)  # [100] env steps at which training episodes end
FAST = comparison.Options(reps=100, points=5)


def make_run(root: Path, name: str, agent: str, seed: int, final: float | None,
             returns=None, env: str = "CartPole-v1") -> Path:
    """A run directory as pgrad-train and pgrad-evaluate leave it (the files compare reads)."""
    d = root / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(f"agent: {agent}\nenv: {env}\nseed: {seed}\n")
    returns = 20.0 + 0.01 * seed * STEPS if returns is None else returns
    rows = "".join(f"{s},0.5,{r},{int(r)}\n" for s, r in zip(STEPS, returns))
    (d / "episodes.csv").write_text("step,wall_s,return,length\n" + rows)
    if final is not None:
        (d / "eval.json").write_text(json.dumps({"return_mean": final, "returns": [final]}))
    return d


@pytest.fixture
def two_algorithms(tmp_path) -> Path:
    root = tmp_path / "runs"
    for seed, (good, bad) in enumerate(zip(GOOD, BAD)):
        make_run(root, f"ppo-{seed}", "ppo", seed, good)
        make_run(root, f"a2c-{seed}", "a2c", seed, bad)
    return root


def interquartile_mean(x) -> float:
    """By hand: sort, drop floor(n / 4) at each end, average the rest."""
    x = np.sort(np.ravel(x))
    cut = len(x) // 4
    return float(np.mean(x[cut:len(x) - cut]))


def test_the_iqm_is_the_interquartile_mean_of_the_normalised_scores(two_algorithms):
    found = comparison.compare([f"good={two_algorithms}/ppo-*", f"bad={two_algorithms}/a2c-*"],
                               FAST)
    assert found.table.groups == ["good", "bad"] and found.table.normalised
    cartpole = references.lookup("CartPole-v1")
    assert (cartpole.random, cartpole.reference) == (22.2, 500.0)
    for group, finals in (("good", GOOD), ("bad", BAD)):
        normed = (np.array(finals) - 22.2) / (500.0 - 22.2)
        iqm, gap, mean, median = found.estimates[group]
        assert iqm.point == pytest.approx(interquartile_mean(normed), rel=1e-12)
        # The middle three of five: (480, 490, 495) and (25, 30, 35).
        assert iqm.point == pytest.approx((np.mean(sorted(finals)[1:4]) - 22.2) / 477.8)
        assert gap.point == pytest.approx(1.0 - np.mean(np.minimum(normed, 1.0)))
        assert mean.point == median.point == pytest.approx(normed.mean())  # one task
        assert iqm.low <= iqm.point <= iqm.high
        np.testing.assert_array_equal(found.raw[group][:, 0], finals)  # in seed order
    assert found.names == ["IQM", "Optimality gap", "Mean", "Median"]
    again = comparison.compare([f"good={two_algorithms}/ppo-*", f"bad={two_algorithms}/a2c-*"],
                               FAST)
    assert again.estimates == found.estimates  # seeded: the same intervals


def test_raw_returns_give_the_raw_iqm_and_no_gap_without_a_threshold(two_algorithms):
    options = comparison.Options(reps=100, normalise="none", curves=False)
    found = comparison.compare([str(two_algorithms)], options)  # grouped by config's agent
    assert found.table.groups == ["a2c", "ppo"] and not found.table.normalised
    assert found.names == ["IQM", "Mean", "Median"]
    assert found.estimates["ppo"][0].point == pytest.approx(interquartile_mean(GOOD))
    assert found.estimates["a2c"][0].point == pytest.approx(interquartile_mean(BAD))
    with_gap = comparison.compare([str(two_algorithms)],
                                  comparison.Options(reps=50, normalise="none", curves=False,
                                                     gap_threshold=490.0))
    assert with_gap.estimates["ppo"][1].point == pytest.approx(
        490.0 - np.mean(np.minimum(GOOD, 490.0)))


def test_a_clearly_better_algorithm_improves_with_probability_one(two_algorithms):
    found = comparison.compare([f"good={two_algorithms}/ppo-*", f"bad={two_algorithms}/a2c-*"],
                               FAST)
    ((x, y, p),) = found.pairs
    assert (x, y) == ("good", "bad") and (p.point, p.low, p.high) == (1.0, 1.0, 1.0)
    # Interleaved scores: the Mann-Whitney statistic by hand, P(X > Y) + P(X = Y) / 2.
    a, b = np.array([1.0, 3.0, 5.0, 7.0, 9.0]), np.array([2.0, 4.0, 6.0, 8.0, 10.0])
    from pgrad_app.experiments.compare import metrics

    ((_, _, mixed),) = metrics.improvement({"a": a[:, None], "b": b[:, None]}, ["a", "b"], 100)
    assert mixed.point == pytest.approx(np.mean(a[:, None] > b[None, :]))  # 10 / 25
    assert mixed.low < mixed.point < mixed.high


def test_sample_efficiency_is_the_iqm_of_the_rolling_training_return(two_algorithms):
    found = comparison.compare([f"good={two_algorithms}/ppo-*", f"bad={two_algorithms}/a2c-*"],
                               comparison.Options(reps=50, points=3, window=20))
    np.testing.assert_allclose(found.x, [100.0, 5050.0, 10_000.0])
    # At 10,000 steps: each run's last 20 episodes end at 8,100..10,000; seed s's returns there
    # are 20 + 0.01 s step, averaging 20 + 0.01 s 9,050; the IQM of five, normalised.
    last = np.array([20.0 + 0.01 * s * 9050.0 for s in range(5)])
    expected = interquartile_mean((last - 22.2) / 477.8)
    assert found.efficiency["good"][-1] == pytest.approx(expected)
    assert found.efficiency["good"][0] == pytest.approx(interquartile_mean(
        (np.array([20.0 + s for s in range(5)]) - 22.2) / 477.8))  # each run's first episode


def test_the_command_prints_the_tables_and_writes_the_figures(two_algorithms, tmp_path, capsys):
    out = tmp_path / "out"
    code = run_cli(compare_cli.main, [f"good={two_algorithms}/ppo-*",
                                      f"bad={two_algorithms}/a2c-*", "--fast", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "good" in printed and "P(X > Y)" in printed and "IQM" in printed
    for name in ("aggregates.png", "performance_profiles.png", "sample_efficiency.png",
                 "probability_of_improvement.png"):
        assert (out / name).stat().st_size > 5000, name
    data = json.loads((out / "compare.json").read_text())
    assert data["reps"] == 200 and data["unit"] == "normalised score"
    assert data["references"]["CartPole-v1"]["reference"] == 500.0
    good_iqm = data["groups"]["good"]["metrics"]["IQM"]
    assert good_iqm["point"] == pytest.approx(interquartile_mean(
        (np.array(GOOD) - 22.2) / 477.8))
    assert data["probability_of_improvement"][0]["point"] == 1.0
    assert len(data["sample_efficiency"]["x"]) == 10  # --fast


def test_a_sweeps_results_are_read_once_with_their_grid_points(tmp_path):
    results = tmp_path / "sweep"
    for seed in range(3):
        for point, final in (("learning_rate=1e-3", 400.0 + seed), ("learning_rate=1e-2", 50.0)):
            name = f"a2c__CartPole-v1__{point.replace('=', '-')}__seed{seed}"
            run = make_run(results / "runs", name, "a2c", seed, final)
            (results / f"{name}.json").write_text(json.dumps({
                "agent": f"a2c {point}", "env": "CartPole-v1", "seed": seed, "budget": 10_000,
                "steps": 10_000, "eval_episodes": 1, "wall_s": 1.0, "run_dir": str(run),
                "eval": {"return_mean": final}, "curve": [[100, 20.0], [10_000, 60.0]],
                "curve_block": 1}))
    found = runs.collect([str(results)])
    assert len(found) == 6 and {r.path.suffix for r in found} == {".json"}
    assert sorted({r.group for r in found}) == ["a2c learning_rate=1e-2", "a2c learning_rate=1e-3"]


def test_last_episodes_scores_the_training_returns(two_algorithms):
    table = scores.arrange(runs.collect([str(two_algorithms)]))
    raw = scores.raw_scores(table, last_episodes=10)
    # Seed s: the mean of 20 + 0.01 s step over the last 10 steps (9,100..10,000).
    expected = [20.0 + 0.01 * s * np.mean(STEPS[-10:]) for s in range(5)]
    np.testing.assert_allclose(raw["ppo"][:, 0], expected)


def test_cartpoles_random_score_is_what_a_random_policy_scores():
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    env.action_space.seed(0)
    returns = []
    for i in range(300):
        env.reset(seed=i)
        done, total = False, 0.0
        while not done:
            _, r, terminated, truncated, _ = env.step(env.action_space.sample())
            total, done = total + r, terminated or truncated
        returns.append(total)
    env.close()
    assert np.mean(returns) == pytest.approx(references.CLASSIC["CartPole-v1"][0], abs=2.0)


def test_references_by_env_id():
    assert references.lookup("ALE/Breakout-v5").random == 1.7
    assert references.lookup("BreakoutNoFrameskip-v4").reference == 30.5
    assert references.lookup("HalfCheetah-v5").reference == 12135.0
    assert references.lookup("my_module:Hopper-v4").what == "D4RL expert"
    for none in ("MinAtar/Breakout-v1", "CartPole-v0", "Pendulum-v1", "Breakout-v5"):
        assert references.lookup(none) is None, none
    ref = references.lookup("ALE/Pong-v5")
    assert ref.normalise(14.6) == pytest.approx(1.0) and ref.normalise(-20.7) == 0.0


def _error(argv, capsys) -> str:
    code = run_cli(compare_cli.main, [*map(str, argv), "--fast", "--no-curves"])
    assert code == 2
    return one_error_line(capsys.readouterr().err)


def test_bad_input_is_one_line(two_algorithms, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert "no runs in this folder" in _error([tmp_path / "empty"], capsys)
    assert "group 'x' is empty" in _error([f"x={tmp_path}/empty", two_algorithms], capsys)
    assert "matches nothing" in _error([f"x={tmp_path}/nothing-*"], capsys)
    assert "no such run directory" in _error([tmp_path / "missing"], capsys)
    lonely = make_run(tmp_path / "r", "none", "ppo", 0, 1.0, returns=[])
    assert f"{lonely / 'episodes.csv'}: no finished training episode" in _error([lonely], capsys)
    make_run(tmp_path / "u", "unevaluated", "ppo", 0, None)
    assert "not evaluated (no eval.json)" in _error([tmp_path / "u"], capsys)
    make_run(tmp_path / "e", "acrobot", "ppo", 9, 1.0, env="Acrobot-v1")
    assert "group 'a2c' has no run on Acrobot-v1" in _error(
        [two_algorithms, tmp_path / "e"], capsys)
    assert "1 on Acrobot-v1, 5 on CartPole-v1" in _error(
        [f"ppo={two_algorithms}/ppo-*", tmp_path / "e"], capsys)
    make_run(tmp_path / "m", "minatar", "ppo", 0, 1.0, env="MinAtar/Breakout-v1")
    assert "no published random/reference score for MinAtar/Breakout-v1" in _error(
        [tmp_path / "m", "--normalize", "require"], capsys)


def test_without_rliable_the_command_names_the_extra(two_algorithms, monkeypatch, capsys):
    monkeypatch.setattr(stats, "_rliable", lambda: "rliable is not installed: "
                        f"{stats.RLIABLE_HINT}")
    line = _error([two_algorithms], capsys)
    assert line == "error: rliable is not installed: pip install 'pgrad[compare]'"
