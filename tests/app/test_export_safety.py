"""pgrad-export loses nothing: the destination is checked before any work, written through a
temporary file and a rename, and a file pgrad did not write is replaced only with --overwrite;
every OS error is one line naming the file."""

from __future__ import annotations

import errno
import os
import resource
from pathlib import Path

import pytest
from cli_helpers import one_error_line, run

import agents
from pgrad.rl.export import deploy, destination
from pgrad_app.cli import export as export_script
from pgrad_app.errors import run_cli

FOREIGN = b"the user's own model, not pgrad's\n"


def export_cli(*argv, capsys) -> tuple[int, str, str]:
    code = run_cli(export_script.main, [os.fsdecode(a) if isinstance(a, bytes) else str(a)
                                        for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A directory holding ``policy/``, as a run directory leaves it."""
    out = tmp_path_factory.mktemp("run")
    agent = agents.make("a2c", "CartPole-v1", seed=0, num_envs=2, n_steps=4, hidden=(8,))
    agent.step()
    agent.export_policy(str(out / "policy"))
    agent.close()
    return out


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name)


def test_a_file_pgrad_did_not_write_is_never_replaced_without_overwrite(run_dir, tmp_path,
                                                                         capsys):
    keep = tmp_path / "keep.tflite"
    keep.write_bytes(FOREIGN)
    code, out, err = export_cli(run_dir, "--tflite", keep, capsys=capsys)
    line = one_error_line(err)
    assert code == 2 and out == ""
    assert f"--tflite {keep} exists and pgrad did not write it" in line and "--overwrite" in line
    assert keep.read_bytes() == FOREIGN and leftovers(tmp_path) == []
    # --overwrite replaces it; from then on the file is pgrad's, and a new export replaces it.
    code, out, err = export_cli(run_dir, "--tflite", keep, "--overwrite", capsys=capsys)
    assert code == 0 and err == "" and out.startswith(f"wrote {keep} ("), err
    first = keep.read_bytes()
    assert first != FOREIGN and first[4:8] == b"TFL3"  # a TFLite flatbuffer
    assert destination.written_by_pgrad(keep) and destination.record_path(keep).is_file()
    code, out, err = export_cli(run_dir, "--tflite", keep, "--signature", "action",
                                capsys=capsys)
    assert code == 0 and err == "", err
    assert keep.read_bytes() != first and destination.written_by_pgrad(keep)
    # Changed by someone since (same name, other bytes): no longer pgrad's.
    keep.write_bytes(keep.read_bytes() + b"\0")
    code, _, err = export_cli(run_dir, "--tflite", keep, capsys=capsys)
    assert code == 2 and "pgrad did not write it" in one_error_line(err)
    assert leftovers(tmp_path) == []


def test_the_python_api_keeps_the_same_rule(run_dir, tmp_path):
    keep = tmp_path / "keep.onnx"
    keep.write_bytes(FOREIGN)
    with pytest.raises(ValueError, match="exists and pgrad did not write it"):
        deploy.to_onnx(run_dir, keep)
    with pytest.raises(ValueError, match="exists and pgrad did not write it"):
        deploy.to_tflite(run_dir, keep)
    assert keep.read_bytes() == FOREIGN
    # A stale record (its file replaced by the user's) does not make the user's file pgrad's.
    destination.record_path(keep).write_text(
        '{"kind": "pgrad export record", "sha256": "0", "size": 34}')
    assert not destination.written_by_pgrad(keep)


@pytest.mark.parametrize("name, fragment", [
    (".", "--tflite . names a folder, not a file"),
    ("..", "--tflite .. names a folder, not a file"),
    ("", "the file name is empty"),
    ("sub/", "names a folder, not a file"),
    ("adir", "is a directory; give a file name inside it"),
    ("missing/p.tflite", "the folder missing does not exist"),
    ("afile/p.tflite", "the folder afile is not a directory"),
    ("x" * 250 + ".tflite", "the file name is 257 bytes"),
])
def test_the_destination_is_checked_before_any_work(run_dir, tmp_path, capsys, monkeypatch,
                                                    name, fragment):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")

    def no_work(*a, **k):
        raise AssertionError("the export was loaded before the destination was checked")

    monkeypatch.setattr(deploy, "_load", no_work)
    code, out, err = export_cli(run_dir, "--tflite", name, capsys=capsys)
    line = one_error_line(err)
    assert code == 2 and out == "" and fragment in line, line
    assert "PosixPath" not in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "afile"]


def test_both_flags_on_one_file_are_refused(run_dir, tmp_path, capsys):
    code, _, err = export_cli(run_dir, "--tflite", tmp_path / "m", "--onnx", tmp_path / "m",
                              capsys=capsys)
    assert code == 2 and "--tflite and --onnx name the same file" in one_error_line(err)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_refused_before_any_work(run_dir, tmp_path, capsys):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        code, _, err = export_cli(run_dir, "--tflite", folder / "p.tflite", capsys=capsys)
    finally:
        folder.chmod(0o755)
    assert code == 2 and f"the folder {folder} is not writable" in one_error_line(err)


class _FullDisk:
    """A file whose writes fail as ``errno_`` says (a full disk, a read-only file system)."""

    def __init__(self, errno_: int):
        self.errno = errno_

    def __call__(self, path, mode="r", *a, **k):
        if "w" not in mode:
            return open(path, mode, *a, **k)
        raise OSError(self.errno, os.strerror(self.errno), os.fspath(path))


@pytest.mark.parametrize("code_, words", [(errno.ENOSPC, "no space left on device"),
                                          (errno.EROFS, "read-only file system"),
                                          (errno.EACCES, "permission denied")])
def test_a_failed_write_is_one_line_naming_the_file_and_keeps_the_old_one(
        run_dir, tmp_path, capsys, monkeypatch, code_, words):
    out_file = tmp_path / "p.tflite"
    code, _, err = export_cli(run_dir, "--tflite", out_file, capsys=capsys)
    assert code == 0, err
    before = out_file.read_bytes()
    monkeypatch.setattr(destination, "open", _FullDisk(code_), raising=False)
    code, out, err = export_cli(run_dir, "--tflite", out_file, "--signature", "action",
                                capsys=capsys)
    line = one_error_line(err)
    assert code == 1 and out == ""
    assert line == f"error: cannot write {out_file}: {words}; nothing was replaced."
    assert out_file.read_bytes() == before and destination.written_by_pgrad(out_file)
    assert leftovers(tmp_path) == []


def _limit_file_size(limit: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_the_file_size_limit_is_one_line_and_the_old_file_stays(run_dir, tmp_path, capsys):
    """A real limit (RLIMIT_FSIZE, as ``ulimit -f``): the write fails with EFBIG part way."""
    out_file = tmp_path / "p.tflite"
    code, _, err = export_cli(run_dir, "--tflite", out_file, capsys=capsys)
    assert code == 0, err
    before = out_file.read_bytes()
    assert len(before) > 1024
    proc = run("export.py", run_dir, "--tflite", out_file, "--signature", "action",
               preexec_fn=_limit_file_size(1024))
    assert proc.returncode == 1, proc.stderr
    line = one_error_line(proc.stderr)
    assert line == (f"error: cannot write {out_file}: file too large for the file-size limit "
                    "(ulimit -f) or the file system; nothing was replaced.")
    assert out_file.read_bytes() == before and destination.written_by_pgrad(out_file)
    assert leftovers(tmp_path) == []


def test_a_path_that_is_not_utf8_is_written_and_shown_escaped(run_dir, tmp_path, capsys):
    name = os.fsencode(tmp_path) + b"/caf\xe9.tflite"
    code, out, err = export_cli(run_dir, "--tflite", name, capsys=capsys)
    assert code == 0 and err == "", err
    assert out.startswith(f"wrote {tmp_path}/caf\\xe9.tflite (")
    assert destination.written_by_pgrad(os.fsdecode(name))
    code, _, err = export_cli(run_dir, "--tflite", os.fsencode(tmp_path) + b"/n\xe9/p.tflite",
                              capsys=capsys)
    assert code == 2 and "the folder " in one_error_line(err) and "n\\xe9 does not exist" in err
