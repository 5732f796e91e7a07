"""The command line answers argument mistakes and --help before TensorFlow loads (issue 24, item
5): the programs' modules import no TensorFlow, and a subprocess proves it end to end."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from cli_helpers import ROOT

from pgrad_app.cli.entry import PARSE_FIRST, PROGRAMS

PROBE = """
import sys
from pgrad_app.cli import entry
code = entry.run({program!r}, {argv!r})
print("TF", "tensorflow" in sys.modules, "CODE", code)
"""


def probe(program: str, *argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", PROBE.format(program=program, argv=list(argv))],
                          capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.subprocess
@pytest.mark.parametrize("program", ["train", "evaluate", "export"])
def test_a_bad_flag_is_answered_without_tensorflow(program):
    r = probe(program, "--no-such-flag")
    assert "TF False CODE 2" in r.stdout, r.stderr
    assert r.stderr.startswith("error: ") and len(r.stderr.splitlines()) == 1, r.stderr


@pytest.mark.subprocess
def test_help_without_tensorflow_and_train_help_still_lists_hyperparameters():
    r = probe("evaluate", "--help")
    assert "TF False CODE 0" in r.stdout and "--episodes" in r.stdout, r.stderr
    r = probe("train", "--help")
    assert "CODE 0" in r.stdout and "hyperparameters (--set NAME=VALUE" in r.stdout, r.stderr


def test_every_parse_first_program_imports_no_tensorflow_with_its_module():
    code = ("import sys, importlib\n"
            f"for m in {[PROGRAMS[p] for p in PARSE_FIRST]!r}: importlib.import_module(m)\n"
            "print('tensorflow' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.stdout.strip() == "False", r.stderr
