"""Issue 15, one line for every env and evaluation failure: envs that raise, that cannot be built,
that return what pgrad cannot use; evaluate.py on damaged runs and impossible requests."""

from __future__ import annotations

import json
import shutil

import pytest
from cli_helpers import evaluate, one_error_line, run, train

from pgrad.rl.storage.checkpoint import CheckpointStore

pytestmark = pytest.mark.subprocess

# (env, exit code, fragments of the one error line); num_envs=2, so the 3rd vector step is
# env step 6 and the first is env step 2.
ENV_FAILURES = [
    ("StepRaises", 1, ["env step 6", "RuntimeError: sensor offline"]),
    ("StepRaisesFirst", 1, ["env step 2", "RuntimeError: sensor offline"]),
    ("StringObs", 1, ["env step 6", "observations must be numeric"]),
    ("StringObsFirst", 1, ["env step 2", "observations must be numeric"]),
    ("WrongShape", 1, ["env step 6", "Output array is the wrong shape",
                       "does not fit the observation space Box(-1.0, 1.0, (2,), float32)"]),
    ("WrongShapeFirst", 1, ["env step 2", "does not fit the observation space"]),
    ("ArrayTerminated", 1, ["env step 6", "terminated and truncated must be one number"]),
    ("ArrayTerminatedFirst", 1, ["env step 2", "terminated and truncated must be one number"]),
    ("CtorRaises", 2, ["could not be created: RuntimeError: license server unreachable"]),
    ("Huge", 2, ["observation space MultiBinary((100000, 100000)) flattens to "
                 "10,000,000,000 values"]),
]


@pytest.mark.parametrize("name, code, fragments", ENV_FAILURES,
                         ids=[name for name, _, _ in ENV_FAILURES])
def test_env_failures_are_one_line_naming_env_and_step(name, code, fragments, plugins, tmp_path,
                                                       monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(plugins))
    out = tmp_path / "run"
    got, _, err = train("--env", f"badenvs:Bad/{name}-v0", "--out", out, "--total-steps", 200,
                        "--quiet", "--num-envs", 2, capsys=capsys)
    line = one_error_line(err)
    assert got == code, err
    assert f"env 'Bad/{name}-v0'" in line
    for fragment in fragments:
        assert fragment in line
    if code == 2:  # found before anything was written
        assert not out.exists()
    else:
        assert "no checkpoint had been written yet" in line


def test_an_async_env_whose_step_raises_is_one_line(plugins, tmp_path):
    proc = run("train.py", "--env", "badenvs:Bad/StepRaises-v0", "--out", tmp_path / "run",
               "--total-steps", 200, "--quiet", "--num-envs", 2, "--set", "vector_mode=async",
               cwd=plugins)
    line = one_error_line(proc.stderr)
    assert proc.returncode == 1
    assert "env 'Bad/StepRaises-v0' failed at env step 6: RuntimeError: sensor offline" in line


# ---------------------------------------------------------------------------------------------
# evaluate.py
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def custom_run(plugins, tmp_path_factory):
    """A short run on an env whose constructor takes no render_mode (trained in a subprocess)."""
    out = tmp_path_factory.mktemp("custom") / "run"
    proc = run("train.py", "--env", "badenvs:Bad/NoRenderMode-v0", "--out", out,
               "--total-steps", 200, "--num-envs", 2, "--checkpoint-every", 40, "--quiet",
               cwd=plugins)
    assert proc.returncode == 0, proc.stderr
    return out


ENV = ["--env", "badenvs:Bad/NoRenderMode-v0"]  # the run's env module, named again


def test_evaluate_an_env_without_render_mode_and_refuse_video_for_it(custom_run, plugins,
                                                                     tmp_path, monkeypatch,
                                                                     capsys):
    monkeypatch.syspath_prepend(str(plugins))
    code, out, err = evaluate(custom_run, "--episodes", 2, *ENV, "--seed", 3, capsys=capsys)
    assert code == 0 and err == "", err
    assert "2 episodes" in out
    code, _, err = evaluate(custom_run, "--episodes", 1, *ENV, "--video", tmp_path / "v",
                            capsys=capsys)
    line = one_error_line(err)
    assert code == 2 and "--video: env 'Bad/NoRenderMode-v0' cannot render frames (its " \
        "constructor takes no render_mode)" in line


def test_evaluate_bad_requests_are_one_line(custom_run, plugins, tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(plugins))
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    cases = [
        (["--seed", -1], 2, "--seed must be >= 0; got -1"),
        (["--video", blocker / "videos"], 2, "cannot write there (Not a directory)"),
        (["--env", "badenvs:Bad/StepRaises-v0", "--trust-run-code"], 1,
         "env 'Bad/StepRaises-v0' failed at step 3 of evaluation episode 0 (seed 10000): "
         "RuntimeError: sensor offline"),
    ]
    for argv, want, fragment in cases:
        extra = [] if "--env" in argv else ENV
        code, _, err = evaluate(custom_run, "--episodes", 2, *extra, *argv, capsys=capsys)
        assert code == want and fragment in one_error_line(err), (argv, err)


def test_evaluate_a_damaged_export_falls_back_then_every_checkpoint_damaged_is_one_line(
        custom_run, plugins, tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(plugins))
    out = tmp_path / "run"
    shutil.copytree(custom_run, out)
    (out / "policy" / "saved_model.pb").write_bytes(b"garbage" * 100)
    code, stdout, err = evaluate(out, "--episodes", 2, *ENV, capsys=capsys)
    lines = err.splitlines()
    assert code == 0 and len(lines) == 1, err
    assert lines[0].startswith("warning: cannot load the exported policy") and \
        "evaluated the newest good checkpoint instead" in lines[0]
    assert json.loads((out / "eval.json").read_text())["source"] == "checkpoint"
    for path in CheckpointStore(out / "checkpoints").checkpoints():
        data = next(path.glob("ckpt.data-*"))
        data.write_bytes(b"\0" * data.stat().st_size)
    code, _, err = evaluate(out, "--episodes", 2, *ENV, capsys=capsys)
    line = one_error_line(err)
    assert code == 2 and "its exported policy cannot be loaded" in line
    assert "no checkpoint could be restored" in line and "checksum mismatch" in line
    # Without the export at all (an interrupted run): the same, one line.
    shutil.rmtree(out / "policy")
    code, _, err = evaluate(out, "--episodes", 2, *ENV, capsys=capsys)
    assert code == 2 and "no checkpoint could be restored" in one_error_line(err)
