"""pgrad-tune: search spaces (schema and errors), the study's counting rules, and small real
studies on CartPole: pruning, best.yaml trained by pgrad-train, resuming after ``kill -9``, and
two processes sharing one SQLite study."""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from cli_helpers import ROOT, one_error_line, train

optuna = pytest.importorskip("optuna")

import agents  # noqa: E402
import pgrad  # noqa: E402
from pgrad.rl.evaluation.evaluate_policy import eval_seed  # noqa: E402
from pgrad_app.cli import tune as tune_cli  # noqa: E402
from pgrad_app.errors import Interrupted, UserError, run_cli  # noqa: E402
from pgrad_app.experiments.tuning import search as tune  # noqa: E402
from pgrad_app.experiments.tuning import search_spaces  # noqa: E402
from pgrad_app.experiments.tuning import study as tune_study  # noqa: E402
from pgrad_app.experiments.tuning import trials as tune_trials  # noqa: E402

#: The pruning study's space: 1e-9 leaves the initial policy as it is (seed 2: a deterministic
#: return of 114 on its evaluation episodes), 5.0 collapses it onto one action within a few
#: updates (return 9, CartPole's floor). Any trial of 5.0 after one of 1e-9 is pruned; seed 2's
#: random sampler draws 1e-9, 1e-9, 5.0.
HOPELESS = 5.0
PRUNE_SPACE = "learning_rate: {type: categorical, choices: [1.0e-9, 5.0]}\n"
PRUNE_SEED = 2
#: The space of the resume and sharing studies.
LR_SPACE = "learning_rate: {type: log_float, low: 1.0e-4, high: 3.0e-3}\n"
#: Tiny trials: 1,000-2,000 env steps of A2C (16 envs x 5 steps per update) with one hidden layer.
TINY = ["--agent", "a2c", "--env", "CartPole-v1", "--set", "hidden=[16]", "--eval-episodes", "3"]


def tune_main(*argv, capsys=None) -> tuple[int, str, str]:
    """``pgrad-tune ARGV`` in this process; returns (exit code, stdout, stderr)."""
    code = run_cli(tune_cli.main, [str(a) for a in argv])
    out = capsys.readouterr() if capsys is not None else None
    return code, (out.out if out else ""), (out.err if out else "")


def popen_tune(*argv) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, str(ROOT / "scripts" / "tune.py"), *map(str, argv)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def load(results: Path, name: str = "a2c-CartPole-v1"):
    return optuna.load_study(study_name=name, storage=f"sqlite:///{results / 'study.db'}")


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# -- search spaces ----------------------------------------------------------------------------


def test_shipped_spaces_load_for_every_agent_and_ship_as_package_data():
    section = (ROOT / "pyproject.toml").read_text().split("[tool.setuptools.package-data]")[1]
    globs = re.findall(r'"([^"]+\.yaml)"', section.split("\n[", 1)[0])
    for name in agents.names():
        space = search_spaces.load(name, agents.get(name).Config)
        assert {"learning_rate", "hidden"} & set(space.keys), name
        if search_spaces.declared_space(name) is not None:  # carried by its declaration
            assert not search_spaces.path_for(name).exists(), name
            continue
        rel = search_spaces.path_for(name).relative_to(ROOT / "pgrad_app").as_posix()
        assert any(fnmatch.fnmatch(rel, g) for g in globs), rel
    assert search_spaces.declared_space("trpo") is not None


def test_a_space_samples_typed_values_for_the_config(tmp_path):
    path = write(tmp_path / "s.yaml", (
        "learning_rate: {type: log_float, low: 1.0e-5, high: 1.0e-2}\n"
        "gamma: {type: log_float, low: 1.0e-4, high: 0.03, one_minus: true}\n"
        "n_steps: {type: int, low: 8, high: 64, step: 8}\n"
        "hidden: {type: categorical, choices: [[64], [256, 256]]}\n"
        "normalize_advantage: {type: categorical, choices: [true, false]}\n"))
    space = search_spaces.load("a2c", agents.get("a2c").Config, path)
    fixed = optuna.trial.FixedTrial({"learning_rate": 1e-3, "one_minus_gamma": 0.01,
                                     "n_steps": 24, "hidden": "[256, 256]",
                                     "normalize_advantage": False})
    values = space.sample(fixed)
    assert values == {"learning_rate": 1e-3, "gamma": pytest.approx(0.99), "n_steps": 24,
                      "hidden": (256, 256), "normalize_advantage": False}
    # Optuna sees list choices as their YAML text, and one_minus under its own name.
    assert space.params[3].labels() == ["[64]", "[256, 256]"]
    assert [p.name for p in space.params][:2] == ["learning_rate", "one_minus_gamma"]


def test_number_types_fit_fields_that_also_take_other_values(tmp_path):
    @dataclasses.dataclass
    class Config:  # e.g. a learning rate that also takes a schedule such as "lin_1e-3"
        learning_rate: float | str = 1e-3
        mode: int | str = 1

    path = write(tmp_path / "s.yaml", "learning_rate: {type: log_float, low: 1.0e-5, high: 1}\n"
                 "mode: {type: int, low: 1, high: 4}\n")
    space = search_spaces.load("x", Config, path)
    assert space.sample(optuna.trial.FixedTrial({"learning_rate": 0.5, "mode": 2})) == {
        "learning_rate": 0.5, "mode": 2}
    write(path, "mode: {type: float, low: 1, high: 4}\n")
    says = "mode is int | str; use int, log_int or categorical"
    with pytest.raises(UserError, match=re.escape(says)):
        search_spaces.load("x", Config, path)


@pytest.mark.parametrize("text, says", [
    ("learning_rat: {type: float, low: 0.1, high: 1}", "learning_rat: unknown hyperparameter "
     "of a2c. Did you mean one of 'learning_rate'"),
    ("total_steps: {type: int, low: 1, high: 9}", "total_steps: a run setting"),
    ("gamma: 0.99", "gamma: expected a mapping with a type"),
    ("gamma: {type: uniform, low: 0.9, high: 1}", "gamma: type must be one of"),
    ("gamma: {type: float, low: 0.9}", "gamma: float needs low and high"),
    ("gamma: {type: float, low: 0.9, high: 1, choices: [1]}", "gamma: float takes low, high"),
    ("gamma: {type: float, low: 1, high: 0.9}", "gamma: low must be < high"),
    ("ent_coef: {type: log_float, low: 0, high: 0.1}", "ent_coef: log_float needs low > 0"),
    ("n_steps: {type: float, low: 1, high: 9}", "n_steps: type float samples floats, but "
     "n_steps is int; use int, log_int or categorical"),
    ("n_steps: {type: int, low: 1, high: 9.5}", "n_steps: high: expected an integer"),
    ("n_steps: {type: int, low: 1, high: 9, step: 3}", "step must be >= 1 and divide"),
    ("hidden: {type: categorical, choices: []}", "hidden: choices must be a non-empty list"),
    ("hidden: {type: categorical, choices: [64]}", "hidden: choice 64: expected a list"),
    ("activation: {type: categorical, choices: [tanh, tanh]}", "choices hold a value twice"),
    ("gamma: {type: float, low: 0.9, high: 1, one_minus: 1}", "one_minus must be true or false"),
    ("learning_rate: {type: float, low: .nan, high: 1}", "must be a finite number"),
])
def test_a_bad_space_is_one_error_naming_file_and_key(tmp_path, text, says):
    path = write(tmp_path / "space.yaml", text + "\n")
    with pytest.raises(UserError) as err:
        search_spaces.load("a2c", agents.get("a2c").Config, path)
    assert str(err.value).startswith(f"{path}: ") and says in str(err.value), err.value


def test_the_command_refuses_bad_input_before_any_trial(tmp_path, capsys):
    bad = write(tmp_path / "bad.yaml", "learning_rate: {type: log_float, low: -1, high: 1}\n")
    good = write(tmp_path / "good.yaml", PRUNE_SPACE)
    results = tmp_path / "r"
    for argv, says in [
        (["--space", bad], f"{bad}: learning_rate: log_float needs low > 0"),
        (["--space", tmp_path / "none.yaml"], "does not exist"),
        (["--set", "learning_rate=0.1"], "--set learning_rate fixes a hyperparameter the search "
         f"space {good} samples"),
        ([], "--set hidden fixes a hyperparameter the search space"),  # a2c's own space: widths
        (["--n-trials", 0], "--n-trials must be >= 1"),
        (["--n-evaluations", 5000], "--n-evaluations must be in [1, 1000]"),
        (["--storage", "nosuchdb://x"], "--storage nosuchdb://x: cannot open it"),
        (["--report-only"], "no study"),
    ]:
        space = [] if argv == [] or argv[0] == "--space" else ["--space", good]
        code, out, err = tune_main(*TINY, "--steps", 1000, "--results", results, *space, *argv,
                                   capsys=capsys)
        assert code == 2 and says in one_error_line(err), (argv, err)
    assert not (results / "trials").exists()


# -- counting, recovery, seeding (no training) ------------------------------------------------


def spec_for(tmp_path) -> tune_study.TuneSpec:
    space = write(tmp_path / "space.yaml", PRUNE_SPACE)
    return tune_study.plan("a2c", "CartPole-v1", steps=1000, sets=["hidden=[16]"], space=str(space))


@pytest.mark.filterwarnings("ignore:Heartbeat")  # ask() outside optimize() on such storage
def test_trials_count_unless_their_process_died_or_they_claimed_a_full_study(tmp_path):
    spec = spec_for(tmp_path)
    url = tune_study.storage_url(tmp_path)
    study = tune_study.open_study(spec, url, "s")
    states = optuna.trial.TrialState
    for state, attrs in [(states.COMPLETE, {}), (states.PRUNED, {}),
                         (states.FAIL, {"fail_reason": "NaN"}),  # a failure we decided: counts
                         (states.FAIL, {"abandoned": "interrupted"}),  # not counted
                         (states.FAIL, {})]:  # failed by Optuna's heartbeat: not counted
        trial = study.ask()
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        study.tell(trial, 1.0 if state == states.COMPLETE else None, state=state)
    assert [t.number for t in tune_study.counted_trials(study)] == [0, 1, 2]
    # Trial 5 finds 3 counted trials below it: with n_trials=3 it is a surplus claim, ends at
    # once and stops the loop (which would run 5 more).
    study.optimize(tune_trials.objective(spec, 3, tmp_path), n_trials=5,
                   catch=(tune_trials.TrialFailed,))
    (trial,) = study.get_trials()[5:]
    assert trial.state.name == "FAIL" and trial.user_attrs.get("surplus") is True
    assert not tune_study.counted(trial) and not (tmp_path / "trials").exists()
    # A different study's settings are refused.
    other = tune_study.plan("a2c", "CartPole-v1", steps=2000, sets=["hidden=[16]"],
                      space=str(tmp_path / "space.yaml"))
    with pytest.raises(UserError, match="budget differs"):
        tune_study.open_study(other, url, "s")


class RecordingTrial:
    """What ``Report`` calls on an Optuna trial, recorded."""

    def __init__(self):
        self.reported: list[tuple[float, int]] = []

    def report(self, value, step):
        self.reported.append((value, step))

    def should_prune(self):
        return False


def test_report_gives_optuna_the_rows_score_not_a_zero_sum_teams_return():
    """A self-play row's return is 0 by construction; the trial must see its score (the worse
    seat's win rate). A row without ``score`` (an older log) and a single-agent row, whose score
    is its return, report the return."""
    trial, lines = RecordingTrial(), []
    report = tune_trials.Report(trial, lines.append)
    loop = dataclasses.make_dataclass("L", ["evaluation", "env_steps"])(None, 100)
    for row in ({"return_mean": 0.0, "return_std": 0.0, "score": 0.93},
                {"return_mean": 41.0, "return_std": 2.0},
                {"return_mean": 41.0, "return_std": 2.0, "score": 41.0}):
        loop.evaluation = row
        assert report.on_update(loop) is True
    assert trial.reported == [(0.93, 1), (41.0, 2), (41.0, 3)]
    assert lines[0].endswith("score 0.930 (return 0.00 +- 0.00)")
    assert lines[1].endswith("return 41.00 +- 2.00") and "score" not in lines[1]
    loop.evaluation = {"return_mean": 0.0, "return_std": 0.0, "score": float("nan")}
    with pytest.raises(tune_trials.RunError, match="env step 100 returned nan"):
        report.on_update(loop)


@pytest.mark.filterwarnings("ignore:Heartbeat")
def test_recover_fails_only_the_running_trials_whose_process_ended(tmp_path):
    study = tune_study.open_study(spec_for(tmp_path), tune_study.storage_url(tmp_path), "s")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    owners = [{**tune_study.owner(), "pid": dead.pid, "started": "1"},  # ended
              tune_study.owner(),  # this process: alive
              {**tune_study.owner(), "pid": os.getpid(), "started": "1"},  # pid reused by another
              {**tune_study.owner(), "host": "elsewhere", "pid": dead.pid}]  # another machine's
    for who in owners:
        study.ask().set_user_attr("owner", who)
    assert tune_study.recover(study) == [0, 2]
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["FAIL", "RUNNING", "FAIL", "RUNNING"]
    assert "ended before the trial finished" in trials[0].user_attrs["abandoned"]
    assert not any(tune_study.counted(t) for t in (trials[0], trials[2]))


@pytest.mark.filterwarnings("ignore:Heartbeat")
def test_recover_fails_an_ownerless_running_trial_once_it_is_old(tmp_path, monkeypatch):
    """A process killed right after Optuna created its trial (before the owner was written)
    leaves a RUNNING trial nobody claims: it is abandoned after the grace period, not before."""
    study = tune_study.open_study(spec_for(tmp_path), tune_study.storage_url(tmp_path), "s")
    study.ask()
    assert tune_study.recover(study) == []  # young: its process may be about to claim it
    monkeypatch.setattr(tune_study, "OWNERLESS_GRACE", 0.0)
    assert tune_study.recover(study) == [0]
    assert "(unrecorded) ended" in study.get_trials()[0].user_attrs["abandoned"]


def sampled(seed: int, n: int, space) -> list[dict]:
    """What the random sampler of pgrad-tune draws for trials 0..n-1 (it depends on the seed
    and the trial number only)."""
    study = optuna.create_study(sampler=tune_study.make_sampler("random", seed, 1),
                                direction="maximize")
    out = []
    for _ in range(n):
        trial = study.ask()
        out.append(space.sample(trial))
        study.tell(trial, 0.0)
    return out


def test_the_sampler_is_seeded_by_seed_and_trial_number(tmp_path):
    space = search_spaces.load("a2c", agents.get("a2c").Config)
    first, again = sampled(3, 4, space), sampled(3, 4, space)
    assert first == again  # a study (or its resumption) draws the same
    assert first[0] != first[1] and sampled(4, 4, space) != first

    def tpe(seed: int) -> list[dict]:  # past its startup trials too, given the same results
        study = optuna.create_study(sampler=tune_study.make_sampler("tpe", seed, 2),
                                    direction="maximize")
        out = []
        for i in range(4):
            trial = study.ask()
            out.append(space.sample(trial))
            study.tell(trial, float(i))
        return out

    assert tpe(3) == tpe(3) and tpe(3) != tpe(4)


# -- small studies ----------------------------------------------------------------------------


def test_a_study_prunes_the_hopeless_branch_and_best_yaml_trains(tmp_path, capsys):
    space = search_spaces.load("a2c", agents.get("a2c").Config, write(tmp_path / "space.yaml",
                                                                      PRUNE_SPACE))
    drawn = [d["learning_rate"] for d in sampled(PRUNE_SEED, 3, space)]
    assert drawn[0] != HOPELESS and HOPELESS in drawn[1:], drawn  # the premise
    results = tmp_path / "r"
    argv = [*TINY, "--steps", 1000, "--n-evaluations", 2, "--n-trials", 3, "--sampler", "random",
            "--seed", PRUNE_SEED, "--n-startup-trials", 1, "--space", tmp_path / "space.yaml",
            "--results", results]
    code, out, err = tune_main(*argv, capsys=capsys)
    assert code == 0, err
    trials = load(results).get_trials()
    assert [t.params["learning_rate"] for t in trials] == drawn
    for t in trials:  # every hopeless trial after the first good one is pruned, no good one is
        assert t.state.name == ("PRUNED" if t.params["learning_rate"] == HOPELESS else
                                "COMPLETE"), (t.number, t.state, t.intermediate_values)
    pruned = next(t for t in trials if t.state.name == "PRUNED")
    assert f"trial {pruned.number} pruned: pruned after evaluation 1" in out
    log = (results / "trials" / f"trial-{pruned.number:04d}.log").read_text()
    assert "evaluation 1 at env step" in log and "pruned after evaluation 1 of 2" in log
    readme = (results / "README.md").read_text()
    assert f"| {pruned.number} | pruned |" in readme and "**Best: trial 0" in readme
    for figure in ("optimization_history.png", "intermediate_values.png"):
        assert (results / figure).stat().st_size > 1000
    best = yaml.safe_load((results / "best.yaml").read_text())
    assert best["agent"] == "a2c" and best["total_steps"] == 1000 and best["seed"] == PRUNE_SEED
    assert best["hyperparameters"]["learning_rate"] == 1e-9
    assert best["hyperparameters"]["hidden"] == [16]

    # Running it again continues the study: it is done, so no trial runs, nothing changes.
    code, out, err = tune_main(*argv, capsys=capsys)
    assert code == 0 and "3 of 3 trials done" in out
    assert not [line for line in out.splitlines() if line.startswith("trial ")]
    assert len(load(results).get_trials()) == 3
    # Other settings are refused rather than mixed into the study.
    code, out, err = tune_main(*[a if a != 1000 else 2000 for a in argv], capsys=capsys)
    assert code == 2 and "other settings (budget differs)" in one_error_line(err)

    # best.yaml is a ready pgrad-train --config file.
    code, _, err = train("--config", results / "best.yaml", "--quiet", "--out", tmp_path / "run",
                         capsys=capsys)
    assert code == 0, err
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert config["hyperparameters"] == trials[0].user_attrs["hyperparameters"]


def test_a_setting_that_fails_validation_is_a_pruned_trial_with_its_reason(tmp_path, capsys):
    # Each value is valid on its own (the space passes its up-front check), but the pair the
    # seeded sampler draws first (n_steps 5 with minibatch_size 112) is not: 112 does not divide
    # 5 x 16 = 80 rollout steps.
    space = write(tmp_path / "space.yaml",
                  "n_steps: {type: categorical, choices: [5, 7]}\n"
                  "minibatch_size: {type: categorical, choices: [80, 112]}\n")
    url = f"sqlite:///{tmp_path / 'elsewhere.db'}"  # any SQLAlchemy URL (--storage)
    code, out, err = tune_main(*TINY, "--steps", 400, "--n-evaluations", 1, "--n-trials", 1,
                               "--seed", 3,
                               "--space", space, "--results", tmp_path / "r", "--storage", url,
                               "--study-name", "mine", capsys=capsys)
    assert code == 1 and "no trial completed" in err, err
    assert not (tmp_path / "r" / "study.db").exists() and (tmp_path / "r" / "README.md").exists()
    (trial,) = optuna.load_study(study_name="mine", storage=url).get_trials()
    assert trial.state.name == "PRUNED"
    assert "minibatch_size must divide n_steps x num_envs = 80" in trial.user_attrs["invalid"]
    assert "trial 0 pruned: invalid setting" in out


def test_a_diverging_trial_fails_with_its_reason_and_the_study_goes_on(tmp_path, capsys):
    # SGD at learning rate 10 without clipping overflows the value loss within a few updates;
    # Adam's normalised steps stay finite.
    space = write(tmp_path / "s.yaml", "optimizer: {type: categorical, choices: [adam, sgd]}\n")
    drawn = [d["optimizer"] for d in sampled(0, 2, search_spaces.load(
        "a2c", agents.get("a2c").Config, space))]
    assert sorted(drawn) == ["adam", "sgd"], drawn
    code, out, err = tune_main(*TINY, "--steps", 2400, "--n-evaluations", 1, "--n-trials", 2,
                               "--set", "learning_rate=10", "--set", "max_grad_norm=0",
                               "--sampler", "random", "--space", space,
                               "--results", tmp_path / "r", capsys=capsys)
    assert code == 0, err
    trials = {t.params["optimizer"]: t for t in load(tmp_path / "r").get_trials()}
    assert trials["adam"].state.name == "COMPLETE"
    failed = trials["sgd"]
    assert failed.state.name == "FAIL" and tune_study.counted(failed)
    reason = failed.user_attrs["fail_reason"]
    assert reason.startswith("10 consecutive updates had NaN/Inf gradients"), reason
    assert f"trial {failed.number} failed: {reason}" in out
    assert reason in (tmp_path / "r" / "README.md").read_text()


def test_sigterm_stops_the_trial_after_its_update_and_leaves_it_uncounted(tmp_path,
                                                                          monkeypatch):
    spec = tune_study.plan("a2c", "CartPole-v1", steps=4000, sets=["hidden=[16]"], n_evaluations=4,
                     eval_episodes=2, space=str(write(tmp_path / "s.yaml", LR_SPACE)))
    opts = tune_study.Options(tune_study.storage_url(tmp_path), "s", 3, str(tmp_path))
    updates = []
    guard = tune_trials.Guard.on_update

    def on_update(self, loop):  # the 20th update of the first trial gets a SIGTERM
        updates.append(loop.env_steps)
        if len(updates) == 20:  # as the signal would (no real one: pytest-xdist's workers)
            handler = signal.getsignal(signal.SIGTERM)
            assert handler == signals._on_signal
            handler(signal.SIGTERM, None)
        return guard(self, loop)

    monkeypatch.setattr(tune_trials.Guard, "on_update", on_update)
    before = signal.getsignal(signal.SIGTERM)
    signals = tune_trials.Signals()
    with pytest.raises(Interrupted) as err, signals:
        tune.work(spec, opts, echo=lambda line: None, signals=signals)
    assert err.value.exit_code == 143 and str(err.value).startswith("SIGTERM: stopped")
    assert signal.getsignal(signal.SIGTERM) is before
    assert len(updates) == 20  # stopped right after that update, no other trial started
    (trial,) = load(tmp_path, "s").get_trials()
    assert trial.state.name == "FAIL" and trial.user_attrs["abandoned"] == "interrupted"
    assert not tune_study.counted(trial) and len(trial.intermediate_values) == 1  # 1,600 of 4,000
    assert (tmp_path / "trials" / "trial-0000.log").read_text().endswith("interrupted\n")


def trials_in(results: Path) -> list:
    if not (results / "study.db").is_file():  # not started yet
        return []
    import sqlalchemy.exc

    try:
        return load(results).get_trials()
    except KeyError:  # not created yet
        return []
    except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.IntegrityError):
        return []  # this poll raced the child creating the schema: look again


@pytest.mark.subprocess
def test_a_killed_study_resumes_keeping_its_finished_trials(tmp_path, capsys):
    results = tmp_path / "r"
    argv = [*TINY, "--steps", 800, "--n-evaluations", 1, "--n-trials", 3, "--pruner", "none",
            "--space", write(tmp_path / "space.yaml", LR_SPACE), "--results", results]
    proc = popen_tune(*argv)
    deadline, seen = time.monotonic() + 180, []
    while time.monotonic() < deadline and proc.poll() is None:
        seen = trials_in(results)
        states = [t.state.name for t in seen]
        if "COMPLETE" in states and any(t.state.name == "RUNNING" and "owner" in t.user_attrs
                                        for t in seen):
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, err
    before = {t.number: t.value for t in trials_in(results) if t.state.name == "COMPLETE"}
    running = [t.number for t in trials_in(results) if t.state.name == "RUNNING"]
    assert before and running, [(t.number, t.state) for t in seen]

    code, out, err = tune_main(*argv, capsys=capsys)
    assert code == 0, err
    assert f"trial {running[0]} abandoned: its process ended" in out
    trials = load(results).get_trials()
    kept = [t for t in trials if tune_study.counted(t)]
    assert len(kept) == 3 and all(t.state.name == "COMPLETE" for t in kept)
    assert {t.number: t.value for t in kept if t.number in before} == before  # kept, once
    killed = trials[running[0]]
    assert killed.state.name == "FAIL" and "abandoned" in killed.user_attrs
    assert "3 of 3 trials" in (results / "README.md").read_text()


@pytest.mark.subprocess
def test_two_processes_share_one_sqlite_study_without_losing_a_trial(tmp_path):
    results = tmp_path / "r"
    argv = [*TINY, "--steps", 800, "--n-evaluations", 1, "--n-trials", 4, "--sampler",
            "random", "--space", write(tmp_path / "space.yaml", LR_SPACE), "--results", results]
    procs = [popen_tune(*argv) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err
    ran = [{int(line.split()[1]) for line in out.splitlines() if line.startswith("trial ")}
           for out, _ in outs]
    trials = load(results).get_trials()
    kept = {t.number for t in trials if tune_study.counted(t)}
    assert len(kept) == 4 and ran[0] | ran[1] == kept and not ran[0] & ran[1], ran
    assert ran[0] and ran[1]  # both worked on it
    assert all(t.state.name in ("COMPLETE", "PRUNED") for t in trials if t.number in kept)
    surplus = [t for t in trials if t.number not in kept]
    assert all(t.user_attrs.get("surplus") for t in surplus)  # at most one claim too many


@pytest.mark.subprocess  # Ray's processes
def test_ray_workers_run_the_trials_and_best_yaml_reproduces_the_best_trial(tmp_path, capsys):
    pytest.importorskip("ray")
    results = tmp_path / "r"
    code, out, err = tune_main(*TINY, "--steps", 800, "--n-evaluations", 1, "--n-trials", 2,
                               "--space", write(tmp_path / "space.yaml", LR_SPACE),
                               "--workers", 2, "--results", results, capsys=capsys)
    assert code == 0, err
    assert "2 Ray workers" in out and "trial 0 complete" in out and "trial 1 complete" in out
    trials = load(results).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    assert all(t.user_attrs["owner"]["pid"] != os.getpid() for t in trials)  # in Ray's workers
    # The same settings and seed train the same policy: its evaluation is the trial's value.
    best = max(trials, key=lambda t: t.value)
    code, _, err = train("--config", results / "best.yaml", "--quiet", "--out", tmp_path / "run",
                         capsys=capsys)
    assert code == 0, err
    ev = pgrad.evaluate(str(tmp_path / "run"), episodes=3, seed=eval_seed(0))
    assert ev["return_mean"] == pytest.approx(best.value)
