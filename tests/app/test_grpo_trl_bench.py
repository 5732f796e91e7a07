"""The ``grpo_vs_trl`` and ``transformer_cached_acting`` bench figures
(pgrad_app.perf.peers.grpo_trl): pgrad's side on a tiny budget, the TRL side skipped in one line
without its interpreter, the rounds interleaved and their ratios, and TRL's reward the same as
pgrad's Reversal reward. No torch here: TRL's script is only imported for its torch-free helpers."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

from pgrad_app.perf.peers import grpo_trl

TINY = {"d_model": 16, "num_heads": 2, "num_layers": 1, "ffn_dim": 32, "num_envs": 8,
        "group_size": 4, "warmup": 1, "steps": 2}


def _trl_script():
    spec = importlib.util.spec_from_file_location("trl_grpo_side", grpo_trl.TRL_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # stdlib imports only at the top
    return module


def test_pgrad_side_counts_the_completion_tokens_of_its_timed_updates():
    out = grpo_trl.pgrad_side(TINY)
    assert out["side"] == "pgrad" and out["steps"] == 2
    assert out["completions"] == 2 * 8  # one completion per env per update
    # each completion: 1 to max_digits + 1 = 6 tokens (end-of-sequence included)
    assert out["completions"] <= out["tokens"] <= 6 * out["completions"]
    # the agent's counter also counts envs stepping on after their completion ended
    assert out["tokens"] <= out["env_steps"] <= 2 * 8 * 6
    assert out["wall_s"] > 0 and out["cpu_s"] > 0
    d, f, v = 16, 32, 14  # embeddings (V + L positions), one block, final norm, the head
    block = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d)
    assert out["params"] == (v + 12) * d + block + 2 * d + (d * v + v)


def test_pgrad_side_refuses_unknown_settings():
    with pytest.raises(ValueError, match="unknown spec keys \\['num_generations'\\]"):
        grpo_trl.pgrad_side({"num_generations": 8})


def test_figure_is_skipped_in_one_line_without_the_trl_interpreter(monkeypatch, tmp_path):
    missing = tmp_path / "venv-trl" / "bin" / "python"
    monkeypatch.setattr(grpo_trl, "TRL_PYTHON", missing)

    def no_process(*args, **kwargs):
        raise AssertionError("no run may start without the interpreter")

    monkeypatch.setattr(grpo_trl, "side_run", no_process)
    out = grpo_trl.grpo_vs_trl(repeats=60)
    assert out["name"] == "grpo_vs_trl" and out["met"] is False and math.isnan(out["value"])
    reason = out["details"]["skipped"]
    assert "\n" not in reason and str(missing) in reason and "PGRAD_TRL_PYTHON" in reason
    assert set(out["details"]) == {"skipped"}
    not_executable = tmp_path / "python"
    not_executable.write_text("")
    assert str(not_executable) in grpo_trl.trl_missing(not_executable)


def test_rounds_alternate_the_sides_and_the_value_is_the_median_ratio(monkeypatch, tmp_path):
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    order, tokens_per_s = [], {"pgrad": iter([300.0, 100.0, 200.0]),
                               "trl": iter([100.0, 100.0, 100.0])}

    def fake_run(side, spec, trl_python):
        order.append(side)
        assert trl_python == python and spec["steps"] == 7 and spec["threads"] == 1
        return {"side": side, "tokens": next(tokens_per_s[side]), "wall_s": 1.0,
                "cpu_s": 2.0, "params": 5}

    monkeypatch.setattr(grpo_trl, "side_run", fake_run)
    out = grpo_trl.grpo_vs_trl(0, steps=7, rounds=3, trl_python=python, threads=1)
    assert order == ["pgrad", "trl", "trl", "pgrad", "pgrad", "trl"]
    assert out["value"] == 2.0 and out["met"] is True  # median of 3, 1, 2
    assert out["details"]["round_ratios"] == [3.0, 1.0, 2.0]
    assert out["details"]["tokens_per_s"] == {"pgrad": 200.0, "trl": 100.0}
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        grpo_trl.grpo_vs_trl(0, rounds=0, trl_python=python)


@pytest.mark.skipif(grpo_trl.trl_missing() is not None, reason="no TRL interpreter")
def test_trl_side_runs_a_tiny_budget_under_its_own_interpreter():
    spec = {**TINY, "threads": 1, "prompts": 16}
    out = grpo_trl.side_run("trl", spec)
    assert out["side"] == "trl" and out["completions"] == 2 * 8 and out["torch_threads"] == 1
    assert out["completions"] <= out["tokens"] <= 6 * out["completions"]
    d, f, v = 16, 32, 14  # GPT-2: the head tied to the token embedding
    block = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d)
    assert out["params"] == (v + 12) * d + block + 2 * d
    with pytest.raises(RuntimeError, match="unknown spec keys"):
        grpo_trl.side_run("trl", {"bogus": 1})


@pytest.mark.parametrize("argv, want", [
    ([], {"rounds": grpo_trl.ROUNDS}), (["--rounds", "6", "--steps", "12"], {"rounds": 6,
                                                                            "steps": 12})])
def test_the_bench_command_lists_and_passes_its_settings(monkeypatch, argv, want):
    from pgrad_app.cli.bench import build_parser
    from pgrad_app.perf import driver

    seen = {}

    def fake(repeats, **kwargs):
        seen.update(kwargs)
        return {"name": "grpo_vs_trl", "details": {}}

    assert "grpo_vs_trl" in driver.OPT_IN and "transformer_cached_acting" in driver.FIGURES
    monkeypatch.setitem(driver.OPT_IN, "grpo_vs_trl", fake)
    out = driver.run_figure("grpo_vs_trl", build_parser().parse_args(["--only", "grpo_vs_trl",
                                                                      *argv]))
    assert seen == want and out[0]["details"]["figure_process_peak_rss_mb"] > 0


def test_side_run_names_a_failed_run(tmp_path):
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 'no trl here' >&2\nexit 3\n")
    python.chmod(0o755)
    with pytest.raises(RuntimeError, match="the trl run failed \\(exit 3\\)"):
        grpo_trl.side_run("trl", {"steps": 1}, python)


def test_trl_reward_and_prompts_are_pgrads_reversal():
    from pgrad.rl.tokens.tasks import Reversal, partial_credit

    side = _trl_script()
    for completion, answer in [("1413", "1413"), ("14", "1413"), ("141399", "1413"),
                               ("", "12"), ("9413", "1413"), ("", "")]:
        assert side.partial_credit(completion, answer) == partial_credit("", completion, answer)
    data = side.reversal_prompts(200, 3, 5, seed=1)
    env = Reversal(3, 5, shaping=True)
    for prompt, answer in zip(data["prompt"], data["answer"]):
        digits = prompt[:-1]
        assert prompt[-1] == "=" and 3 <= len(digits) <= 5 and answer == digits[::-1]
        assert len(env.tokenizer.encode(prompt)) <= env.max_prompt_tokens
    assert {len(p) - 1 for p in data["prompt"]} == {3, 4, 5}
    assert set(side.DEFAULTS) >= set(grpo_trl.SPEC)  # the same spec drives both sides


def test_completion_contexts_grow_one_token_per_call():
    contexts = grpo_trl.completion_contexts({"num_envs": 4})
    assert len(contexts) == 6 and all(c.shape == (4, 12) for c in contexts)
    for before, after in zip(contexts, contexts[1:]):
        grown = np.count_nonzero(after, axis=1) - np.count_nonzero(before, axis=1)
        np.testing.assert_array_equal(grown, 1)
        kept = before != 0
        np.testing.assert_array_equal(after[kept], before[kept])


def test_cached_acting_figure_matches_the_full_pass():
    out = grpo_trl.cached_acting(3, {k: TINY[k] for k in ("d_model", "num_heads", "num_layers",
                                                           "ffn_dim", "num_envs", "group_size")})
    d = out["details"]
    assert out["name"] == "transformer_cached_acting" and out["value"] > 0
    assert d["rows_stepped_from_cache"] and d["max_abs_param_diff"] < 1e-5
    assert d["acting_calls"] == 6 and d["batch"] == 8
