"""The gradient-tools examples run as a user runs them (subprocess, small sizes).

The three scripts start together (one fixture) so their TensorFlow start-ups overlap.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.subprocess  # each example runs in its own interpreter

SCRIPTS = {
    "relu": ["custom_relu_gradcheck.py"],
    "clipping": ["per_sample_clipping.py", "--quick"],
    "reversal": ["gradient_reversal.py", "--quick"],
}


@pytest.fixture(scope="module")
def outputs():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = {
        name: subprocess.Popen(
            [sys.executable, str(ROOT / "examples" / script), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env,
        )
        for name, (script, *args) in SCRIPTS.items()
    }
    results = {}
    for name, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        results[name] = (proc.returncode, out, err)
    return results


def output(outputs, name: str) -> str:
    code, out, err = outputs[name]
    assert code == 0, err[-3000:]
    return out


def test_custom_relu_gradcheck(outputs):
    out = output(outputs, "relu")
    lines = out.splitlines()
    assert any("at 8 random points   PASS" in line for line in lines)
    assert any("at x = 0 (the kink)  FAIL" in line for line in lines)
    assert any("leaky_relu_bug" in line and "FAIL" in line for line in lines)
    assert any("stable_softplus_bug" in line and "FAIL" in line for line in lines)
    assert any("inputs (w, b, x)     PASS" in line for line in lines)
    assert out.count("vs reference: PASS") == 3 and "AGREES" not in out


def _mse(out: str, name: str) -> float:
    line = next(x for x in out.splitlines() if x.startswith(name))
    return float(line.split("clean test MSE")[1].split()[0])


def test_per_sample_clipping_quick(outputs):
    out = output(outputs, "clipping")
    clipped = _mse(out, "PerSampleModel, clip_per_step(1.0)")
    plain, clipnorm = _mse(out, "plain Keras fit()"), _mse(out, "plain Keras, Adam(clipnorm")
    # Corrupted targets pull plain Keras off; clipping each sample's gradient resists them.
    assert clipped < 0.75 * min(plain, clipnorm), (clipped, plain, clipnorm)
    assert "same predictions: True" in out


def test_gradient_reversal_quick(outputs):
    out = output(outputs, "reversal")
    rows = {line[:24].strip(): line[24:].split() for line in out.splitlines()
            if line.startswith(("baseline", "gradient reversal"))}
    assert set(rows) == {"baseline (factor 0)", "gradient reversal"}
    base, rev = ([float(v) for v in rows[k]] for k in ("baseline (factor 0)",
                                                       "gradient reversal"))
    assert base[0] > 0.7 and rev[0] > 0.7, (base, rev)  # both learn the labels
    # Reversal makes the features domain-invariant: the domain head does clearly worse.
    assert rev[2] < base[2] - 0.1, (base, rev)
