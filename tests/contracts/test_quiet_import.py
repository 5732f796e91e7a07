"""Importing pgrad or the agents prints nothing of TensorFlow's start-up (the CUDA probe, oneDNN's
notice, the CPU-feature notice) and changes nothing global; warnings, errors and exceptions
still reach stderr; ``PGRAD_TF_LOGS=1`` and the user's own ``TF_CPP_MIN_LOG_LEVEL`` win.

The filter itself runs against a stand-in ``tensorflow`` package that writes what TensorFlow
2.21 writes while loading (recorded on this machine), plus a warning and an error of its own,
so each case is exact and takes no TensorFlow start-up; two tests import the real one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pgrad._quiet_tf import keep

ROOT = Path(__file__).resolve().parents[2]
HELPER = ROOT / "pgrad" / "_quiet_tf.py"
BANNER = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
#: Recorded from `import tensorflow` (2.21.0, CPU machine) and its first device query.
STARTUP = [
    BANNER,
    "I0000 00:00:1796473962.224999   13420 port.cc:153] oneDNN custom operations are on. You may "
    "see slightly different numerical results due to floating-point round-off errors.",
    "I0000 00:00:1796473962.225338   13420 cudart_stub.cc:31] Could not find cuda drivers on your "
    "machine, GPU will not be used.",
    "I0000 00:00:1796473962.273391   13420 cpu_feature_guard.cc:227] This TensorFlow binary is "
    "optimized to use available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild "
    "TensorFlow with the appropriate compiler flags.",
]
PROBE = ("E0000 00:00:1796473966.088284   13420 cuda_platform.cc:52] failed call to cuInit: "
         "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)")
WARNING = "W0000 00:00:1796473962.3   13420 env_var.cc:7] a warning of TensorFlow's own"
ERROR = "E0000 00:00:1796473966.1   13420 graph.cc:12] an error of TensorFlow's own"
FATAL = "F0000 00:00:1796473966.2   13420 check.cc:99] a fatal check"
PYTHON = "a line Python printed while TensorFlow loaded"
NOISE = ("absl::InitializeLog", "oneDNN", "cuda drivers", "cpu_feature_guard", "To enable",
         "cuInit")


def _lines(*lines: str) -> str:
    return "".join(line + "\n" for line in lines)


def test_the_filter_drops_startup_noise_and_keeps_the_rest():
    said = _lines(*STARTUP, WARNING, PYTHON, PROBE, ERROR, FATAL)
    assert keep(said, 1, user_level=False) == _lines(WARNING, PYTHON, ERROR, FATAL)


@pytest.mark.parametrize("level,kept", [
    (0, [*STARTUP, WARNING, PYTHON, PROBE, ERROR, FATAL]),
    (1, [WARNING, PYTHON, PROBE, ERROR, FATAL]),
    (2, [PYTHON, PROBE, ERROR, FATAL]),
    (3, [PYTHON, FATAL]),
])
def test_a_level_of_the_users_own_is_applied_to_the_startup_lines(level, kept):
    """TensorFlow writes these lines before it reads TF_CPP_MIN_LOG_LEVEL; the filter applies
    the user's level as TensorFlow does to later lines, the CUDA probe's error included."""
    said = _lines(*STARTUP, WARNING, PYTHON, PROBE, ERROR, FATAL)
    assert keep(said, level, user_level=True) == _lines(*kept)


def test_a_continuation_line_follows_its_message_only():
    """The CPU-feature notice's second line goes with it; the same text elsewhere stays."""
    said = _lines(WARNING, STARTUP[-1])
    assert keep(said, 1, user_level=False) == said


FAKE_TENSORFLOW = f"""
import os, sys
os.write(2, {_lines(*STARTUP, WARNING)!r}.encode())
print({PYTHON!r}, file=sys.stderr)
print("level while loading:", os.environ.get("TF_CPP_MIN_LOG_LEVEL"))
if os.environ.get("FAKE_TF_BROKEN"):
    raise ImportError("this TensorFlow cannot load")

class config:
    @staticmethod
    def list_physical_devices(kind):
        os.write(2, {_lines(PROBE, ERROR)!r}.encode())
        return []
"""


def _import_fake(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """Runs pgrad/_quiet_tf.py (alone, not the package) over the stand-in TensorFlow."""
    (tmp_path / "tensorflow").mkdir(exist_ok=True)
    (tmp_path / "tensorflow" / "__init__.py").write_text(FAKE_TENSORFLOW)
    code = textwrap.dedent(f"""
        import os, runpy
        before = dict(os.environ)
        try:
            runpy.run_path({str(HELPER)!r})
        finally:
            print("environment unchanged:", dict(os.environ) == before)
    """)
    clean = {k: v for k, v in os.environ.items()
             if k not in ("PGRAD_TF_LOGS", "TF_CPP_MIN_LOG_LEVEL")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**clean, "PYTHONPATH": str(tmp_path), **env})


def test_by_default_only_startup_noise_is_dropped(tmp_path):
    proc = _import_fake(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == _lines(WARNING, PYTHON, ERROR)
    assert "level while loading: 1" in proc.stdout  # TensorFlow's INFO lines off for later too
    assert "environment unchanged: True" in proc.stdout


def test_pgrad_tf_logs_shows_everything(tmp_path):
    proc = _import_fake(tmp_path, PGRAD_TF_LOGS="1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == _lines(*STARTUP, WARNING, PYTHON)  # no device query: TensorFlow's own
    assert "level while loading: None" in proc.stdout


@pytest.mark.parametrize("level", ["0", "3"])
def test_the_users_own_level_wins(tmp_path, level):
    proc = _import_fake(tmp_path, TF_CPP_MIN_LOG_LEVEL=level)
    assert proc.returncode == 0, proc.stderr
    expected = [*STARTUP, WARNING, PYTHON, PROBE, ERROR] if level == "0" else [PYTHON]
    assert proc.stderr == _lines(*expected)
    assert f"level while loading: {level}" in proc.stdout
    assert "environment unchanged: True" in proc.stdout


def test_an_import_that_fails_says_why(tmp_path):
    """The exception is raised with stderr restored, after what TensorFlow said that matters."""
    proc = _import_fake(tmp_path, FAKE_TF_BROKEN="1")
    assert proc.returncode == 1
    assert proc.stderr.startswith(_lines(WARNING, PYTHON)), proc.stderr
    assert proc.stderr.rstrip().endswith("ImportError: this TensorFlow cannot load")
    assert not any(noise in proc.stderr for noise in NOISE)
    assert "environment unchanged: True" in proc.stdout


def _run(code: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("PGRAD_TF_LOGS", "TF_CPP_MIN_LOG_LEVEL")}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=240, cwd=ROOT, env=clean)


@pytest.mark.subprocess  # a fresh interpreter: TensorFlow loads in it
def test_import_pgrad_prints_nothing_and_leaves_no_log_level():
    proc = _run("""
        import os
        import pgrad
        import tensorflow as tf
        tf.reduce_sum(tf.ones([3]))  # the first op: nothing more to say either
        # TensorFlow, cv2 and pygame set variables of their own; pgrad's level is gone again
        assert "TF_CPP_MIN_LOG_LEVEL" not in os.environ
        print("ok")
    """)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
    assert proc.stderr == ""


@pytest.mark.subprocess  # a fresh interpreter: TensorFlow loads in it
def test_the_agents_load_quietly():
    """``import agents`` loads no TensorFlow; an agent, its callbacks and its first update
    print nothing on stderr either (the progress bar is off)."""
    proc = _run("""
        import sys
        import agents
        assert "tensorflow" not in sys.modules
        agent = agents.make("a2c", "CartPole-v1", seed=0, n_steps=8, num_envs=2)
        agent.learn(32, callbacks=agents.callbacks.StopAtReturn(475), progress=False)
        print("ok")
    """)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
    assert proc.stderr == ""


@pytest.mark.subprocess  # a fresh interpreter: TensorFlow loads in it
@pytest.mark.parametrize("module", ["agents.update.minibatch", "agents.base"])
def test_an_agents_module_imported_first_loads_quietly(module):
    """A script that starts from one of the agents' modules (not ``import agents``) also
    loads TensorFlow through pgrad: no start-up lines."""
    proc = _run(f"""
        import {module}
        print("ok")
    """)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
    assert proc.stderr == ""
