"""Issue 25 (reliability, round three): each class reproduced as a hostile user would -- files
damaged, processes killed, a malicious module shipped inside a directory and checked never to
run."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import one_error_line, snapshot, train

import agents
import pgrad
from pgrad.rl.storage.named_code import DirectoryCode

EVIL = """
open({marker!r}, "w").write("executed")
import gymnasium as gym
gym.register({env_id!r}, entry_point="gymnasium.envs.classic_control:CartPoleEnv")
"""


@pytest.fixture(scope="module")
def saved_agent(tmp_path_factory) -> Path:
    """A tiny A2C CartPole agent, saved (no training)."""
    path = tmp_path_factory.mktemp("saved") / "agent"
    agent = agents.make("a2c", "CartPole-v1", seed=1, num_envs=1, hidden=(8,))
    try:
        agent.save(path)
    finally:
        agent.close()
    return path


def _ship(directory: Path, module: str, marker: Path, env_id: str) -> None:
    (directory / f"{module}.py").write_text(EVIL.format(marker=str(marker), env_id=env_id))


# ---------------------------------------------------------------------------------------------
# 1. Code run from a directory: never from inside it, only when the user named it.
# ---------------------------------------------------------------------------------------------

def test_load_never_imports_the_env_module_a_saved_agent_ships(saved_agent, tmp_path,
                                                               monkeypatch):
    path = tmp_path / "agent"
    shutil.copytree(saved_agent, path)
    marker = tmp_path / "executed"
    _ship(path, "r3_evil_env", marker, "R3Evil-v0")
    record = json.loads((path / "agent.json").read_text())
    record["env"] = "r3_evil_env:R3Evil-v0"
    (path / "agent.json").write_text(json.dumps(record))
    monkeypatch.chdir(path)
    monkeypatch.syspath_prepend(str(path))  # as `python -c` from inside it would have it
    with pytest.raises(DirectoryCode, match="names code to import: env r3_evil_env:R3Evil-v0"):
        agents.load(path)
    with pytest.raises(DirectoryCode, match="refusing to import 'r3_evil_env' from the dir"):
        agents.load(path, env_id="r3_evil_env:R3Evil-v0")
    with pytest.raises(DirectoryCode, match="refusing to import"):  # even when named
        agents.load(".", env_id="r3_evil_env:R3Evil-v0")
    (path / "policy" / "pgrad_policy.json").write_text(json.dumps(
        {**json.loads((path / "policy" / "pgrad_policy.json").read_text()),
         "env_id": "r3_evil_env:R3Evil-v0"}))
    with pytest.raises(DirectoryCode, match="names code to import"):
        pgrad.evaluate(path, episodes=1)
    for target in (path, path / "policy"):
        with pytest.raises(DirectoryCode, match="refusing to import"):
            pgrad.evaluate(target, env_id="r3_evil_env:R3Evil-v0", episodes=1)
    assert not marker.exists() and "r3_evil_env" not in sys.modules


def test_load_imports_a_recorded_env_module_only_when_named(saved_agent, tmp_path,
                                                            monkeypatch):
    path, elsewhere = tmp_path / "agent", tmp_path / "project"
    shutil.copytree(saved_agent, path)
    elsewhere.mkdir()
    marker = tmp_path / "executed"
    _ship(elsewhere, "r3_named_env", marker, "R3Named-v0")
    record = json.loads((path / "agent.json").read_text())
    record["env"] = "r3_named_env:R3Named-v0"
    (path / "agent.json").write_text(json.dumps(record))
    monkeypatch.syspath_prepend(str(elsewhere))
    with pytest.raises(DirectoryCode, match="names code to import: env r3_named_env:R3Named-v0"):
        agents.load(path)
    assert not marker.exists()
    agent = agents.load(path, env_id="r3_named_env:R3Named-v0", acting_only=True)
    agent.close()
    assert marker.exists()  # named: imported (from outside the directory)


def test_resume_never_imports_a_transform_file_inside_the_run(plugins, tmp_path, monkeypatch,
                                                              capsys):
    out = tmp_path / "run"
    shutil.copy(plugins / "user_tf.py", tmp_path / "user_tf.py")
    monkeypatch.chdir(tmp_path)
    code, _, err = train("--total-steps", 160, "--quiet", "--transform", "user_tf.py:good",
                         "--out", out, capsys=capsys)
    assert code == 0, err
    marker = tmp_path / "executed"
    (out / "user_tf.py").write_text(f"open({str(marker)!r}, 'w').write('x')\ngood = None\n")
    monkeypatch.chdir(out)
    for flags in (["--transform", "user_tf.py:good"], ["--trust-run-code"]):
        code, _, err = train("--resume", ".", "--total-steps", 320, *flags, capsys=capsys)
        assert code == 2 and "refusing to import 'user_tf.py' from the run directory" in \
            one_error_line(err)
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------
# 2. Data loss: one lock and one "whose directory is this" check for every writer.
# ---------------------------------------------------------------------------------------------

def test_agent_save_refuses_a_run_directory_and_one_in_use(saved_agent, tmp_path):
    from pgrad.rl.storage import dirlock
    from pgrad_app.run import directory as rundir
    from pgrad_app.run.layout import RunLayout

    assert (dirlock.LOCK, dirlock.RUN_MARKER) == (RunLayout.LOCK, RunLayout.MARKER)
    run_copy = tmp_path / "run"
    shutil.copytree(saved_agent, run_copy)
    rundir.write_marker(run_copy)  # what pgrad-train's run directory holds beside the same files
    agent = agents.load(saved_agent)
    try:
        before = {p: p.read_bytes() for p in run_copy.rglob("*") if p.is_file()}
        with pytest.raises(ValueError, match="pgrad-train run directory"):
            agent.save(run_copy)
        assert {p: p.read_bytes() for p in run_copy.rglob("*") if p.is_file()} == before
        foreign = tmp_path / "foreign"
        (foreign / "checkpoints").mkdir(parents=True)
        with pytest.raises(ValueError, match="not a saved agent"):
            agent.save(foreign)
        busy = tmp_path / "busy"
        agent.save(busy)
        with dirlock.DirectoryLock(busy):  # as a training (or another save) holds it
            with pytest.raises(ValueError, match="in use by another writer"):
                agent.save(busy)
    finally:
        agent.close()


def test_two_saves_into_one_path_leave_the_second_agent_whole(saved_agent, tmp_path):
    path = tmp_path / "agent"
    first = agents.make("a2c", "CartPole-v1", seed=1, num_envs=1, hidden=(8,))
    second = agents.make("a2c", "CartPole-v1", seed=2, num_envs=1, hidden=(8,))
    try:
        first.learn(16, progress=False)  # a later step than the second agent's (0)
        first.save(path)
        (path / "notes.txt").write_text("mine")
        second.save(path)
        loaded = agents.load(path)
        try:
            assert loaded.seed_var.numpy() == 2 and loaded.env_steps == second.env_steps
            for (name, a), b in zip(loaded.net.modules().items(),
                                    second.net.modules().values()):
                for x, y in zip(a.weights, b.weights):
                    assert (x.numpy() == y.numpy()).all(), name
        finally:
            loaded.close()
        assert (path / "notes.txt").read_text() == "mine"
        assert [p.name for p in (path / "checkpoints").iterdir()
                if p.name.startswith("step-")] == ["step-000000000000"]
    finally:
        first.close()
        second.close()


# ---------------------------------------------------------------------------------------------
# 3. Silent wrong results.
# ---------------------------------------------------------------------------------------------

def test_a_callback_returning_numpy_false_stops_learn():
    import numpy as np

    from agents.learning import says_stop

    assert says_stop(False) and says_stop(np.False_) and says_stop(np.array(False))
    assert not any(says_stop(v) for v in (None, True, np.True_, 0, [], np.array([False])))
    agent = agents.make("a2c", "CartPole-v1", seed=0, num_envs=1, hidden=(8,), n_steps=8)
    try:
        agent.learn(800, callbacks=[lambda loop: np.False_], progress=False)
        assert agent.env_steps == 8  # one update, then stopped
    finally:
        agent.close()


@pytest.mark.parametrize("flags, message", [
    (["--adversarial-epsilon", "1e39"], "adversarial_epsilon must be in [0, 1e+06]; got 1e+39"),
    (["--set", "hidden=[16384,16384,16384]"], "needs 536,870,912 weights between its layers"),
])
def test_numeric_bounds_are_checked_before_anything_is_written(flags, message, tmp_path,
                                                               capsys):
    out = tmp_path / "run"
    code, _, err = train("--total-steps", 64, "--out", out, *flags, capsys=capsys)
    assert code == 2 and message in one_error_line(err)
    assert not out.exists()


# ---------------------------------------------------------------------------------------------
# 4. Hangs: YAML bounded in alias expansion and depth.
# ---------------------------------------------------------------------------------------------

BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8))


@pytest.mark.parametrize("text, message", [
    (BOMB, "aliases expand to more than 100,000 values"),
    ("seed: " + "[" * 20000 + "]" * 20000 + "\n", "nested deeper than 64 levels"),
])
def test_hostile_yaml_configs_get_one_line_quickly(text, message, tmp_path, capsys):
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    code, _, err = train("--config", config, "--out", tmp_path / "run", capsys=capsys)
    assert code == 2 and message in one_error_line(err)
    assert not (tmp_path / "run").exists()


NEVER_ENDS = '''
import gymnasium as gym
import numpy as np


class NeverEnds(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    def step(self, action):
        return np.zeros(4, np.float32), 1.0, False, False, {}


gym.register("R3/NeverEnds-v0", entry_point=NeverEnds)  # no max_episode_steps
'''


def test_evaluation_episodes_are_capped_with_one_warning(saved_agent, tmp_path, monkeypatch):
    from pgrad.rl.evaluation import episodes as eval_episodes
    (tmp_path / "r3_never_ends.py").write_text(NEVER_ENDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    import r3_never_ends  # noqa: F401  (registers R3/NeverEnds-v0)

    monkeypatch.setattr(eval_episodes, "DEFAULT_MAX_EPISODE_STEPS", 300)
    agent = agents.load(saved_agent, acting_only=True)
    try:
        with pytest.warns(UserWarning, match="did not end within 300 steps and were cut"):
            result = pgrad.evaluate(agent, env_id="R3/NeverEnds-v0", episodes=2)
        assert result["lengths"] == [300, 300] and result["returns"] == [300.0, 300.0]
        with pytest.raises(ValueError, match=r"episodes must be in \[1, 10,000\]"):
            pgrad.evaluate(agent, episodes=100_000_000)
    finally:
        agent.close()


# ---------------------------------------------------------------------------------------------
# 5. Tracebacks -> one line: a tampered agent.json.
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("change, message", [
    ({"hyperparameters": {"n_steps": "lots"}}, 'hyperparameter n_steps is recorded as "lots"'),
    ({"hyperparameters": {"hidden": 8}}, "hyperparameter hidden is recorded as 8"),
    ({"hyperparameters": {"gamma": None}}, "hyperparameter gamma"),
    ({"hyperparameters": []}, "hyperparameters are not a mapping"),
    ({"seed": "zero"}, "seed is not an integer"),
    ({"agent": ["a2c"]}, "names no known agent"),
])
def test_a_tampered_agent_json_is_one_value_error(change, message, saved_agent, tmp_path):
    path = tmp_path / "agent"
    shutil.copytree(saved_agent, path)
    record = json.loads((path / "agent.json").read_text())
    for key, value in change.items():
        if isinstance(value, dict):
            record[key].update(value)
        else:
            record[key] = value
    (path / "agent.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match=message) as err:
        agents.load(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_resuming_after_updates_csv_was_lost_writes_its_header(tmp_path):
    import csv

    from pgrad_app.run.logs import RunLog

    log = RunLog(tmp_path, tensorboard=False)
    log.update(80, {"loss": 1.0, "entropy": 0.5})
    log.close()
    (tmp_path / "updates.csv").unlink()  # lost (deleted by hand, a bad copy)
    log = RunLog(tmp_path, resume_step=80, tensorboard=False, update_columns=["loss", "entropy"])
    log.update(160, {"loss": 2.0, "entropy": 0.25})
    log.close()
    with open(tmp_path / "updates.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows == [["step", "loss", "entropy"], ["160", "2.0", "0.25"]]


CLOSE_RAISES = '''
import gymnasium as gym


class CloseRaises(gym.envs.classic_control.CartPoleEnv):
    def close(self):
        raise OSError("device busy")


gym.register("R3/CloseRaises-v0", entry_point=CloseRaises, max_episode_steps=50)
'''


def test_an_env_whose_close_raises_loses_no_result(saved_agent, tmp_path, monkeypatch):
    (tmp_path / "r3_close_raises.py").write_text(CLOSE_RAISES)
    monkeypatch.syspath_prepend(str(tmp_path))
    import r3_close_raises  # noqa: F401  (registers R3/CloseRaises-v0)

    agent = agents.load(saved_agent, acting_only=True)
    try:
        with pytest.warns(UserWarning, match=r"close\(\) raised in 2 evaluation env\(s\): "
                                             "OSError: device busy"):
            result = pgrad.evaluate(agent, env_id="R3/CloseRaises-v0", episodes=2)
        assert len(result["returns"]) == 2
    finally:
        agent.close()


# ---------------------------------------------------------------------------------------------
# predict's input: one clear line for what does not fit the space, never a silent action.
# ---------------------------------------------------------------------------------------------

BAD_DISCRETE = '''
import gymnasium as gym


class BadDiscrete(gym.Env):
    """Discrete(4) observations; the third step emits 4 (outside the space)."""

    observation_space = gym.spaces.Discrete(4)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return 0, {}

    def step(self, action):
        self.t += 1
        return (4 if self.t == 3 else 1), 1.0, self.t >= 10, False, {}


gym.register("R3/BadDiscrete-v0", entry_point=BadDiscrete)
'''


@pytest.mark.parametrize("obs, message", [
    (np.zeros((4, 1)), r"predict: observation of shape \(4, 1\) fits neither one observation "
                       r"\(4,\) nor a batch \[N, 4\]"),
    (np.zeros(3), r"predict: observation of shape \(3,\) fits neither"),
    (np.array([0.0, np.nan, 0.0, 0.0]), r"predict: the observation holds NaN or inf \(at index "
                                        r"\(1,\): nan\)"),
    (np.array([[0.0] * 4, [0.0, 0.0, np.inf, 0.0]]), r"holds NaN or inf \(at index \(1, 2\)"),
])
def test_predict_refuses_a_box_observation_that_does_not_fit(saved_agent, obs, message):
    agent = agents.load(saved_agent, acting_only=True)
    try:
        with pytest.raises(ValueError, match=message) as err:
            agent.predict(obs)
        assert "\n" not in str(err.value)
        assert agent.predict(np.zeros((2, 4)))[0].shape == (2,)  # a real batch still acts
    finally:
        agent.close()


@pytest.mark.parametrize("obs, value, index", [(16, 16, 0), (-1, -1, 0), ([1, 20], 20, 1)])
def test_predict_refuses_a_discrete_value_outside_the_space(obs, value, index):
    agent = agents.make("a2c", "FrozenLake-v1", seed=1, num_envs=1, hidden=(8,))
    try:
        assert agent.predict(15)[0] in (0, 1, 2, 3)
        # -1 once indexed the last category and 16 an IndexError: both are one line now
        with pytest.raises(ValueError, match=rf"^predict: observation value {value} \(at index "
                                             rf"\({index},\)\) is outside Discrete\(16\)'s "
                                             r"values 0\.\.15\.$"):
            agent.predict(np.asarray(obs))
    finally:
        agent.close()


def test_training_stops_at_an_env_emitting_a_discrete_value_outside_its_space(
        tmp_path, monkeypatch, capsys):
    (tmp_path / "r3_bad_discrete.py").write_text(BAD_DISCRETE)
    monkeypatch.syspath_prepend(str(tmp_path))
    code, _, err = train("--agent", "a2c", "--env", "r3_bad_discrete:R3/BadDiscrete-v0",
                         "--total-steps", 100, "--num-envs", 1, "--out", tmp_path / "run",
                         "--quiet", capsys=capsys)
    line = one_error_line(err)
    assert code != 0 and "unusable observation at env step 3" in line
    assert "observation value 4 (at index (0,)) is outside Discrete(4)'s values 0..3" in line


# ---------------------------------------------------------------------------------------------
# Resume: an edited transform_args (or env_kwargs) in config.yaml is refused, naming both values.
# ---------------------------------------------------------------------------------------------

SCALED = '''
import pgrad


def scaled(factor=1.0):
    return pgrad.transforms.chain(pgrad.transforms.weight_by("advantages"),
                                  pgrad.transforms.scale(factor), pgrad.transforms.mean_steps())
'''


def test_resume_refuses_edited_transform_args(tmp_path, monkeypatch, capsys):
    (tmp_path / "r3_scaled.py").write_text(SCALED)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "run"
    code, _, _ = train("--agent", "a2c", "--env", "CartPole-v1", "--total-steps", 32,
                       "--num-envs", 1, "--set", "n_steps=16", "--set", "hidden=[8]",
                       "--transform", "r3_scaled:scaled", "--transform-arg", "factor=1.0",
                       "--out", out, "--quiet", capsys=capsys)
    assert code == 0
    config = out / "config.yaml"
    text = config.read_text()
    assert "transform_args: {factor: 1.0}" in text
    config.write_text(text.replace("transform_args: {factor: 1.0}",
                                   "transform_args: {factor: 100.0}"))
    before = snapshot(out)
    code, _, err = train("--resume", out, "--transform", "r3_scaled:scaled", "--total-steps",
                         64, "--quiet", capsys=capsys)
    line = one_error_line(err)
    assert code == 2 and "says transform_args {'factor': 100.0} but the run recorded " \
                         "{'factor': 1.0}" in line and "meta.json" in line
    assert snapshot(out) == before  # nothing touched
    config.write_text(text)  # restored: the resume goes on
    code, _, _ = train("--resume", out, "--transform", "r3_scaled:scaled", "--total-steps", 64,
                       "--quiet", capsys=capsys)
    assert code == 0


# ---------------------------------------------------------------------------------------------
# CSV repair on resume validates values, survives a field over 128 KiB and a non-file log.
# ---------------------------------------------------------------------------------------------

def test_resume_repair_drops_rows_whose_values_are_garbage_with_one_warning(tmp_path):
    from pgrad_app.run.logs import RunLog, read_episodes

    huge = "9" * (200 * 1024)  # over the csv module's 128 KiB field limit
    (tmp_path / "episodes.csv").write_text(
        "step,wall_s,return,length\n10,0.5,12.0,12\n20,0.7,abc,9\n30,nan,1.0,3\n"
        f"40,1.0,5.0,2.5\n50,1.0,{huge},3\n60,1.1,7.0,-7\n70,1.2,8.0,8\n900,2.0,9.0,9\n")
    (tmp_path / "updates.csv").write_text(
        f"step,loss,entropy\n16,1.5,0.6\n32,nan,\n48,x,0.5\n64,{huge},0.4\n80,0.25,inf\n")
    warnings: list[str] = []
    log = RunLog(tmp_path, resume_step=100, tensorboard=False, warn=warnings.append,
                 update_columns=["loss", "entropy"])
    log.episode(110, 3.0, 10.0, 10)
    log.close()
    assert warnings == [f"{tmp_path / name}: dropped {n} damaged line(s) while resuming."
                        for name, n in (("episodes.csv", 5), ("updates.csv", 2))]
    assert (tmp_path / "episodes.csv").read_text() == (
        "step,wall_s,return,length\n10,0.5,12.0,12\n70,1.2,8.0,8\n110,3.000,10.0,10\n")
    # nan and an empty field are what pgrad writes for a metric; kept
    assert (tmp_path / "updates.csv").read_text() == (
        "step,loss,entropy\n16,1.5,0.6\n32,nan,\n80,0.25,inf\n")
    assert read_episodes(tmp_path / "episodes.csv")[0].tolist() == [10, 70, 110]


def test_a_log_that_is_not_a_regular_file_is_one_error_on_resume(tmp_path):
    from pgrad_app.run.logs import RunLog, read_episodes

    (tmp_path / "episodes.csv").symlink_to("/dev/zero")  # reading it would never end
    with pytest.raises(OSError, match="episodes.csv is not a regular file"):
        RunLog(tmp_path, resume_step=100, tensorboard=False)
    assert read_episodes(tmp_path / "episodes.csv")[0].size == 0


# ---------------------------------------------------------------------------------------------
# --overwrite keeps the old run until the new one's first checkpoint.
# ---------------------------------------------------------------------------------------------

FAILS_AT_FIRST_UPDATE = ("--transform", "pgrad.transforms:clip_per_step", "--transform-arg",
                         "max_norm=1.0")  # keeps the step axis: an error at update 1


def _without_lock(files: dict) -> dict:
    return {k: v for k, v in files.items() if k != ".pgrad-lock"}


def test_an_overwrite_that_fails_at_its_first_update_leaves_the_old_run(run_copy, capsys):
    (run_copy / "notes.txt").write_text("mine")
    before = _without_lock(snapshot(run_copy))
    code, _, err = train("--out", run_copy, "--overwrite", "--total-steps", 80, "--quiet",
                         *FAILS_AT_FIRST_UPDATE, capsys=capsys)
    assert code == 1 and "error: chain 'clip_per_step(1.0)' returned a gradient" in err
    assert "the run --overwrite replaced is back in place" in err
    assert _without_lock(snapshot(run_copy)) == before
    code, _, err = train("--out", run_copy, "--overwrite", "--total-steps", 80, "--quiet",
                         capsys=capsys)  # a new run that gets to its checkpoint replaces it
    assert code == 0, err
    assert not (run_copy / ".pgrad-replaced").exists() and (run_copy / "notes.txt").exists()
    assert [p.name for p in (run_copy / "checkpoints").iterdir()] == ["step-000000000080"]


@pytest.mark.subprocess
def test_kill_9_before_an_overwrites_first_checkpoint_gives_the_old_run_back(run_copy,
                                                                              capsys):
    import os
    import signal
    import time

    from cli_helpers import popen_train

    before = _without_lock(snapshot(run_copy))
    proc = popen_train("--out", run_copy, "--overwrite", "--total-steps", 10**7,
                       "--checkpoint-every", 10**7, "--quiet")
    state = run_copy / ".pgrad-replaced" / ".pgrad-state"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            # the old run is aside and the new one is writing its logs: the moment to kill
            if state.is_file() and state.read_text() == "replaced" and (
                    run_copy / "episodes.csv").is_file() and (run_copy / "tb").is_dir():
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read()
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate()
    assert not (run_copy / "checkpoints").exists() or not any(
        (run_copy / "checkpoints").iterdir())
    code, _, err = train("--resume", run_copy, "--more-steps", 80, "--quiet", capsys=capsys)
    assert code == 0, err
    assert "the run --overwrite replaced is back in place" in err
    assert "resuming" in err and "from env step 560" in err
    after = snapshot(run_copy)
    name = "checkpoints/step-000000000560/meta.json"
    assert after[name] == before[name]
    assert after["episodes.csv"].startswith(before["episodes.csv"])  # the old run's rows, then on
    assert not (run_copy / ".pgrad-replaced").exists()


# ---------------------------------------------------------------------------------------------
# best/: the policy and the evaluation row that chose it, one unit, in agreement with eval.csv.
# ---------------------------------------------------------------------------------------------

@pytest.mark.subprocess
def test_best_from_a_stretch_abandoned_by_kill_9_is_not_kept_after_resume(tmp_path, capsys):
    import os
    import signal
    import time

    from cli_helpers import popen_train, read_rows

    out = tmp_path / "run"
    code, _, err = train("--total-steps", 80, "--out", out, "--quiet", capsys=capsys)
    assert code == 0, err  # a checkpoint at 80, no evaluation yet
    proc = popen_train("--resume", out, "--total-steps", 10**7, "--eval-every", 80,
                       "--eval-episodes", 2, "--checkpoint-every", 10**6, "--quiet")
    row = out / "best" / "best.json"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None and not row.is_file():
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read()
        os.kill(proc.pid, signal.SIGKILL)  # best/ of step 160 written, no checkpoint after 80
    finally:
        proc.kill()
        proc.communicate()
    assert json.loads(row.read_text())["step"] >= 160
    code, _, err = train("--resume", out, "--more-steps", 80, "--quiet", capsys=capsys)
    assert code == 0, err
    assert "after the checkpoint resumed from (env step 80), which eval.csv no longer " \
           "records; removed it" in err
    rows = read_rows(out / "eval.csv")
    chosen = json.loads(row.read_text())
    assert [(int(r["step"]), r["best"]) for r in rows] == [(160, "1")] == [
        (chosen["step"], str(chosen["best"]))]
    assert (out / "best" / "checkpoints").is_dir() and (out / "best" / "policy").is_dir()


def test_best_settle_finishes_a_cut_swap_and_restores_a_lost_row(tmp_path):
    from agents.persistence import best_policy
    best = tmp_path / "best"
    old = tmp_path / ".best.tmp-123-old"  # killed between the swap's two renames
    old.mkdir()
    (old / "best.json").write_text(json.dumps({"step": 40, "return_mean": 9.0, "best": 1}))
    (tmp_path / ".best.tmp-123-new").mkdir()  # never swapped in
    warnings: list[str] = []
    rows = best_policy.settle(best, 80, [{"step": "20", "return_mean": "5.0"}], warnings.append)
    assert json.loads((best / "best.json").read_text())["step"] == 40
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best"]
    assert [int(r["step"]) for r in rows] == [20, 40] and warnings == []


# ---------------------------------------------------------------------------------------------
# A full disk: one line that says what was lost, at eval.json, TensorBoard and config.yaml.
# ---------------------------------------------------------------------------------------------

def _disk_full(*args, **kwargs):
    import errno

    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_at_eval_json_puts_the_unsaved_results_in_the_line(saved_agent, tmp_path,
                                                                        monkeypatch, capsys):
    from cli_helpers import evaluate

    from pgrad_app.run import evaluate as run_evaluate

    path = tmp_path / "agent"
    shutil.copytree(saved_agent, path)
    monkeypatch.setattr(run_evaluate, "write_json_atomic", _disk_full)
    code, out, err = evaluate(path, "--episodes", 2, capsys=capsys)
    line = one_error_line(err)
    assert code == 1 and out == ""  # nothing printed before: the line carries the results
    assert f"cannot write {path / 'eval.json'}: No space left on device; the results were not " \
           "saved: return " in line and "over 2 episodes." in line
    assert not (path / "eval.json").exists()


def test_a_full_disk_at_tensorboard_is_an_os_error_like_the_csv_files(tmp_path, monkeypatch):
    import errno

    import tensorflow as tf

    from pgrad_app.run import logs

    class Full:
        def __init__(self, directory):
            raise tf.errors.ResourceExhaustedError(
                None, None, f"{directory}/events.out.tfevents.1; No space left on device")

    monkeypatch.setattr(logs, "TensorBoardWriter", Full)
    with pytest.raises(OSError) as err:
        logs.RunLog(tmp_path)
    assert err.value.errno == errno.ENOSPC
    assert str(err.value.strerror) == (f"No space left on device (TensorBoard events in "
                                       f"{tmp_path / 'tb'})")


def test_a_full_disk_at_config_yaml_on_resume_is_one_line_and_changes_nothing(
        run_copy, monkeypatch, capsys):
    before = _without_lock(snapshot(run_copy))
    # what train.main imports
    monkeypatch.setattr("pgrad.rl.storage.files.write_atomic", _disk_full)
    code, _, err = train("--resume", run_copy, "--more-steps", 80, "--quiet", capsys=capsys)
    line = one_error_line(err)
    assert code == 1 and f"cannot write {run_copy / 'config.yaml'}: No space left on " \
                         "device; the run is as it was." in line
    assert _without_lock(snapshot(run_copy)) == before


# ---------------------------------------------------------------------------------------------
# Signals during start-up and during an evaluation; what a killed start-up leaves behind.
# ---------------------------------------------------------------------------------------------

SIGNAL_ENVS = '''
import os
import time

import gymnasium as gym
from gymnasium.envs.classic_control import CartPoleEnv


class SlowStart(CartPoleEnv):
    def __init__(self, **kwargs):
        open(os.environ["R3_MARKER"], "w").write("constructing")
        time.sleep(120)
        super().__init__(**kwargs)


class Endless(CartPoleEnv):
    """Episodes never end; an evaluation env (seeded from 10000 on) says when it starts."""

    def reset(self, *, seed=None, options=None):
        if seed is not None and seed >= 10000:
            open(os.environ["R3_MARKER"], "w").write("evaluating")
        return super().reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, _, _, info = super().step(action)
        self.state = self.np_random.uniform(-0.05, 0.05, size=(4,))
        return obs, reward, False, False, info


gym.register("R3/SlowStart-v0", entry_point=SlowStart)
gym.register("R3/Endless-v0", entry_point=Endless)
'''


def _signal_when(proc, marker: Path, sig, timeout: float = 180) -> tuple[int, str, float]:
    """Sends ``sig`` once ``marker`` exists; ``(exit code, stderr, seconds to exit)``."""
    import os
    import subprocess
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None and not marker.exists():
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[1]
    os.kill(proc.pid, sig)
    sent = time.monotonic()
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"{sig} was not acted on within 60 s") from None
    return proc.returncode, err, time.monotonic() - sent


@pytest.mark.subprocess
def test_sigterm_during_start_up_and_during_an_endless_evaluation(tmp_path):
    import os
    import signal
    import subprocess

    from cli_helpers import PY, ROOT

    (tmp_path / "r3_signal_envs.py").write_text(SIGNAL_ENVS)
    env = dict(os.environ, PYTHONUNBUFFERED="1", R3_MARKER=str(tmp_path / "marker"),
               PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))

    def start(*args):
        return subprocess.Popen([PY, str(ROOT / "scripts" / "train.py"), *map(str, args)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)

    out = tmp_path / "slow"
    code, err, _ = _signal_when(start("--env", "r3_signal_envs:R3/SlowStart-v0", "--out", out,
                                      "--quiet"), tmp_path / "marker", signal.SIGTERM)
    assert code == 143 and err.strip().endswith(
        "SIGTERM during start-up: nothing was trained; run the same command again (it "
        "replaces what start-up wrote)."), err
    assert "Traceback" not in err and not out.exists()
    (tmp_path / "marker").unlink()

    out = tmp_path / "endless"  # evaluation episodes capped at 100,000 steps: minutes
    code, err, took = _signal_when(start("--env", "r3_signal_envs:R3/Endless-v0", "--out", out,
                                         "--eval-every", 80, "--eval-episodes", 5,
                                         "--checkpoint-every", 10**6, "--total-steps", 10**6,
                                         "--quiet"), tmp_path / "marker", signal.SIGTERM)
    assert code == 143 and took < 30, err
    assert "evaluation at env step 80 interrupted: not recorded" in err
    assert "SIGTERM: saved a checkpoint at env step 80" in err
    assert (out / "checkpoints" / "step-000000000080").is_dir()
    assert (out / "eval.csv").read_text().count("\n") == 1 and not (out / "best").exists()


@pytest.mark.subprocess
def test_a_start_up_killed_before_its_first_checkpoint_is_replaced_by_a_rerun(tmp_path,
                                                                              capsys):
    import signal

    from cli_helpers import popen_train

    out = tmp_path / "run"
    proc = popen_train("--out", out, "--total-steps", 10**7, "--checkpoint-every", 10**7,
                       "--quiet")
    code, _, _ = _signal_when(proc, out / "episodes.csv", signal.SIGKILL)
    assert code == -9 and (out / ".pgrad-run").is_file() and (out / "config.yaml").is_file()
    code, _, err = train("--resume", out, "--total-steps", 80, "--quiet", capsys=capsys)
    assert code == 1 and "it has no checkpoint yet (it stopped during start-up); start it " \
                         "again with the same command and --out" in one_error_line(err)
    code, _, err = train("--out", out, "--total-steps", 80, "--quiet", capsys=capsys)
    assert code == 0, err  # the stub is replaced, no --overwrite needed
    assert (out / "checkpoints" / "step-000000000080").is_dir()
    code, _, err = train("--out", out, "--total-steps", 80, "--quiet", capsys=capsys)
    assert code == 2 and "already holds a run" in one_error_line(err)  # a real run is not


# ---------------------------------------------------------------------------------------------
# Sweeps: a re-run with other --set values never resumes a trial started with the old ones.
# ---------------------------------------------------------------------------------------------

def test_a_sweep_rerun_with_other_set_values_refuses_the_started_trials(tmp_path, capsys):
    import yaml

    from pgrad_app.config.settings import HYPER_KEY
    from pgrad_app.errors import UserError
    from pgrad_app.experiments.sweep import plan as sweep

    sets = ["learning_rate=0.001", "num_envs=1", "n_steps=16", "hidden=[8]"]
    (trial,) = sweep.plan(["a2c"], ["CartPole-v1"], [0], steps=32, sets=sets)
    config = tmp_path / "trial.yaml"  # as run_trial writes it, then pgrad-train as it runs it
    config.write_text(yaml.safe_dump({"agent": trial.agent, "env": trial.env, "seed": 0,
                                      "total_steps": 32,
                                      HYPER_KEY: trial.hyperparameters}, sort_keys=False))
    out = tmp_path / "runs" / trial.name
    code, _, err = train("--config", config, "--no-tuned", "--out", out, "--quiet",
                         capsys=capsys)
    assert code == 0, err
    sweep.check_started([trial], tmp_path)  # the same settings: it resumes
    (other,) = sweep.plan(["a2c"], ["CartPole-v1"], [0], steps=32,
                          sets=["learning_rate=0.01", *sets[1:]])
    assert other.name == trial.name  # --set values are not in the name: the same directory
    with pytest.raises(UserError, match=rf"{out} was started with other settings "
                                        r"\(hyperparameter learning_rate 0.001 there, 0.01 "
                                        r"now\); resuming it would mix them"):
        sweep.check_started([other], tmp_path)
    (longer,) = sweep.plan(["a2c"], ["CartPole-v1"], [0], steps=64, sets=sets)
    with pytest.raises(UserError, match=r"budget 32 there, 64 now"):
        sweep.check_started([longer], tmp_path)


# ---------------------------------------------------------------------------------------------
# Ray: a dead --ray-address is one line at once (Ray itself retries it for minutes).
# ---------------------------------------------------------------------------------------------

def test_ray_address_at_a_dead_port_is_one_line_at_once(tmp_path, capsys):
    import socket
    import time

    pytest.importorskip("ray")
    with socket.socket() as s:  # a port nothing listens on (bound, then released)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    code, _, err = train("--workers", 1, "--ray-address", f"127.0.0.1:{port}", "--total-steps",
                         80, "--num-envs", 2, "--out", tmp_path / "run", "--quiet",
                         capsys=capsys)
    line = one_error_line(err)
    assert code == 2 and time.monotonic() - start < 60
    assert f"cannot connect to the Ray cluster at 127.0.0.1:{port}: 127.0.0.1:{port} does not " \
           "accept connections (Connection refused)" in line
    assert not (tmp_path / "run").exists()


LATE_FAIL = '''
import gymnasium as gym
from gymnasium.envs.classic_control import CartPoleEnv


class LateFail(CartPoleEnv):
    """Raises at its 100th step (an env instance's own count, across episodes)."""

    def step(self, action):
        self.count = getattr(self, "count", 0) + 1
        if self.count >= 100:
            raise RuntimeError("sensor offline")
        return super().step(action)


gym.register("R3/LateFail-v0", entry_point=LateFail, max_episode_steps=500)
'''


@pytest.mark.subprocess
def test_a_ray_workers_env_error_names_the_runs_env_step(tmp_path):
    import os
    import re

    from cli_helpers import run

    pytest.importorskip("ray")
    (tmp_path / "r3_late_fail.py").write_text(LATE_FAIL)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = run("train.py", "--env", "r3_late_fail:R3/LateFail-v0", "--workers", 1,
               "--num-envs", 2, "--set", "n_steps=16", "--total-steps", 10_000, "--out",
               tmp_path / "run", "--quiet", env=env, timeout=400)
    assert proc.returncode == 1, proc.stderr
    found = re.search(r"failed at env step (\d+)", proc.stderr)
    assert found and "sensor offline" in proc.stderr, proc.stderr
    # each of the two envs fails at its own 100th step: the run is at env step ~200, not 2
    assert 160 <= int(found.group(1)) <= 200, proc.stderr


@pytest.mark.slow
@pytest.mark.subprocess
def test_sigterm_to_a_sweep_is_one_line_and_exit_143(tmp_path):
    import os
    import signal
    import subprocess

    from cli_helpers import PY, ROOT

    pytest.importorskip("ray")
    results = tmp_path / "sw"
    proc = subprocess.Popen([PY, str(ROOT / "scripts" / "sweep.py"), "--agents", "a2c",
                             "--envs", "CartPole-v1", "--seeds", "0", "--steps", str(10**7),
                             "--results", str(results)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    code, err, took = _signal_when(proc, results / "logs" / "a2c__CartPole-v1__seed0.log",
                                   signal.SIGTERM, timeout=300)
    assert code == 143 and took < 60, err  # was: Ray's C++ stack dump, exit 134
    assert "error" not in err.lower() and "SIGTERM: the sweep stopped; its unfinished trials " \
                                          "were cancelled" in err, err
    assert "Traceback" not in err and "*** SIG" not in err
