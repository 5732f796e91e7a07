"""pgrad-train's env options as a user types them (issue 24, item 1): --env-kwargs (YAML-typed,
rl-zoo's key:value too), --env-wrapper by dotted name, --gym-packages; pgrad-evaluate and
--resume rebuild the same env, and code a run directory names is imported only when named."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from cli_helpers import ROOT, evaluate, one_error_line, train

REGISTERING = '''
import gymnasium as gym
gym.register("ShortPole-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv",
             max_episode_steps=20)
'''


def cli(script, *args, cwd):
    """``scripts/<script> ARGS`` in a fresh interpreter in ``cwd``: the runs that import the
    user's module (its registrations must not reach this process). Refusals, which import
    nothing, run in this process (``train`` / ``evaluate``: a TensorFlow start-up less each)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, str(ROOT / "scripts" / script), *map(str, args)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=cwd)


@pytest.mark.subprocess
def test_env_kwargs_wrapper_and_gym_packages_from_train_to_evaluate(tmp_path, capsys):
    (tmp_path / "myenvs.py").write_text(REGISTERING)
    r = cli("train.py", "--agent", "a2c", "--env", "Pendulum-v1", "--env-kwargs", "g=5",
            "max_episode_steps:30", "--env-wrapper", "gymnasium.wrappers.TimeAwareObservation",
            "--gym-packages", "myenvs", "--total-steps", "64", "--num-envs", "2",
            "--set", "n_steps=8", "--out", "run", "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert config["env_kwargs"] == {"g": 5, "max_episode_steps": 30}
    assert config["env_wrapper"] == ["gymnasium.wrappers.TimeAwareObservation"]
    assert config["gym_packages"] == ["myenvs"]
    # the run names a module to import: pgrad-evaluate asks before importing it
    code, _, err = evaluate(tmp_path / "run", "--episodes", "2", capsys=capsys)
    assert code == 2 and "names code to import: myenvs" in one_error_line(err)
    r = cli("evaluate.py", "run", "--episodes", "2", "--trust-run-code", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    result = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert result["lengths"] == [30, 30]  # the run's env options, rebuilt
    code, _, err = train("--resume", tmp_path / "run", "--total-steps", "128", "--quiet",
                         capsys=capsys)
    assert code == 2 and "--gym-packages" in one_error_line(err)
    r = cli("train.py", "--resume", "run", "--total-steps", "128", "--quiet", "--gym-packages",
            "myenvs", cwd=tmp_path)
    assert r.returncode == 0, r.stderr


@pytest.mark.subprocess
def test_registered_by_gym_packages_and_bad_options_in_one_line(tmp_path, capsys):
    (tmp_path / "myenvs.py").write_text(REGISTERING)
    r = cli("train.py", "--env", "ShortPole-v0", "--gym-packages", "myenvs", "--total-steps",
            "40", "--num-envs", "1", "--out", "short", "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    bad = tmp_path / "bad"
    code, _, err = train("--env", "Pendulum-v1", "--env-kwargs", "gravity=3", "--num-envs", "1",
                         "--total-steps", "40", "--out", bad, "--quiet", capsys=capsys)
    assert code == 2 and "gravity" in one_error_line(err)
    code, _, err = train("--env", "CartPole-v1", "--env-wrapper", "gymnasium.wrappers.Nope",
                         "--num-envs", "1", "--total-steps", "40", "--out", bad, "--quiet",
                         capsys=capsys)
    assert code == 2 and "has no attribute 'Nope'" in one_error_line(err)
    assert not (tmp_path / "bad").exists()
