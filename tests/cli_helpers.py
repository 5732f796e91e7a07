"""Running the scripts as a user would, for the end-to-end tests: in this process through
``run_cli(main)`` (fast) or as a subprocess (signals, concurrency, a fresh interpreter)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

from pgrad_app.errors import run_cli

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


from pgrad_app.cli import evaluate as evaluate_script  # noqa: E402  (the programs' main)
from pgrad_app.cli import train as train_script  # noqa: E402


def train(*argv, capsys=None) -> tuple[int, str, str]:
    """``train.py ARGV`` in this process; returns (exit code, stdout, stderr)."""
    code = run_cli(train_script.main, [str(a) for a in argv])
    out = capsys.readouterr() if capsys is not None else None
    return code, (out.out if out else ""), (out.err if out else "")


def evaluate(*argv, capsys=None) -> tuple[int, str, str]:
    """``evaluate.py ARGV`` in this process; returns (exit code, stdout, stderr)."""
    code = run_cli(evaluate_script.main, [str(a) for a in argv])
    out = capsys.readouterr() if capsys is not None else None
    return code, (out.out if out else ""), (out.err if out else "")


def run(script: str, *args, timeout=240, **kw) -> subprocess.CompletedProcess:
    """``scripts/<script> ARGS`` in a subprocess (PYTHONPATH and the rest of the environment
    inherited)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **kw.pop("env", {}))
    return subprocess.run([PY, str(ROOT / "scripts" / script), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=env, **kw)


def popen_train(*args) -> subprocess.Popen:
    return subprocess.Popen([PY, str(ROOT / "scripts" / "train.py"), *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def one_error_line(err: str) -> str:
    """The one line of stderr, which must be an error (no traceback, nothing else)."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err and lines[0].startswith("error: "), err
    return lines[0]


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` (hidden ones too) -> its bytes."""
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}
