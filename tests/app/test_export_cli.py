"""pgrad-export: a run's exported policy to TFLite and ONNX, bad input as one line."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from cli_helpers import one_error_line, run

import agents
from pgrad_app.cli import export as export_script
from pgrad_app.errors import run_cli


def export_cli(*argv, capsys) -> tuple[int, str, str]:
    code = run_cli(export_script.main, [str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A directory holding ``policy/``, as a run directory or agent.save leaves it."""
    out = tmp_path_factory.mktemp("run")
    agent = agents.make("a2c", "CartPole-v1", seed=0, num_envs=2, n_steps=4, hidden=(8,))
    agent.step()
    agent.export_policy(str(out / "policy"))
    agent.close()
    return out


def test_export_writes_tflite_and_onnx_that_act_as_the_saved_model(run_dir, tmp_path, capsys):
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("tf2onnx")
    code, out, err = export_cli(run_dir, "--tflite", tmp_path / "p.tflite", "--onnx",
                                tmp_path / "p.onnx", capsys=capsys)
    assert code == 0 and err == "", err
    lines = out.splitlines()
    assert lines[0].startswith(f"wrote {tmp_path / 'p.tflite'} (") and "TFLite" in lines[0]
    assert lines[1].startswith(f"wrote {tmp_path / 'p.onnx'} (") and "ONNX, action" in lines[1]
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    loaded = tf.saved_model.load(str(run_dir / "policy"))  # kept: its functions use its variables
    want = loaded.action(obs).numpy()
    lite = litert.Interpreter(model_path=str(tmp_path / "p.tflite"))
    assert sorted(lite.get_signature_list()) == ["action", "action_masked",
                                                 "distribution_params", "sample_with_noise"]
    np.testing.assert_array_equal(lite.get_signature_runner("action")(observation=obs)[
        "output_0"], want)
    session = ort.InferenceSession(str(tmp_path / "p.onnx"))
    np.testing.assert_array_equal(session.run(None, {"observation": obs})[0], want)


def test_export_picks_signatures_and_the_opset(run_dir, tmp_path, capsys):
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("tf2onnx")
    code, _, err = export_cli(run_dir / "policy", "--tflite", tmp_path / "a.tflite",
                              "--signature", "action", capsys=capsys)
    assert code == 0, err
    assert list(litert.Interpreter(model_path=str(tmp_path / "a.tflite"))
                .get_signature_list()) == ["action"]
    code, out, err = export_cli(run_dir, "--onnx", tmp_path / "s.onnx", "--signature",
                                "sample_with_noise", "--opset", 17, capsys=capsys)
    assert code == 0 and "ONNX, sample_with_noise" in out, err
    model = onnx.load(str(tmp_path / "s.onnx"))
    assert [i.name for i in model.graph.input] == ["noise", "observation"]
    assert {o.domain: o.version for o in model.opset_import}[""] == 17


@pytest.mark.parametrize("argv, fragment", [
    ((), "nothing to write: give --tflite FILE and/or --onnx FILE"),
    (("--onnx", "x.onnx", "--signature", "action", "--signature", "sample_with_noise"),
     "an ONNX file holds one signature; got 2"),
    (("--tflite", "x.tflite", "--signature", "sample"),
     "signature 'sample' does not convert to TFLite"),
    (("--onnx", "x.onnx", "--signature", "sample"), "cannot convert signature 'sample'"),
    (("--tflite", "x.tflite", "--signature", "act"), "has no signature 'act'"),
])
def test_export_bad_input_is_one_line(run_dir, tmp_path, capsys, argv, fragment, monkeypatch):
    pytest.importorskip("tf2onnx")
    monkeypatch.chdir(tmp_path)
    code, out, err = export_cli(run_dir, *argv, capsys=capsys)
    assert code == 2 and out == ""
    assert fragment in one_error_line(err)
    assert not list(tmp_path.iterdir())  # nothing written


def test_export_of_a_directory_without_a_policy_is_one_line(tmp_path, capsys):
    code, _, err = export_cli(tmp_path, "--tflite", tmp_path / "x.tflite", capsys=capsys)
    assert code == 2 and "holds no exported policy" in one_error_line(err)


@pytest.mark.subprocess
def test_export_script_runs_as_a_user_would(run_dir, tmp_path):
    proc = run("export.py", run_dir, "--tflite", tmp_path / "p.tflite")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith(f"wrote {tmp_path / 'p.tflite'} (")
    assert (tmp_path / "p.tflite").stat().st_size > 1000
