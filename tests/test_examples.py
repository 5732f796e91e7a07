"""The RL workflow examples (examples/*.py) run on tiny budgets, so they never rot.

Each example's ``main(argv)`` runs in this process (TensorFlow is loaded once) and returns what
it printed as numbers; the notebook runs in its own kernel (nbclient) with its budget cell
replaced by a smaller one.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def run_example(name: str, *argv: str) -> dict:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(list(argv))


def test_ppo_save_load_evaluate(tmp_path, capsys):
    out = run_example("ppo_save_load_evaluate", "--steps", "1024", "--episodes", "2",
                      "--out", str(tmp_path / "ppo"))
    assert out["env_steps"] >= 1024  # the loaded agent's predictions and counters are asserted
    assert (tmp_path / "ppo" / "policy").is_dir() and (tmp_path / "ppo" / "agent.json").is_file()
    assert out["return_mean"] > 0
    assert "same greedy actions on 64 observations: True" in capsys.readouterr().out


def test_reward_weighted_a2c():
    out = run_example("reward_weighted_a2c", "--steps", "1000")
    assert out["env_steps"] >= 1000 and out["recent_return"] > 0
    assert 1.0 < out["max_weight"] <= 20.0  # exp of a standardised advantage, capped


def test_adaptive_clip_transform():
    out = run_example("adaptive_clip_transform", "--steps", "500")
    assert out["max_difference"] < 1e-5  # against the plain loop over steps
    assert 0 < out["pg_grad_norm"] <= 0.5 + 1e-5  # clip_by_global_norm(0.5) after it
    assert out["norm_average"] > 0 and 0 <= out["clip_fraction"] <= 1


def test_tuned_settings(capsys):
    out = run_example("tuned_settings", "--steps", "512", "--set", "gamma=0.99")
    assert out["settings"] >= 5 and out["env_steps"] >= 512
    printed = capsys.readouterr().out
    assert "n_steps: 32" in printed and "learning rate lin_1e-3" in printed


@pytest.mark.subprocess  # a Jupyter kernel of its own
def test_notebook_trains_plots_and_evaluates(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(EXAMPLES / "train_plot_evaluate.ipynb", as_version=4)
    parameters = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(parameters) == 1
    parameters[0].source = "TOTAL_STEPS = 1000\nEVAL_EPISODES = 2"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "env steps," in text and "greedy return over 2 episodes" in text
    assert not [o for o in outputs if o.output_type == "error"]


def test_custom_env_kwargs():
    out = run_example("custom_env_kwargs", "--length", "6", "--steps", "20000")
    assert out["obs_size"] == 6  # the kwargs reached the env (its one-hot observation)
    # solved: the greedy policy walks straight to the goal, 5 steps, the best return
    assert out["length_mean"] == 5 and abs(out["return_mean"] - out["optimum"]) < 1e-6


def test_callback_custom_scalar(tmp_path):
    out = run_example("callback_custom_scalar", "--target", "30", "--steps", "20000",
                      "--logdir", str(tmp_path / "tb"))
    assert out["stopped"] == 1 and out["env_steps"] < 20000  # stopped early, by the callback
    assert out["points"] >= 1 and 0 < out["last_logged"] <= out["best"]  # read from the events


def test_continuous_tuned():
    # a constant learning rate: the tuned lin_1e-3 is 0 at the end, so for a one-update run
    out = run_example("continuous_tuned", "--steps", "1024", "--set", "n_steps=256",
                      "--set", "epochs=1", "--set", "learning_rate=1e-3", "--episodes", "1")
    assert out["env_steps"] >= 1024 and out["action_dim"] == 1
    assert out["inside"] == 1 and out["spread"] > 0  # bounded greedy and sampled actions
    assert out["std_after"] != out["std_before"]  # the learned log-std moved
    assert -2000 < out["return_mean"] < 0  # Pendulum's returns


def test_tuning_run(tmp_path, capsys):
    results = tmp_path / "tune"
    out = run_example("tuning_run", "--trials", "1", "--steps", "500", "--evaluations", "1",
                      "--results", str(results))
    assert out["trials"] == 1 and out["counted"] == 1
    assert out["retrained"] == out["best_value"]  # best.yaml reproduces the best trial
    assert {"study.db", "best.yaml", "README.md"} <= {p.name for p in results.iterdir()}
    assert "a second call ran 0 more" in capsys.readouterr().out


def test_evaluate_video(tmp_path):
    out = run_example("evaluate_video", "--target", "20", "--episodes", "2",
                      "--out", str(tmp_path))
    assert out["videos"] == 2  # a film of every step (and of the reset, but for short ones)
    assert all(n <= f <= n + 1 for f, n in zip(out["frames"], out["lengths"]))


@pytest.mark.slow  # starts Ray (once) and 3 actors
def test_ray_workers():
    pytest.importorskip("ray")
    out = run_example("ray_workers", "--target", "30", "--steps", "5000")
    assert out["gap"] == 0.0  # one worker is the in-process run exactly
    assert out["env_steps"] < 5000 and out["return_mean"] > 0
