"""Every setting that decides how long something runs is bounded before any work, and every
wait has a deadline: pgrad-evaluate's attack steps, radii and episodes, pgrad-tune's trials,
steps and episodes, and the wait for a study database another process holds locked."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import evaluate, one_error_line

import agents
from pgrad.rl.evaluation import attacks
from pgrad_app.errors import run_cli

optuna = pytest.importorskip("optuna")

from pgrad_app.cli import tune as tune_cli  # noqa: E402
from pgrad_app.experiments.tuning import study as tune_study  # noqa: E402

TINY = ["--agent", "a2c", "--env", "CartPole-v1", "--set", "hidden=[16]", "--eval-episodes", "3",
        "--steps", "1000"]


@pytest.fixture
def tiny(tmp_path) -> list[str]:
    """TINY with a one-key search space (learning rate) of its own."""
    space = tmp_path / "space.yaml"
    space.write_text("learning_rate: {type: log_float, low: 1.0e-4, high: 3.0e-3}\n")
    return [*TINY, "--space", str(space)]


def tune_main(*argv, capsys) -> tuple[int, str, str]:
    code = run_cli(tune_cli.main, [str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("saved") / "agent"
    agent = agents.make("a2c", "CartPole-v1", seed=0, num_envs=2, n_steps=4, hidden=(8,))
    agent.step()
    agent.save(str(out))
    agent.close()
    return out


@pytest.mark.parametrize("argv, says", [
    (["--attack", "pgd", "--pgd-steps", "10001"], "--pgd-steps must be in [1, 10,000]"),
    (["--attack", "pgd", "--pgd-steps", "0"], "--pgd-steps must be in [1, 10,000]"),
    (["--attack", "fgsm", "--epsilon", ",".join(f"{0.001 * i:g}" for i in range(1, 40))],
     "--epsilon: at most 32 values (0 included)"),
    (["--episodes", "10001"], "--episodes must be in [1, 10,000]"),
    (["--episodes", "0"], "--episodes must be in [1, 10,000]"),
])
def test_evaluation_bounds_are_one_line_before_any_episode(saved, capsys, argv, says):
    before = sorted(p.name for p in saved.iterdir())
    start = time.monotonic()
    code, out, err = evaluate(saved, *argv, capsys=capsys)
    assert code == 2 and out == "" and says in one_error_line(err), err
    assert time.monotonic() - start < 10
    assert sorted(p.name for p in saved.iterdir()) == before  # no eval file, no plot


def test_the_largest_pgd_step_count_is_accepted_and_the_api_keeps_the_bounds():
    assert attacks.check_budget("pgd", [0.1, 0.01], attacks.MAX_PGD_STEPS) == [0.0, 0.01, 0.1]
    for kind, eps, steps, says in [
        ("pgd", [0.1], attacks.MAX_PGD_STEPS + 1, "pgd_steps must be in [1, 10,000]"),
        ("pgd", [0.1], 0, "pgd_steps must be in [1, 10,000]"),
        ("fgsm", [i / 100 for i in range(1, 33)], 1, "at most 32 epsilons"),
        ("fgsm", [-0.1], 1, "finite and >= 0"),
        ("cw", [0.1], 1, "attack must be one of fgsm, pgd"),
    ]:
        with pytest.raises(ValueError, match=re.escape(says)):
            attacks.check_budget(kind, eps, steps)
    assert len(attacks.check_budget("fgsm", [i / 100 for i in range(1, 32)], 1)) == 32


@pytest.mark.parametrize("argv, says", [
    (["--n-trials", "10001"], "--n-trials must be <= 10,000"),
    (["--workers", "5000"], "--workers must be <= 1,024"),
    (["--steps", str(10**13)], "--steps must be in [1, 1,000,000,000,000]"),
    (["--eval-episodes", "100000"], "--eval-episodes must be in [1, 10,000]"),
    (["--timeout", "inf"], "--timeout must be > 0 seconds and finite"),
])
def test_tune_bounds_are_one_line_before_any_trial(tmp_path, tiny, capsys, argv, says):
    results = tmp_path / "r"
    code, out, err = tune_main(*tiny, "--results", results, *argv, capsys=capsys)
    assert code == 2 and says in one_error_line(err), err
    assert not results.exists()


def test_a_bad_lock_wait_setting_is_one_line(tmp_path, tiny, capsys, monkeypatch):
    for value in ("abc", "0", "-5", "1e9", "nan"):
        monkeypatch.setenv(tune_study.LOCK_WAIT_ENV, value)
        code, _, err = tune_main(*tiny, "--results", tmp_path / "r", capsys=capsys)
        assert code == 2 and f"{tune_study.LOCK_WAIT_ENV}='{value}': expected seconds in (0, " \
            "3600]" in one_error_line(err), err
    monkeypatch.delenv(tune_study.LOCK_WAIT_ENV)
    assert tune_study.lock_wait() == tune_study.LOCK_WAIT_S == 60.0


# -- a study database another process holds locked -------------------------------------------


def _hold_lock(db: Path) -> subprocess.Popen:
    """Another process holding ``db`` with ``BEGIN EXCLUSIVE`` (no reader or writer gets in)."""
    code = ("import sqlite3, sys, time\n"
            f"c = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
            "c.execute('BEGIN EXCLUSIVE')\n"
            "print('locked', flush=True)\n"
            "time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def _locked_study(tmp_path: Path) -> tuple[Path, subprocess.Popen]:
    results = tmp_path / "r"
    results.mkdir()
    db = results / tune_study.STUDY_FILE
    storage = optuna.storages.RDBStorage(f"sqlite:///{db}")
    optuna.create_study(storage=storage, study_name="a2c-CartPole-v1")
    storage.engine.dispose()
    return results, _hold_lock(db)


def _give_up_time(results: Path, tiny: list[str], capsys) -> tuple[float, str]:
    start = time.monotonic()
    code, out, err = tune_main(*tiny, "--results", results, capsys=capsys)
    took = time.monotonic() - start
    assert code == 2 and out == "", err
    return took, one_error_line(err)


def test_a_locked_study_is_given_up_after_the_set_wait(tmp_path, tiny, capsys, monkeypatch):
    monkeypatch.setenv(tune_study.LOCK_WAIT_ENV, "4")
    results, holder = _locked_study(tmp_path)
    try:
        took, line = _give_up_time(results, tiny, capsys)
    finally:
        holder.kill()
        holder.wait()
    assert 4 <= took <= 15, took
    assert "the study database is locked by another process; gave up after 4 s" in line
    assert f"set {tune_study.LOCK_WAIT_ENV}=SECONDS to wait longer" in line
    # Released: the same command opens the study at once (no trial needed to see it).
    monkeypatch.setenv(tune_study.LOCK_WAIT_ENV, "4")
    start = time.monotonic()
    storage = tune_study.open_storage(tune_study.storage_url(results))
    assert time.monotonic() - start < 4
    assert [s.study_name for s in storage.get_all_studies()] == ["a2c-CartPole-v1"]


def test_without_the_variable_the_command_waits_the_default(tmp_path, tiny, capsys,
                                                          monkeypatch):
    """With the variable unset the command waits ``LOCK_WAIT_S`` (60 s: the tests above and
    below check the value and the docs), here set to 3 s so the test does not sit a minute."""
    monkeypatch.delenv(tune_study.LOCK_WAIT_ENV, raising=False)
    monkeypatch.setattr(tune_study, "LOCK_WAIT_S", 3.0)
    results, holder = _locked_study(tmp_path)
    try:
        took, line = _give_up_time(results, tiny, capsys)
    finally:
        holder.kill()
        holder.wait()
    assert 3 <= took <= 15, took
    assert "gave up after 3 s" in line


def test_the_documented_wait_is_the_code_s():
    text = (Path(__file__).resolve().parents[2] / "docs" / "tuning.md").read_text()
    assert "gives up after 60 s" in text and tune_study.LOCK_WAIT_S == 60.0
    assert tune_study.LOCK_WAIT_ENV in text
