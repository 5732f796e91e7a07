"""The package as a user installs it: a wheel, installed non-editable into a fresh venv, gives
the ``pgrad-train`` and ``pgrad-evaluate`` commands.

The fresh venv reuses this interpreter's site-packages for the dependencies (a ``.pth`` line; no
network, seconds instead of minutes); pgrad itself comes only from the wheel.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "pgrad", "agents", "pgrad_app")


def _run(*cmd, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300,
                          env=env, **kw)


@pytest.mark.subprocess
def test_wheel_installs_the_console_commands(tmp_path):
    src = tmp_path / "src"  # a copy: building in the checkout would leave build/ and egg-info
    src.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, src / name)
    build = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                 "--quiet", "-w", tmp_path / "dist", src)
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp_path / "dist").glob("pgrad-*.whl")

    venv = tmp_path / "venv"
    made = _run(sys.executable, "-m", "venv", "--without-pip", venv)
    assert made.returncode == 0, made.stderr
    py = venv / "bin" / "python"
    purelib = _run(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    (Path(purelib.stdout.strip()) / "pgrad_test_deps.pth").write_text(
        "\n".join(site.getsitepackages()) + "\n")
    install = _run(sys.executable, "-m", "pip", "--python", py, "install", "--no-deps",
                   "--no-index", "--quiet", wheel)
    assert install.returncode == 0, install.stderr

    site_dir = Path(purelib.stdout.strip())
    for package in ("pgrad", "agents", "pgrad_app"):  # copied in: not the checkout, not editable
        assert (site_dir / package / "__init__.py").is_file(), package
    assert not list(site_dir.glob("__editable__*"))
    assert (site_dir / "pgrad_app" / "config" / "hyperparams" / "a2c.yaml").is_file()  # data
    for package in ("pgrad", "agents"):  # PEP 561: their annotations reach a type checker
        assert (site_dir / package / "py.typed").is_file(), package
    for command, flag in (("pgrad-train", "--eval-every"), ("pgrad-evaluate", "--stochastic"),
                          ("pgrad-benchmark", "--report-only"), ("pgrad-sweep", "--grid")):
        proc = _run(venv / "bin" / command, "--help", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""  # no TensorFlow start-up noise from the installed command
        assert proc.stdout.startswith(f"usage: {command} ") and flag in proc.stdout
        assert "scripts/" not in proc.stdout
    # The benchmark from the wheel alone: its runs are modules of the package, not scripts/.
    results = tmp_path / "results"
    proc = _run(venv / "bin" / "pgrad-benchmark", "--agents", "a2c", "--envs", "CartPole-v1",
                "--seeds", "0", "--steps", "160", "--eval-episodes", "1", "--jobs", "1",
                "--results", results, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (results / "a2c__CartPole-v1__seed0.json").is_file()
    assert (results / "README.md").is_file()
