"""Benchmark statistics on tiny hand-computed arrays; IQM as scipy.stats.trim_mean(x, 0.25) /
rliable's aggregate_iqm, the bootstrap CI as rliable's stratified percentile bootstrap."""

from __future__ import annotations

import numpy as np
import pytest

from pgrad_app.experiments.benchmark import stats


@pytest.mark.parametrize("scores, expected", [
    ([1, 2, 3, 4, 5, 6, 7, 8], 4.5),  # n = 8: drop 2 at each end, mean of 3..6
    # Values from scipy.stats.trim_mean(x, 0.25) (scipy 1.17): floor(n / 4) dropped per end.
    ([1, 2, 4, 8, 16], 4.666666666666667),  # n = 5: drop 1 -> (2 + 4 + 8) / 3
    ([16, 1, 8, 2, 4], 4.666666666666667),  # order does not matter
    ([1, 2, 4, 8, 16, 32], 7.5),  # n = 6: drop 1 -> (2 + 4 + 8 + 16) / 4
    ([1, 2, 4, 8, 16, 32, 64], 12.4),  # n = 7: drop 1 -> 62 / 5
    ([1, 2, 4], 2.3333333333333335),  # n = 3: nothing dropped, the mean
    ([3, 1, 100, 2], 2.5),  # n = 4: drop 1 -> (2 + 3) / 2; the outlier is gone
    # [runs, tasks] is pooled (rliable.metrics.aggregate_iqm gives 12.0): drop 2 of 10 per end.
    ([[1, 10], [2, 20], [3, 30], [4, 40], [5, 50]], 12.0),
])
def test_iqm_matches_trim_mean(scores, expected):
    assert stats.iqm(scores) == pytest.approx(expected, rel=1e-12)


def test_trim_mean_and_mean_std():
    assert stats.trim_mean([1, 2, 3, 100], 0.0) == pytest.approx(26.5)
    assert stats.mean_std([1, 2, 3, 4]) == pytest.approx((2.5, np.sqrt(1.25)))  # ddof 0
    with pytest.raises(ValueError, match="proportion"):
        stats.trim_mean([1, 2], 0.5)
    with pytest.raises(ValueError, match="shape"):
        stats.iqm([])


def test_bootstrap_of_constant_scores_is_a_point():
    assert stats.bootstrap_ci([7.0, 7.0, 7.0]) == (7.0, 7.0)


def test_bootstrap_ci_hand_computed():
    # Two runs [0, 1]: the resampled mean is 0, 0.5 or 1 with probabilities 1/4, 1/2, 1/4, so
    # the 2.5% and 97.5% percentiles are 0 and 1.
    assert stats.bootstrap_ci([0.0, 1.0], np.mean) == (0.0, 1.0)
    # [0, 0, 3]: the mean is 0, 1, 2, 3 with P = 8/27, 12/27, 6/27, 1/27 (~3.7% > 2.5%).
    assert stats.bootstrap_ci([0.0, 0.0, 3.0], np.mean) == (0.0, 3.0)
    # ... and at 90% the upper bound is 2, since P(mean <= 2) = 26/27 > 95%.
    assert stats.bootstrap_ci([0.0, 0.0, 3.0], np.mean, confidence=0.9) == (0.0, 2.0)


def test_bootstrap_is_stratified_by_task():
    # Task 0 has runs {0, 10}, task 1 {100, 100}. Resampling within each task, the pooled mean
    # is (a + b + 200) / 4 with a, b in {0, 10}: 50, 52.5 or 55. Pooled resampling across tasks
    # would reach 0 (every draw from task 0).
    scores = [[0.0, 100.0], [10.0, 100.0]]
    assert stats.bootstrap_ci(scores, np.mean) == (50.0, 55.0)


def test_bootstrap_matches_rliable():
    # rliable 1.2.0 library.get_interval_estimates(reps=50000, method="percentile") on these
    # scores as [5 runs, 1 task]: IQM (-26.67) CI [-100, 56.667], mean CI [-82, 38].
    scores = [-120.0, -60.0, -30.0, 10.0, 80.0]
    assert stats.iqm(scores) == pytest.approx(-26.666666666666668)
    assert stats.bootstrap_ci(scores, reps=50_000) == pytest.approx((-100.0, 56.666666666666664))
    assert stats.bootstrap_ci(scores, np.mean, reps=50_000) == pytest.approx((-82.0, 38.0))


def test_bootstrap_is_reproducible_and_brackets_the_estimate():
    rng = np.random.default_rng(1)
    scores = rng.normal(100.0, 30.0, size=10)
    low, high = stats.bootstrap_ci(scores)
    assert (low, high) == stats.bootstrap_ci(scores)  # fixed seed
    assert low < stats.iqm(scores) < high
    wide = stats.bootstrap_ci(scores, confidence=0.99)
    assert wide[0] <= low and high <= wide[1]


def test_bootstrap_mean_band():
    lower, upper = stats.bootstrap_mean_band([[0.0, 2.0, 5.0], [1.0, 2.0, 7.0]])
    np.testing.assert_array_equal(lower, [0.0, 2.0, 5.0])  # same logic as [0, 1] above
    np.testing.assert_array_equal(upper, [1.0, 2.0, 7.0])
    with pytest.raises(ValueError, match="runs, points"):
        stats.bootstrap_mean_band([1.0, 2.0])


# -- rliable where it is installed ------------------------------------------------------------


def test_iqm_interval_is_rliables_and_leaves_numpys_global_state_alone():
    if not stats.has_rliable():
        pytest.skip("rliable does not import here")
    from rliable import library, metrics

    scores = [-120.0, -60.0, -30.0, 10.0, 80.0]
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    iqm, (low, high) = stats.iqm_interval(scores)
    assert np.array_equal(np.random.get_state()[1], before)  # restored
    np.random.seed(stats.SEED)  # rliable itself, as iqm_interval calls it
    point, ci = library.get_interval_estimates(
        {"x": np.array(scores)[:, None]}, lambda s: np.array([metrics.aggregate_iqm(s)]),
        reps=stats.REPS)
    assert iqm == point["x"][0] == pytest.approx(-26.666666666666668)
    assert (low, high) == (ci["x"][0, 0], ci["x"][1, 0])
    assert stats.iqm_interval(scores) == (iqm, (low, high))  # reproducible
    assert "rliable" in stats.interval_method()


def test_iqm_interval_without_rliable_is_the_numpy_bootstrap(monkeypatch):
    monkeypatch.setattr(stats, "has_rliable", lambda: False)
    scores = [1.0, 2.0, 4.0, 8.0, 16.0]
    assert stats.iqm_interval(scores) == (stats.iqm(scores), stats.bootstrap_ci(scores))
    assert "rliable not installed" in stats.interval_method()


@pytest.mark.parametrize("broken, says", [
    (None, "rliable is not installed: pip install 'pgrad[compare]'"),
    ("raise TypeError('deprecate_kwarg() missing 1 required positional argument')",
     "rliable is installed but does not import (deprecate_kwarg() missing"),
])
def test_a_missing_or_broken_rliable_is_one_line_naming_the_extra(broken, says, monkeypatch,
                                                                   tmp_path):
    import sys

    from pgrad_app.errors import UserError

    if broken is None:
        monkeypatch.setitem(sys.modules, "rliable", None)  # import rliable -> ImportError
    else:
        (tmp_path / "rliable").mkdir()
        (tmp_path / "rliable" / "__init__.py").write_text(broken + "\n")
        for name in [m for m in sys.modules if m == "rliable" or m.startswith("rliable.")]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.syspath_prepend(str(tmp_path))
    stats._rliable.cache_clear()
    try:
        assert not stats.has_rliable()
        with pytest.raises(UserError) as err:
            stats.import_rliable()
        assert says in str(err.value) and "\n" not in str(err.value)
    finally:
        stats._rliable.cache_clear()
