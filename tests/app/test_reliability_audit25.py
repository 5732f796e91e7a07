"""Issue 25, the audit's cases that were still open: a non-UTF-8 path, ``--track wandb`` without
a login and a tampered ``wandb-run-id``, NaN from an evaluation env, a foreign or tampered
``pgrad_policy.json``, damaged benchmark result files. Each reproduced as a hostile user would."""

from __future__ import annotations

import json
import os
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf
from cli_helpers import evaluate, one_error_line, train

import agents
import pgrad
from pgrad.rl.envs.vector import EnvError
from pgrad_app.errors import UserError, one_line
from pgrad_app.experiments.benchmark import report
from pgrad_app.run.directory import check_path


class _NanAfter(gym.Env):
    """CartPole's spaces; from env step ``bad_from`` of each episode on, a NaN observation or
    reward (``what``): always, or (``eval_only``) only once reset with an evaluation seed
    (pgrad's are 10,000 and up; training's are the run's seed and up)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, what: str = "observation", bad_from: int = 3, eval_only: bool = False):
        self.what, self.bad_from, self.t = what, bad_from, 0
        self.broken = not eval_only

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.broken = self.broken or (seed is not None and seed >= 10_000)
        return np.zeros(4, np.float32), {}

    def step(self, action):
        self.t += 1
        bad = self.broken and self.t >= self.bad_from
        obs = np.full(4, np.nan if bad and self.what == "observation" else 0.0, np.float32)
        reward = float("nan") if bad and self.what == "reward" else 1.0
        return obs, reward, False, self.t >= 20, {}


gym.register("Audit25/NanObs-v0", entry_point=_NanAfter, kwargs={"what": "observation"})
gym.register("Audit25/NanReward-v0", entry_point=_NanAfter, kwargs={"what": "reward"})
gym.register("Audit25/NanEval-v0", entry_point=_NanAfter, kwargs={"eval_only": True})


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


def test_a_non_utf8_path_is_one_line_that_prints(tmp_path):
    out = tmp_path / os.fsdecode(b"run-\xff\xfe")  # bytes a shell passes through as they are
    with pytest.raises(UserError, match="not valid UTF-8") as err:
        check_path(out, f"--out {out}")
    line = one_line(err.value)
    line.encode("utf-8")  # printable: the bytes escaped, not a UnicodeEncodeError at print time
    assert "run-\\udcff\\udcfe" in line and not out.exists()


# ---------------------------------------------------------------------------------------------
# --track wandb
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("content, message", [
    (b"../../x y\n", "'../../x y' is not a wandb run id"),
    (b"\xff\xfe\n", "cannot read the tracked run's id"),
    (None, "cannot read the tracked run's id"),  # a folder in its place
])
def test_a_tampered_wandb_run_id_is_one_line_naming_the_file(content, message, tmp_path):
    pytest.importorskip("wandb")
    from pgrad_app.run.tracking import RUN_ID_FILE, WandbTracker

    path = tmp_path / RUN_ID_FILE
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    with pytest.raises(UserError, match=message) as err:
        WandbTracker(tmp_path, None).start()
    assert str(path) in str(err.value)


@pytest.fixture
def no_wandb_login(tmp_path, monkeypatch):
    """No wandb credentials anywhere, and wandb's per-process settings read afresh (another
    test in this process may have set it up offline)."""
    wandb = pytest.importorskip("wandb")
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc, no wandb settings
    monkeypatch.setenv("NETRC", str(tmp_path / "home" / ".netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "home" / "wandb"))
    wandb.teardown()
    yield
    wandb.teardown()


def test_track_wandb_without_a_login_is_one_line(tmp_path, no_wandb_login):
    from pgrad_app.run.tracking import WandbTracker

    with pytest.raises(UserError, match="wandb could not start: .*WANDB_MODE=offline"):
        WandbTracker(tmp_path, None).start()


def test_track_wandb_without_a_login_fails_before_anything_is_written(tmp_path, capsys,
                                                                       no_wandb_login):
    out = tmp_path / "run"
    code, _, err = train("--out", out, "--total-steps", 40, "--num-envs", 2, "--track", "wandb",
                         "--quiet", capsys=capsys)
    assert code == 2, err
    assert "wandb could not start: no API key is configured" in one_error_line(err)
    assert not out.exists()


def test_evaluating_a_tracked_run_without_a_login_fails_before_anything_is_written(
        tmp_path, capsys, no_wandb_login):
    out = tmp_path / "run"
    code, _, err = train("--out", out, "--total-steps", 40, "--num-envs", 2, "--quiet",
                         capsys=capsys)
    assert code == 0, err
    config = out / "config.yaml"  # as --track wandb writes it (training it needs a login)
    config.write_text(config.read_text().replace("track: null", "track: wandb"))
    code, printed, err = evaluate(out, "--episodes", 1, capsys=capsys)
    assert code == 2 and not printed, err
    assert "wandb could not start: no API key is configured" in one_error_line(err)
    assert not (out / "eval.json").exists()  # not evaluated, then refused


@pytest.mark.parametrize("resumed", [False, True])
def test_a_tracked_run_that_never_started_leaves_no_id_to_continue(resumed, tmp_path,
                                                                   monkeypatch):
    """wandb.init failing after its local files were made (a server that refuses): a new
    tracked run's id and wandb's folder of it go (a re-run must not "continue", nor ``wandb
    sync`` send, a run that never existed); a resumed run's id stays."""
    wandb = pytest.importorskip("wandb")
    from pgrad_app.run.tracking import RUN_ID_FILE, WandbTracker

    if resumed:
        (tmp_path / RUN_ID_FILE).write_text("abc123\n")

    def refusing_init(*, dir, id, **kw):
        folder = Path(dir) / "wandb" / f"run-20260101_000000-{id}"
        folder.mkdir(parents=True)
        (folder.parent / "latest-run").symlink_to(folder.name)
        (folder.parent / "debug.log").write_text("why it failed\n")
        raise wandb.errors.CommError("server refused")

    monkeypatch.setattr(wandb, "init", refusing_init)
    with pytest.raises(UserError, match="wandb could not start: server refused"):
        WandbTracker(tmp_path, None).start()
    left = sorted(p.name for p in (tmp_path / "wandb").iterdir())
    if resumed:
        assert (tmp_path / RUN_ID_FILE).read_text() == "abc123\n"
        assert left == ["debug.log", "latest-run", "run-20260101_000000-abc123"]
    else:
        assert not (tmp_path / RUN_ID_FILE).exists() and left == ["debug.log"]


# ---------------------------------------------------------------------------------------------
# NaN from an evaluation env
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id, what", [("Audit25/NanObs-v0", "observation"),
                                          ("Audit25/NanReward-v0", "reward")])
def test_an_evaluation_env_returning_nan_is_an_error_naming_episode_and_step(saved_agent,
                                                                             env_id, what):
    with pytest.raises(EnvError,
                       match=f"non-finite {what} at step 3 of evaluation episode 0"):
        pgrad.evaluate(saved_agent, env_id=env_id, episodes=2)


def test_nan_from_the_eval_env_during_eval_every_is_one_line(tmp_path, capsys):
    code, _, err = train("--env", "Audit25/NanEval-v0", "--out", tmp_path / "run", "--num-envs",
                         2, "--total-steps", 40, "--eval-every", 20, "--eval-episodes", 1,
                         "--set", "n_steps=2", "--quiet", capsys=capsys)
    line = one_error_line(err)
    assert code == 1, err
    assert ("non-finite observation at step 3 of evaluation episode 0 (seed 10000)" in line
            and "the evaluation at env step 20" in line), line


# ---------------------------------------------------------------------------------------------
# A foreign or tampered export description
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("change", [{"head": [1]}, {"head": None}, {"head": {"bogus": 1}},
                                    {"state_size": "x"}, {"state_size": -3},
                                    {"env_kwargs": [2]}])
def test_a_tampered_pgrad_policy_json_is_a_value_error(change, saved_agent, tmp_path):
    import shutil

    copy = tmp_path / "agent"
    shutil.copytree(saved_agent, copy)
    meta_path = copy / "policy" / "pgrad_policy.json"
    meta = json.loads(meta_path.read_text())
    meta.update(change)
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="pgrad_policy.json does not describe|env_kwargs are "
                                         "not an object"):
        pgrad.evaluate(copy / "policy", episodes=1)


class _Foreign(tf.Module):
    """A SavedModel someone else made: an ``action`` function, no ``params``."""

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    def action(self, obs):
        return tf.zeros([tf.shape(obs)[0]], tf.int64)


@pytest.mark.parametrize("described", [False, True])
def test_a_savedmodel_not_made_by_pgrad_says_so(described, tmp_path):
    """Not "predates pgrad 0.2": nothing says pgrad made it (no ``pgrad_policy.json``), or its
    ``pgrad_policy.json`` describes a SavedModel without pgrad's functions."""
    from pgrad.rl.export.saved_model import META_FILE

    tf.saved_model.save(_Foreign(), str(tmp_path / "policy"))
    if described:
        (tmp_path / "policy" / META_FILE).write_text('{"format": 1}')
    why = "it has no params function" + ("" if described else " and no pgrad_policy.json")
    with pytest.raises(ValueError, match=f"was not made by pgrad \\({why}\\)") as err:
        pgrad.evaluate(tmp_path / "policy", env_id="CartPole-v1", episodes=1)
    assert "predates" not in str(err.value)


# ---------------------------------------------------------------------------------------------
# Benchmark result files
# ---------------------------------------------------------------------------------------------

GOOD = {"schema": 1, "agent": "a2c", "env": "Toy-v0", "seed": 0, "budget": 100, "steps": 100,
        "eval_episodes": 2, "wall_s": 1.0, "steps_per_s": 100.0, "eval": {"return_mean": 1.0},
        "curve": [[50, 1.0], [100, 2.0]], "curve_block": 1}


@pytest.mark.parametrize("write, why", [
    (lambda p: p.write_text("[]"), "a JSON list, not an object"),
    (lambda p: p.mkdir(), "Is a directory"),
    (lambda p: p.write_bytes(b"\xff\xfe"), "codec can't decode"),
    (lambda p: p.write_text(json.dumps({k: v for k, v in GOOD.items() if k != "env"})),
     "no 'env'"),
    (lambda p: p.write_text(json.dumps({**GOOD, "eval": {}})), "no 'return_mean'"),
    (lambda p: p.write_text(json.dumps({**GOOD, "seed": "zero"})), "'seed' is 'zero'"),
    (lambda p: p.write_text(json.dumps({**GOOD, "curve": {"a": 1}})), "'curve' is"),
])
def test_a_damaged_benchmark_result_is_one_line_naming_it(write, why, tmp_path):
    path = tmp_path / "a2c__Toy-v0__seed0.json"
    write(path)
    with pytest.raises(ValueError, match=f"{path.name}: not a valid result \\(.*{why}"):
        report.load_results(tmp_path)
    spec = benchmark_spec()
    from pgrad_app.experiments.benchmark.plan import check_existing, result_path

    target = result_path(tmp_path, spec)
    path.rename(target)
    with pytest.raises(UserError, match=f"{target.name}: not a valid result"):
        check_existing([spec], tmp_path)


def benchmark_spec():
    from pgrad_app.experiments.benchmark.plan import plan

    return plan(["a2c"], ["CartPole-v1"], [0], steps=1000)[0]


def test_a_good_benchmark_result_is_read(tmp_path):
    (tmp_path / "a2c__Toy-v0__seed0.json").write_text(json.dumps(GOOD))
    assert report.load_results(tmp_path) == [GOOD]


CHILD_ONLY = '''
import os
import gymnasium as gym

class FailsInChild(gym.Env):
    def __init__(self):
        if os.getpid() != int(os.environ["AUDIT25_PARENT"]):  # an async env's subprocess ...
            try:  # ... but the first one to claim the flag
                os.close(os.open(os.environ["AUDIT25_FLAG"], os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                raise RuntimeError("license server unreachable") from None
        from gymnasium.envs.classic_control import CartPoleEnv
        self._env = CartPoleEnv()
        self.observation_space, self.action_space = self._env.observation_space, \\
            self._env.action_space

gym.register("Audit25/FailsInChild-v0", entry_point=FailsInChild, max_episode_steps=50)
'''


@pytest.mark.subprocess
def test_an_async_envs_constructor_failing_in_its_subprocess_is_one_line(tmp_path):
    """Two of three workers fail to build their env and one builds it: one line, no traceback
    from the failing workers (gymnasium's builds outside its try) nor from the healthy one, which
    the parent ends with SIGTERM while the command's start-up handler is installed."""
    import subprocess
    import sys

    from cli_helpers import ROOT

    (tmp_path / "childenvs.py").write_text(CHILD_ONLY)
    out = tmp_path / "run"
    # exec: the script's process is the shell's, so its pid is the one exported
    proc = subprocess.run(
        ["sh", "-c", f'export AUDIT25_PARENT=$$; exec "{sys.executable}" '
         f'"{ROOT / "scripts" / "train.py"}" --env childenvs:Audit25/FailsInChild-v0 --out '
         f'"{out}" --total-steps 64 --num-envs 3 --set vector_mode=async --quiet'],
        cwd=tmp_path, capture_output=True, text=True, timeout=240,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)]),
                 AUDIT25_FLAG=str(tmp_path / "flag")))
    line = one_error_line(proc.stderr)
    assert proc.returncode == 2, proc.stderr
    assert "could not be created: RuntimeError: license server unreachable" in line
    assert not out.exists()
