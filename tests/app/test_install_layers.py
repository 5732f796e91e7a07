"""The Makefile's install layers: what `make train`'s core layer asks pip for.

The core layer installs pgrad with ``--no-deps`` and then its runtime requirements as read from
its metadata, with TensorFlow's distribution chosen by ``TF`` (its CPU build where no GPU
answers) and tf-keras left to a ``--no-deps`` install. These tests run the Makefile's own
``requirements`` target, so they check the rule ``make train`` uses.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _requirements(**variables: str) -> list[str]:
    args = [f"{name}={value}" for name, value in variables.items()]
    done = subprocess.run(["make", "-s", "--no-print-directory", "requirements",
                           f"PY={sys.executable}", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.split()


def _name(requirement: str) -> str:
    for i, char in enumerate(requirement):
        if char in "<>=!~[; ":
            return requirement[:i]
    return requirement


def test_the_core_layer_takes_tensorflows_cpu_build_and_leaves_tf_keras_to_no_deps():
    reqs = _requirements(TF="tensorflow-cpu")
    names = [_name(r) for r in reqs]
    core = [_name(r) for r in PROJECT["dependencies"]]
    assert set(names) == (set(core) - {"tensorflow", "tf-keras"}) | {"tensorflow-cpu"}
    # the version range is pgrad's own, carried over to the CPU build
    wanted = Requirement(next(r for r in PROJECT["dependencies"] if _name(r) == "tensorflow"))
    got = Requirement(next(r for r in reqs if _name(r) == "tensorflow-cpu"))
    assert got.specifier == wanted.specifier
    # tensorflow-probability keeps its name: only the `tensorflow` distribution is renamed
    assert "tensorflow-probability" in names


def test_the_full_build_is_one_setting_away():
    names = [_name(r) for r in _requirements(TF="tensorflow")]
    assert "tensorflow" in names and "tensorflow-cpu" not in names


def test_an_extra_adds_its_own_packages_and_no_others():
    core = set(_requirements(TF="tensorflow-cpu"))
    with_docs = set(_requirements(TF="tensorflow-cpu", EXTRAS="docs"))
    added = {_name(r) for r in with_docs - core}
    docs = {_name(r) for r in PROJECT["optional-dependencies"]["docs"]}
    assert added == docs
    assert core <= with_docs


def test_the_pinned_versions_hold_for_the_cpu_build_too():
    pins = (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines()
    versions = {line.split("==")[0].lower(): line.split("==")[1] for line in pins if "==" in line}
    assert versions["tensorflow-cpu"] == versions["tensorflow"]
