"""What used to be found only after work began is found before it: search-space ranges that
reach values the agent refuses (before trial 0), an --out too long for the files pgrad writes
below it and --env-kwargs of the wrong type (before the run directory exists), a videos/ that is
no folder (before a resumed run changes); and a full disk while checkpointing is one line in
the OS's words, the earlier checkpoints intact."""

from __future__ import annotations

import errno
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tensorflow as tf
from cli_helpers import ROOT, one_error_line, train

import agents
from pgrad.rl.storage.checkpoint import CheckpointStore
from pgrad_app.errors import UserError, run_cli

optuna = pytest.importorskip("optuna")

from pgrad_app.cli import tune as tune_cli  # noqa: E402
from pgrad_app.experiments.tuning import search_spaces  # noqa: E402


def check_space(tmp_path: Path, text: str, agent: str = "a2c", base: dict | None = None):
    path = tmp_path / "space.yaml"
    path.write_text(text + "\n")
    cls = agents.get(agent).Config
    space = search_spaces.load(agent, cls, path)
    search_spaces.check_values(space, cls, base or {}, agent)
    return path


# -- search spaces: every value a trial can sample is one the agent accepts -------------------


@pytest.mark.parametrize("text, says", [
    ("vf_coef: {type: float, low: -0.5, high: 1.0}",
     "vf_coef: the low end -0.5 is refused by a2c: vf_coef must be "),
    ("optimizer: {type: categorical, choices: [adam, lamb]}",
     "optimizer: the choice lamb is refused by a2c: optimizer must be one of"),
    ("n_steps: {type: int, low: 0, high: 64}",
     "n_steps: the low end 0 is refused by a2c: n_steps must be >= 1"),
    ("n_steps: {type: log_int, low: 8, high: 100000000}",
     "n_steps: the high end 100000000 is refused by a2c: n_steps x num_envs must be <= "
     "16,777,216"),
    ("n_steps: {type: int, low: 8, high: 8000008, step: 1000000}",
     "n_steps: the high end 8000008 is refused by a2c"),
    ("gamma: {type: log_float, low: 1.0e-3, high: 1.5, one_minus: true}",
     "gamma: the high end (1 - 1.5) -0.5 is refused by a2c: gamma must be in [0, 1]"),
    ("encoder: {type: categorical, choices: [mlp, resnet50]}",
     "encoder: the choice resnet50 is refused by a2c"),
    ("learning_rate: {type: log_float, low: 1.0e-5, high: 20.0}",
     "learning_rate: the high end 20.0 is refused by a2c: learning_rate must be in (0, 10]"),
])
def test_a_range_reaching_a_refused_value_is_one_line_with_file_and_key(tmp_path, text, says):
    with pytest.raises(UserError) as err:
        check_space(tmp_path, text)
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'space.yaml'}: ") and says in message, message
    assert "\n" not in message and "every value a trial may sample must be valid" in message


def test_valid_ranges_and_combinations_of_searched_keys_pass(tmp_path):
    # Each end and choice alone is valid; minibatch 512 only divides the larger rollouts (a
    # combination, left to the trial), and one_minus gamma's ends are 0.9999 and 0.9.
    check_space(tmp_path, "n_steps: {type: categorical, choices: [32, 2048]}\n"
                "minibatch_size: {type: categorical, choices: [32, 512]}\n"
                "gamma: {type: log_float, low: 1.0e-4, high: 0.1, one_minus: true}\n"
                "vf_coef: {type: float, low: 0.0, high: 1.0}", agent="ppo",
                base={"num_envs": 1})
    # The same minibatch choice with nothing searched to rescue it: the range is wrong.
    with pytest.raises(UserError, match="minibatch_size: the choice 512 is refused by ppo: "
                       "minibatch_size must divide n_steps x num_envs = 64"):
        check_space(tmp_path, "minibatch_size: {type: categorical, choices: [32, 512]}",
                    agent="ppo", base={"num_envs": 1, "n_steps": 64})
    shipped = [n for n in agents.names() if search_spaces.path_for(n).is_file()
               or search_spaces.declared_space(n) is not None]
    assert {"a2c", "ppo", "npg", "reinforce", "trpo"} <= set(shipped)
    for name in shipped:  # every shipped space, with the agent's defaults
        cls = agents.get(name).Config
        search_spaces.check_values(search_spaces.load(name, cls), cls, {}, name)


def test_pgrad_tune_refuses_the_range_before_trial_0(tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text("vf_coef: {type: float, low: -1.0, high: 0.5}\n")
    results = tmp_path / "r"
    code = run_cli(tune_cli.main, ["--agent", "a2c", "--env", "CartPole-v1", "--steps", "1000",
                                   "--space", str(space), "--results", str(results)])
    err = capsys.readouterr().err
    assert code == 2 and f"{space}: vf_coef: the low end -1.0 is refused by a2c" in \
        one_error_line(err)
    assert not results.exists()


# -- pgrad-train: before the run directory exists ---------------------------------------------


def test_an_out_too_long_for_the_files_below_it_is_refused_before_any_work(tmp_path, capsys,
                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = "/".join(["d" * 200] * 20)  # 4,019 characters: each part fits, the whole does not
    start = time.monotonic()
    code, _, err = train("--out", out, "--total-steps", 100, capsys=capsys)
    line = one_error_line(err)
    assert code == 2 and "bytes long with the 200 bytes of names pgrad writes below it" in line
    assert "allows 4,096 in all" in line and len(line) < 400
    assert time.monotonic() - start < 20
    assert list(tmp_path.iterdir()) == []


def test_env_kwargs_of_the_wrong_type_are_one_line_and_leave_no_run_directory(tmp_path,
                                                                            capsys):
    out = tmp_path / "run"
    code, _, err = train("--env", "Pendulum-v1", "--env-kwargs", 'g="9.81"', "--total-steps",
                         100, "--out", out, capsys=capsys)
    line = one_error_line(err)
    assert code == 2 and not out.exists()
    assert "--env-kwargs g=\"9.81\": env 'Pendulum-v1' cannot be stepped with them: TypeError" \
        in line
    code, _, err = train("--env", "Pendulum-v1", "--env-kwargs", "gravity=9.81", "--total-steps",
                         100, "--out", out, capsys=capsys)
    assert code == 2 and "gravity" in one_error_line(err) and not out.exists()
    # The right type trains.
    code, _, err = train("--env", "Pendulum-v1", "--env-kwargs", "g=9.81", "--total-steps", 64,
                         "--set", "num_envs=2", "--set", "n_steps=8", "--set", "hidden=[8]",
                         "--out", out, "--quiet", capsys=capsys)
    assert code == 0, err


def test_resume_with_capture_video_and_a_file_named_videos_is_one_line(tmp_path, capsys):
    pytest.importorskip("moviepy")
    out = tmp_path / "run"
    code, _, err = train("--out", out, "--total-steps", 160, "--set", "num_envs=2", "--set",
                         "n_steps=8", "--set", "hidden=[8]", "--quiet", capsys=capsys)
    assert code == 0, err
    (out / "videos").write_text("not a folder")
    before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    code, _, err = train("--resume", out, "--total-steps", 320, "--capture-video", 1,
                         capsys=capsys)
    assert code == 2 and f"--capture-video: {out / 'videos'} exists and is not a folder" in \
        one_error_line(err)
    after = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert after == before  # the run is as it was


# -- a full disk while checkpointing ----------------------------------------------------------


def test_a_full_disk_in_tensorflows_writer_is_the_os_words_naming_the_checkpoint(
        tmp_path, monkeypatch, capsys):
    write, calls = tf.train.Checkpoint.write, []

    def full(self, prefix, *a, **k):  # what TensorFlow's SaveV2 raises on a full disk
        calls.append(prefix)
        if len(calls) >= 3:
            raise tf.errors.ResourceExhaustedError(None, None, (
                "{{function_node __wrapped__SaveV2_dtypes_2_device_/job:localhost/replica:0/"
                f"task:0/device:CPU:0}} {prefix}_temp/part-00000-of-00001.data-00000-of-00001."
                "tempstate123; No space left on device [Op:SaveV2]"))
        return write(self, prefix, *a, **k)

    monkeypatch.setattr(tf.train.Checkpoint, "write", full)
    out = tmp_path / "run"
    code, _, err = train("--out", out, "--total-steps", 800, "--checkpoint-every", 80,
                         "--quiet", capsys=capsys)
    line = one_error_line(err)
    assert code == 1
    assert ("cannot write checkpoint step-000000000240 in "
            f"{out / 'checkpoints'}: No space left on device;") in line
    assert "function_node" not in line and "SaveV2" not in line and "tempstate" not in line
    store = CheckpointStore(out / "checkpoints")
    assert [p.name for p in store.checkpoints()] == ["step-000000000160", "step-000000000080"]
    for path in store.checkpoints():
        CheckpointStore.verify(path)


def test_the_file_size_limit_while_checkpointing_keeps_the_earlier_checkpoint(tmp_path):
    """A real limit (RLIMIT_FSIZE in a subprocess): TensorFlow's writer fails part way."""
    script = f"""
import resource, sys
import tensorflow as tf
from pgrad.rl.storage.checkpoint import CheckpointStore, CheckpointWriteError
v = tf.Variable(tf.ones([50_000]))
store = CheckpointStore({str(tmp_path / 'ck')!r})
store.save({{"v": v}}, {{}}, 10)
resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
try:
    store.save({{"v": v}}, {{}}, 20)
except CheckpointWriteError as err:
    print("ERROR", err)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("ERROR")]
    assert lines == [f"ERROR cannot write checkpoint step-000000000020 in {tmp_path / 'ck'}: "
                     "File too large"], proc.stdout + proc.stderr
    store = CheckpointStore(tmp_path / "ck")
    assert [p.name for p in store.checkpoints()] == ["step-000000000010"]
    CheckpointStore.verify(store.checkpoints()[0])
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["step-000000000010"]
    assert json.loads((store.checkpoints()[0] / "meta.json").read_text())["step"] == 10


def test_os_errors_keep_their_words():
    from pgrad.rl.storage.checkpoint import write_reason

    assert write_reason(OSError(errno.ENOSPC, "No space left on device")) == \
        "No space left on device"
    assert write_reason(tf.errors.UnknownError(None, None, "{{function_node x}} /a/b; Read-only "
                                               "file system [Op:SaveV2]")) == \
        "Read-only file system"
    assert write_reason(tf.errors.UnknownError(None, None, "{{function_node __wrapped__SaveV2}}"
                                               " something odd\nmore [Op:SaveV2]")) == \
        "something odd"


def test_a_real_file_size_limit_mid_run_is_one_line_and_keeps_the_last_checkpoint(tmp_path):
    """pgrad-train in a subprocess; once it has a checkpoint, its file-size limit is lowered
    (``resource.prlimit``, as ``ulimit -f`` would from inside) below a checkpoint's size."""
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "train.py"), "--out", str(out), "--total-steps",
         str(10**7), "--checkpoint-every", "160", "--set", "hidden=[256,256]", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    store = CheckpointStore(out / "checkpoints")
    try:
        deadline = time.monotonic() + 120
        while not store.checkpoints():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.05)
        resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (150_000, 150_000))
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, err
    line = one_error_line(err)
    good = store.checkpoints()[0]
    assert f"in {out / 'checkpoints'}: File too large; " in line and str(good) in line, line
    assert "function_node" not in line
    CheckpointStore.verify(good)
    assert not [p for p in (out / "checkpoints").iterdir() if p.name.startswith(".")]


def test_tune_results_at_a_path_that_is_not_utf8_is_one_line(tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text("learning_rate: {type: log_float, low: 1.0e-4, high: 3.0e-3}\n")
    results = os.fsdecode(os.fsencode(tmp_path) + b"/r\xff")
    code = run_cli(tune_cli.main, ["--agent", "a2c", "--env", "CartPole-v1", "--steps", "1000",
                                   "--space", str(space), "--results", results])
    err = capsys.readouterr().err
    line = one_error_line(err)
    assert code == 2 and "r\\udcff: the path is not valid UTF-8" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["space.yaml"]
