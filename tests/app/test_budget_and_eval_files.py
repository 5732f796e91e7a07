"""--resume budgets (issue 24, item 4) and one file per kind of evaluation (item 5), through the
programs' mains as a user types them."""

from __future__ import annotations

import json
import shutil

import yaml
from cli_helpers import evaluate, one_error_line, train


def test_resume_total_below_the_step_is_refused_and_more_steps_adds(tmp_path, capsys):
    out = tmp_path / "run"
    code, _, err = train("--env", "CartPole-v1", "--total-steps", 40, "--num-envs", 1,
                         "--set", "n_steps=8", "--out", out, "--quiet", capsys=capsys)
    assert code == 0, err
    code, _, err = train("--resume", out, "--total-steps", 16, "--quiet", capsys=capsys)
    line = one_error_line(err)
    assert code == 2 and "--total-steps 16 is not above the run's step 40" in line
    assert "--more-steps N" in line
    code, _, err = train("--resume", out, "--more-steps", 16, "--quiet", capsys=capsys)
    assert code == 0, err
    assert yaml.safe_load((out / "config.yaml").read_text())["total_steps"] == 56
    code, _, err = train("--more-steps", 16, "--out", tmp_path / "new", capsys=capsys)
    assert code == 2 and "--more-steps adds steps to a resumed run" in one_error_line(err)
    code, _, err = train("--resume", out, "--more-steps", 8, "--total-steps", 90,
                         capsys=capsys)
    assert code == 2 and "choose one" in one_error_line(err)

    # each evaluation that is not the plain deterministic one has its own file
    code, _, err = evaluate(out, "--episodes", 2, capsys=capsys)
    assert code == 0, err
    plain = json.loads((out / "eval.json").read_text())
    code, stdout, err = evaluate(out, "--episodes", 3, "--stochastic", capsys=capsys)
    assert code == 0, err
    assert "eval-sampled.json" in stdout
    assert json.loads((out / "eval.json").read_text()) == plain
    assert json.loads((out / "eval-sampled.json").read_text())["episodes"] == 3
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)  # --overwrite knows the new files as pgrad's own
    code, _, err = train("--env", "CartPole-v1", "--total-steps", 8, "--num-envs", 1,
                         "--set", "n_steps=8", "--out", copy, "--overwrite", "--quiet",
                         capsys=capsys)
    assert code == 0, err
    assert not (copy / "eval-sampled.json").exists()
