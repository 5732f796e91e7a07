"""Issue 15, data loss: damaged and non-finite checkpoints, a full disk, two writers, --overwrite,
damaged CSV logs, resumes that do not match the run, code named by a run directory. Each case is
made as a user meets it: a real run, damaged by hand, then the scripts."""

from __future__ import annotations

import errno
import json
import time
from pathlib import Path

import pytest
import tensorflow as tf
from cli_helpers import (
    evaluate,
    one_error_line,
    popen_train,
    read_rows,
    run,
    snapshot,
    train,
)

from pgrad.rl.storage.checkpoint import CheckpointStore, NonFiniteCheckpoint

pytestmark = pytest.mark.subprocess

LAST = "step-000000000560"  # the finished run's newest checkpoint; 400 and 320 before it


def _data(path: Path) -> Path:
    return next(path.glob("ckpt.data-*"))


def _steps(out: Path, name: str) -> list[int]:
    return [int(r["step"]) for r in read_rows(out / name)]


# ---------------------------------------------------------------------------------------------
# Checkpoints.
# ---------------------------------------------------------------------------------------------


def test_a_damaged_checkpoint_at_a_replayed_step_is_rewritten(run_copy, capsys):
    newest = run_copy / "checkpoints" / LAST
    with open(_data(newest), "r+b") as f:  # truncate -s 100
        f.truncate(100)
    # The resume falls back to 400 and replays up to 560: that checkpoint is written again.
    code, _, err = train("--resume", run_copy, "--total-steps", 560, "--quiet", capsys=capsys)
    assert code == 0, err
    assert f"checkpoint {newest} is unusable (checksum mismatch" in err
    assert "from env step 400" in err
    CheckpointStore.verify(newest)
    kept = [r for r in read_rows(run_copy / "episodes.csv") if int(r["step"]) <= 560]
    # The next resume starts from 560 itself: nothing falls back, nothing is cut.
    code, _, err = train("--resume", run_copy, "--total-steps", 640, "--quiet", capsys=capsys)
    assert code == 0 and "unusable" not in err and "from env step 560" in err, err
    assert [r for r in read_rows(run_copy / "episodes.csv") if int(r["step"]) <= 560] == kept


def test_a_nonfinite_state_is_never_saved_and_the_stop_names_the_good_checkpoint(
        plugins, tmp_path, capsys):
    out = tmp_path / "run"
    # Finite gradients of 1e25 from the 5th update: RMSprop's running mean of their squares
    # overflows to inf. The weights stay finite; the optimizer state does not.
    code, _, err = train("--out", out, "--total-steps", 2000, "--checkpoint-every", 80, "--quiet",
                         "--set", "max_grad_norm=0",
                         "--transform", f"{plugins / 'user_tf.py'}:late_blowup", capsys=capsys)
    line = one_error_line(err)
    assert code == 1
    assert "the state at env step 400 holds NaN/Inf values (optimizer/" in line
    assert "not saved" in line
    good = out / "checkpoints" / "step-000000000320"
    assert f"the last good checkpoint {good} is intact" in line
    store = CheckpointStore(out / "checkpoints")
    assert store.checkpoints()[0] == good and store.newest_good() == good
    assert not list((out / "checkpoints").glob(".tmp-*"))


def test_an_update_that_overflows_the_weights_stops_before_anything_acts_on_them(
        plugins, tmp_path, capsys):
    out = tmp_path / "run"
    code, _, err = train("--out", out, "--total-steps", 50, "--num-envs", 1, "--set", "n_steps=1",
                         "--checkpoint-every", 1, "--quiet", "--set", "optimizer=sgd",
                         "--set", "learning_rate=10", "--set", "max_grad_norm=0",
                         "--transform", f"{plugins / 'user_tf.py'}:late_overflow", capsys=capsys)
    line = one_error_line(err)
    assert code == 1
    assert "update 5 (env step 5) made the policy's weights non-finite" in line
    good = out / "checkpoints" / "step-000000000004"
    assert f"the last good checkpoint {good} is intact" in line
    assert CheckpointStore(out / "checkpoints").newest_good() == good


def test_checkpoint_store_refuses_nonfinite_state_and_skips_a_nonfinite_checkpoint(tmp_path):
    store = CheckpointStore(tmp_path / "ck")
    v = tf.Variable([1.0, 2.0])
    store.save({"v": v}, {}, 10)
    v.assign([float("nan"), 0.0])
    with pytest.raises(NonFiniteCheckpoint, match="env step 20 holds NaN/Inf values"):
        store.save({"v": v}, {}, 20)
    assert [p.name for p in store.checkpoints()] == ["step-000000000010"]
    # A NaN checkpoint from before this check existed (checksums fine): skipped on restore.
    legacy = tmp_path / "ck" / "step-000000000030"
    legacy.mkdir()
    tf.train.Checkpoint(v=v).write(str(legacy / "ckpt"))
    import hashlib

    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in legacy.iterdir()}
    (legacy / "meta.json").write_text(json.dumps({"files": files, "step": 30}))
    warnings = []
    meta, path = store.restore({"v": v}, warn=warnings.append)
    assert path.name == "step-000000000010" and v.numpy().tolist() == [1.0, 2.0]
    assert len(warnings) == 1 and "holds NaN/Inf values" in warnings[0]
    assert store.newest_good().name == "step-000000000010"


@pytest.mark.parametrize("how", ["tensorflow", "meta"])
def test_disk_full_while_checkpointing_is_one_line_and_keeps_earlier_checkpoints(
        how, tmp_path, monkeypatch, capsys):
    import pgrad.rl.storage.checkpoint as ckpt

    calls = []
    if how == "tensorflow":  # TensorFlow's writer: ResourceExhaustedError
        write = tf.train.Checkpoint.write

        def full(self, prefix, *a, **k):
            calls.append(prefix)
            if len(calls) >= 3:
                raise tf.errors.ResourceExhaustedError(None, None, "No space left on device")
            return write(self, prefix, *a, **k)

        monkeypatch.setattr(tf.train.Checkpoint, "write", full)
    else:  # pgrad's own meta.json: OSError(ENOSPC)
        write_json = ckpt._write_json

        def full(path, record):
            calls.append(path)
            if len(calls) >= 3:
                raise OSError(errno.ENOSPC, "No space left on device")
            return write_json(path, record)

        monkeypatch.setattr(ckpt, "_write_json", full)
    out = tmp_path / "run"
    code, _, err = train("--out", out, "--total-steps", 800, "--checkpoint-every", 80, "--quiet",
                         capsys=capsys)
    line = one_error_line(err)
    assert code == 1
    assert "cannot write checkpoint step-000000000240" in line and "No space left" in line
    assert f"the last good checkpoint {out / 'checkpoints' / 'step-000000000160'}" in line
    store = CheckpointStore(out / "checkpoints")
    assert [p.name for p in store.checkpoints()] == ["step-000000000160", "step-000000000080"]
    for path in store.checkpoints():
        CheckpointStore.verify(path)
    assert not list((out / "checkpoints").glob(".tmp-*"))


# ---------------------------------------------------------------------------------------------
# One writer per run directory; --overwrite deletes only what pgrad wrote.
# ---------------------------------------------------------------------------------------------


def _wait_for_checkpoint(proc, out: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if CheckpointStore(out / "checkpoints").checkpoints():
            return
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read())
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("no checkpoint appeared")


def test_a_second_writer_is_refused_and_sigkill_leaves_no_stale_lock(tmp_path, capsys):
    out = tmp_path / "run"
    proc = popen_train("--total-steps", 10**7, "--quiet", "--checkpoint-every", 200, "--out", out)
    try:
        _wait_for_checkpoint(proc, out)
        code, _, err = train("--out", out, "--overwrite", "--total-steps", 100, capsys=capsys)
        assert code == 2 and f"{out} is in use by another training (pid {proc.pid})" in \
            one_error_line(err)
        code, _, err = train("--resume", out, "--total-steps", 10**7, capsys=capsys)
        assert code == 2 and "is in use by another training" in one_error_line(err)
        assert proc.poll() is None  # the first training goes on
    finally:
        proc.kill()  # SIGKILL: the kernel drops its lock
        proc.communicate(timeout=60)
    store = CheckpointStore(out / "checkpoints")
    back = json.loads((store.checkpoints()[0] / "meta.json").read_text())["env_steps"]
    code, _, err = train("--resume", out, "--total-steps", back + 80, "--quiet", capsys=capsys)
    assert code == 0, err


def test_two_trainings_started_into_one_out_at_once(tmp_path):
    out = tmp_path / "run"
    procs = [popen_train("--total-steps", 800, "--seed", seed, "--quiet", "--out", out)
             for seed in (1, 2)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    err = next(e for code, e in results if code == 2)
    assert "in use by another training" in err or "already holds a run" in err
    steps = _steps(out, "episodes.csv")
    assert steps == sorted(steps)
    text = (out / "updates.csv").read_text()
    assert text.count("step,") == 1  # one header


def test_overwrite_deletes_only_what_pgrad_wrote(run_copy, tmp_path, capsys):
    mine = {"checkpoints/model_v3.bin": b"weights", "tb/events.keep": b"old curves",
            "notes.txt": b"my notes", "policy/README.md": b"about the policy"}
    for name, data in mine.items():
        (run_copy / name).write_bytes(data)
    code, _, err = train("--out", run_copy, "--overwrite", "--total-steps", 80, "--quiet",
                         capsys=capsys)
    assert code == 0, err
    assert "--overwrite kept 4 file(s) pgrad did not write" in err
    for name, data in mine.items():
        assert (run_copy / name).read_bytes() == data
    assert [p.name for p in CheckpointStore(run_copy / "checkpoints").checkpoints()] == [
        "step-000000000080"]
    assert _steps(run_copy, "updates.csv") == [80]


def test_a_folder_without_the_marker_is_never_overwritten(tmp_path, capsys):
    folder = tmp_path / "models"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "model_v3.bin").write_bytes(b"weights")
    (folder / "tb").mkdir()
    (folder / "tb" / "events.keep").write_bytes(b"curves")
    before = snapshot(folder)
    for extra in ([], ["--overwrite"]):
        code, _, err = train("--out", folder, "--total-steps", 80, *extra, capsys=capsys)
        line = one_error_line(err)
        assert code == 2 and "holds checkpoints but is not a pgrad run directory" in line
    assert snapshot(folder) == before


def test_out_with_a_300_character_name_is_bad_input(tmp_path, capsys):
    out = tmp_path / ("x" * 300) / "run"
    code, _, err = train("--out", out, "--total-steps", 80, capsys=capsys)
    assert code == 2 and "is 300 bytes long; the file system allows 255" in one_error_line(err)


# ---------------------------------------------------------------------------------------------
# Validation before anything is written; a warning for much more work than asked.
# ---------------------------------------------------------------------------------------------

REFUSED = [
    (["--set", "learning_rate=.inf"], "learning_rate must be a finite number; got inf"),
    (["--set", "learning_rate=1e30"], "learning_rate must be in (0, 10]"),
    (["--set", "log_std_init=.nan"], "log_std_init must be a finite number; got nan"),
    (["--set", "hidden=[1e9]"], "hidden widths must be in [1, 16384]"),
    (["--set", "num_envs=100000"], "num_envs must be in [1, 4096]"),
    (["--set", "n_steps=100000", "--num-envs", "4096"], "must be <= 16,777,216 env steps"),
    (["--set", "total_steps=1e13"], "total_steps must be <= 1,000,000,000,000"),
    (["--config", "/dev/zero"], "is larger than 1024 KiB; it is not a pgrad config"),
]


@pytest.mark.parametrize("argv, fragment", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_absurd_settings_are_refused_before_anything_is_written(argv, fragment, tmp_path,
                                                                capsys):
    out = tmp_path / "run"
    code, _, err = train("--out", out, "--total-steps", 100, *argv, capsys=capsys)
    assert code == 2 and fragment in one_error_line(err)
    assert not out.exists()


def test_far_more_work_than_asked_is_one_warning_line(tmp_path, capsys):
    out = tmp_path / "run"
    code, stdout, err = train("--out", out, "--total-steps", 50, "--num-envs", 2, "--set",
                              "n_steps=100", "--quiet", capsys=capsys)
    assert code == 0
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines == ["warning: one update collects n_steps x num_envs = 100 x 2 = 200 env steps, "
                     "more than total_steps=50; the run will take at least 200 env steps."]
    assert "done (reached total_steps): 200 env steps" in stdout


# ---------------------------------------------------------------------------------------------
# CSV logs repaired on resume.
# ---------------------------------------------------------------------------------------------


def test_emptied_logs_get_their_headers_back_and_the_plot_works(run_copy, capsys):
    (run_copy / "episodes.csv").write_bytes(b"")
    (run_copy / "updates.csv").write_bytes(b"")
    (run_copy / "learning_curve.png").unlink()
    code, _, err = train("--resume", run_copy, "--total-steps", 800, "--quiet", capsys=capsys)
    assert code == 0 and "Traceback" not in err, err
    episodes = read_rows(run_copy / "episodes.csv")
    assert list(episodes[0]) == ["step", "wall_s", "return", "length"]
    assert all(560 < int(r["step"]) <= 800 for r in episodes)
    updates = read_rows(run_copy / "updates.csv")
    assert "policy_loss" in updates[0] and [int(r["step"]) for r in updates] == [640, 800]
    assert (run_copy / "learning_curve.png").stat().st_size > 0


def test_a_row_cut_mid_line_and_a_cut_header_are_dropped_and_restored(run_copy, capsys):
    episodes = run_copy / "episodes.csv"
    rows = read_rows(episodes)
    text = episodes.read_bytes()
    episodes.write_bytes(text[:-7])  # the last row loses its end (and its newline)
    updates = run_copy / "updates.csv"
    updates.write_bytes(updates.read_bytes()[:3])  # "ste": inside the header
    code, _, err = train("--resume", run_copy, "--total-steps", 640, "--quiet", capsys=capsys)
    assert code == 0, err
    assert f"{episodes}: dropped 1 damaged line(s)" in err
    after = read_rows(episodes)
    assert all(len(r) == 4 and None not in r.values() for r in after)
    assert after[:len(rows) - 1] == rows[:-1]  # everything but the cut row is kept as it was
    assert _steps(run_copy, "episodes.csv") == sorted(_steps(run_copy, "episodes.csv"))
    assert [int(r["step"]) for r in read_rows(updates)] == [640]


def test_repair_csv_and_a_headerless_updates_log(tmp_path):
    from pgrad_app.run.logs import RunLog, plot_learning_curve, repair_csv

    path = tmp_path / "updates.csv"
    path.write_text("80,0.5,1\n160,0.25,2\n240,0.1\n320,0.1,4\n400,0.2,5")  # no header
    head, kept, dropped = repair_csv(path, 320)
    assert head is None and kept == 4 and dropped == 1  # 400 is cut mid-line; nothing known yet
    log = RunLog(tmp_path, resume_step=320, tensorboard=False)
    log.update(400, {"loss": 0.3, "skips": 0})  # the first update names the columns
    log.close()
    assert path.read_text().splitlines() == [
        "step,loss,skips", "80,0.5,1", "160,0.25,2", "320,0.1,4", "400,0.3,0"]
    # A plot of a file that is not a CSV at all is a plot without points, never an error.
    garbage = tmp_path / "episodes.csv"
    garbage.write_bytes(b"\x00\xff\x17 not,a\ncsv")
    assert plot_learning_curve(garbage, tmp_path / "curve.png").stat().st_size > 0


# ---------------------------------------------------------------------------------------------
# Resume: the run's own record wins over an edited config.yaml; a failed resume writes nothing.
# ---------------------------------------------------------------------------------------------


def test_resume_refuses_another_transform_and_an_edited_config(run_copy, plugins, capsys):
    config = run_copy / "config.yaml"
    original = config.read_bytes()
    code, _, err = train("--resume", run_copy, "--total-steps", 800,
                         "--transform", f"{plugins / 'user_tf.py'}:good", capsys=capsys)
    assert code == 2 and "cannot be changed when resuming" in one_error_line(err)
    cases = [
        (b"agent: a2c", b"agent: ppo", "says agent 'ppo' but the run recorded 'a2c'"),
        (b"env: CartPole-v1", b"env: Acrobot-v1",
         "says env 'Acrobot-v1' but the run recorded 'CartPole-v1'"),
        (b"seed: 0", b"seed: 7", "says seed 7 but the run recorded 0"),
        (b"learning_rate: 0.0014", b"learning_rate: 0.01",
         "says hyperparameter learning_rate 0.01 but the run recorded 0.0014"),
    ]
    for old, new, fragment in cases:
        assert old in original
        edited = original.replace(old, new)
        config.write_bytes(edited)
        before = snapshot(run_copy)
        code, _, err = train("--resume", run_copy, "--total-steps", 800, capsys=capsys)
        line = one_error_line(err)
        assert code == 2 and fragment in line and "config.yaml was edited" in line
        assert snapshot(run_copy) == before  # config.yaml too: byte for byte


def test_a_failed_resume_leaves_config_yaml_byte_identical(run_copy, capsys):
    config = run_copy / "config.yaml"
    original = config.read_bytes()
    for path in CheckpointStore(run_copy / "checkpoints").checkpoints():
        with open(_data(path), "r+b") as f:
            f.truncate(100)
    code, _, err = train("--resume", run_copy, "--total-steps", 5000, capsys=capsys)
    line = one_error_line(err)
    assert code == 1 and "no checkpoint could be restored" in line
    assert config.read_bytes() == original


# ---------------------------------------------------------------------------------------------
# Code named by a run directory.
# ---------------------------------------------------------------------------------------------

EVIL = """
open({marker!r}, "w").write("executed")
"""


def test_code_beside_a_run_directory_runs_only_when_asked_for(run_copy, tmp_path, monkeypatch,
                                                              capsys):
    marker = tmp_path / "executed"
    (tmp_path / "evil.py").write_text(EVIL.format(marker=str(marker)))
    config = run_copy / "config.yaml"
    config.write_text(config.read_text().replace("env: CartPole-v1",
                                                 "env: evil.py:CartPole-v1"))
    monkeypatch.chdir(tmp_path)  # evil.py resolves here, beside the run directory
    before = snapshot(run_copy)
    code, _, err = evaluate("run", "--episodes", 1, capsys=capsys)
    line = one_error_line(err)
    assert code == 2 and "names code to import: env evil.py:CartPole-v1" in line
    assert "--trust-run-code" in line
    code, _, err = train("--resume", "run", "--total-steps", 800, capsys=capsys)
    assert code == 2 and "names code to import" in one_error_line(err)
    assert not marker.exists() and snapshot(run_copy) == before
    # Named on the command line (or trusted), it is the user's choice.
    code, _, err = evaluate("run", "--episodes", 1, "--trust-run-code", capsys=capsys)
    assert code == 0, err
    assert marker.read_text() == "executed"


def test_transform_help_says_side_effects_run_once():
    proc = run("train.py", "--help")
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert "happen once, when the graph is traced, not at every update" in text


def test_specs_name_the_same_plugin_by_file_name_across_working_directories():
    from pgrad_app.config.plugins import same_spec

    assert same_spec("user_tf.py:good", "/home/me/project/user_tf.py:good", split_last=True)
    assert not same_spec("user_tf.py:good", "user_tf.py:boom", split_last=True)
    assert not same_spec("user_tf.py:good", None, split_last=True)
    assert same_spec("mod:Env-v0", "mod:Env-v0") and not same_spec("mod:Env-v0", "other:Env-v0")
