"""The run directory's one owner: every file a run writes is a name of RunLayout, what
``--overwrite`` deletes is derived from it, and every atomic writer uses one temporary spelling."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

from cli_helpers import evaluate, train

from pgrad.rl.storage.files import is_temp, temp_glob, temp_path, write_atomic
from pgrad_app.run import directory
from pgrad_app.run.layout import RunLayout


def _owned(rel: Path, spec: dict) -> bool:
    """Whether the relative path ``rel`` is a name (and inside, a name) of ``spec``."""
    head, *rest = rel.parts
    for pattern, sub in spec.items():
        if fnmatch.fnmatchcase(head, pattern):
            if not rest:
                return True
            if isinstance(sub, dict):
                return _owned(Path(*rest), sub)
    return False


def test_every_file_of_a_full_run_is_owned_and_overwrite_leaves_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    code, _, err = train("--out", out, "--total-steps", 320, "--eval-every", 160,
                         "--eval-episodes", 1, "--quiet", capsys=capsys)
    assert code == 0, err
    code, _, err = evaluate(out, "--episodes", 1, "--attack", "fgsm", "--epsilon", "0.1",
                            capsys=capsys)
    assert code == 0, err
    # What a kill leaves: a temporary of every top-level name, and of a checkpoint directory.
    for name in os.listdir(out):
        if not name.startswith("."):
            temp = temp_path(out / name)
            temp.mkdir() if (out / name).is_dir() else temp.write_text("x")
    half_written = temp_path(out / "checkpoints" / "step-000000000160")
    half_written.mkdir()
    (half_written / "ckpt.index").write_bytes(b"half")
    files = [p.relative_to(out) for p in out.rglob("*") if p.is_file()]
    assert {"config.yaml", "agent.json", "eval.csv", "eval-attack-fgsm.json", "robustness.png"} <= {
        f.name for f in files}
    assert any(f.parts[0] == "best" for f in files) and any(f.parts[0] == "tb" for f in files)
    owned = RunLayout.owned()
    unowned = [str(f) for f in files if f.name not in (RunLayout.MARKER, RunLayout.LOCK)
               and not _owned(f, owned)]
    assert unowned == []
    assert directory.clear(out) == []
    assert sorted(os.listdir(out)) == [RunLayout.LOCK, RunLayout.MARKER]


def test_a_new_file_name_is_owned_with_its_temporary_spelling():
    owned = RunLayout.owned()
    for name in (RunLayout.CONFIG, RunLayout.EPISODES, RunLayout.EVALUATION, RunLayout.POLICY):
        assert name in owned and temp_glob(name) in owned
    assert fnmatch.fnmatchcase(temp_path(Path("x") / "config.yaml").name, temp_glob("config.yaml"))
    assert "notes.txt" not in owned and not _owned(Path("checkpoints/model_v3.bin"), owned)


def test_write_atomic_replaces_whole_or_not_at_all(tmp_path, monkeypatch):
    path = tmp_path / "config.yaml"
    write_atomic(path, "old\n")
    real_replace = os.replace

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    try:
        write_atomic(path, "new\n")
    except OSError:
        pass
    monkeypatch.setattr(os, "replace", real_replace)
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["config.yaml"]  # no temporary left
    assert is_temp(temp_path(path).name) and not is_temp(path.name)
