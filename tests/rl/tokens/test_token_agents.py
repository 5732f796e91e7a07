"""Token tasks through pgrad's agents and command, with no other code: PPO (the "auto" encoder:
the Transformer) updates on pgrad/Reversal-v0 (by factory and by id, guarded), a user's module
trains with pgrad-train, and a reward function that raises ends the run with one line, keeping
the checkpoints."""

from __future__ import annotations

import textwrap

import gymnasium as gym
import numpy as np
import pytest
from cli_helpers import one_error_line, train

import agents
from pgrad.rl.tokens import TokenGuard, register

register()

SMALL = {"num_envs": 4, "n_steps": 32, "minibatch_size": 64, "epochs": 2}


def test_ppo_updates_on_reversal_through_the_python_api():
    updates = []
    agent = agents.make("ppo", lambda: TokenGuard(gym.make("pgrad/Reversal-v0")), seed=0,
                        **SMALL)
    before = agent.acting_state()["weights"].copy()
    agent.learn(2_000, callbacks=lambda loop: updates.append(loop.updates), progress=False)
    after = agent.acting_state()["weights"]
    assert len(updates) >= 10 and np.all(np.isfinite(after))
    assert not np.array_equal(before, after)
    obs, _ = gym.make("pgrad/Reversal-v0").reset(seed=0)
    action, _ = agent.predict(obs, deterministic=True)
    assert 0 <= int(action) < 14
    by_id = agents.make("ppo", "pgrad/Addition-v0", seed=1,  # the guard by name, as rl-zoo
                        env_wrapper="pgrad.rl.tokens.protocol:TokenGuard", **SMALL)
    by_id.learn(128, progress=False)
    assert by_id.env_steps >= 128


USER_MODULE = textwrap.dedent("""
    import gymnasium as gym

    from pgrad.rl.tokens import from_prompts

    ROWS = [{"prompt": p, "answer": p[::-1]} for p in ["ab", "ba", "aab", "abb"]]


    def strict(prompt, completion, answer):
        if len(completion) > 1:
            raise KeyError("grader offline")
        return 0.0


    CALLS = [0]


    def late(prompt, completion, answer):
        CALLS[0] += 1
        if CALLS[0] > 60:
            raise KeyError("grader offline")
        return float(completion == answer)


    gym.register("tokdemo/Echo-v0", entry_point=lambda: from_prompts(ROWS, max_new_tokens=4))
    gym.register("tokdemo/Late-v0", entry_point=lambda: from_prompts(ROWS, late, max_new_tokens=4))
    gym.register("tokdemo/Strict-v0",
                 entry_point=lambda: from_prompts(ROWS, strict, max_new_tokens=4))
""")


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "tokdemo_tasks.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "tokdemo_tasks"


@pytest.mark.subprocess  # the command end to end, as a user runs it (in this process)
def test_a_users_token_env_trains_with_pgrad_train(user_module, tmp_path, capsys):
    out = tmp_path / "run"
    code, _, err = train("--agent", "ppo", "--env", f"{user_module}:tokdemo/Echo-v0", "--out",
                         out, "--total-steps", 256, "--num-envs", 2, "--quiet", "--set",
                         "n_steps=64", capsys=capsys)
    assert code == 0, err
    rows = (out / "episodes.csv").read_text().splitlines()
    assert rows[0].startswith("step,") and len(rows) > 10
    assert (out / "policy").is_dir()


@pytest.mark.subprocess  # the command end to end, as a user runs it (in this process)
def test_a_reward_function_that_raises_ends_the_run_with_one_line(user_module, tmp_path, capsys):
    out = tmp_path / "run"
    code, _, err = train("--agent", "ppo", "--env", f"{user_module}:tokdemo/Strict-v0", "--out",
                         out, "--total-steps", 256, "--num-envs", 2, "--quiet", "--set",
                         "n_steps=64", capsys=capsys)
    line = one_error_line(err)
    assert code == 1, err
    for fragment in ("env 'tokdemo/Strict-v0' failed at env step ", "RewardFunctionError: reward "
                     "function 'strict' on prompt #", "raised KeyError: 'grader offline'",
                     "no checkpoint had been written yet"):
        assert fragment in line, line


@pytest.mark.subprocess  # the command end to end, as a user runs it (in this process)
def test_checkpoints_written_before_a_reward_function_fails_are_kept(user_module, tmp_path,
                                                                      capsys):
    out = tmp_path / "run"
    code, _, err = train("--agent", "ppo", "--env", f"{user_module}:tokdemo/Late-v0", "--out",
                         out, "--total-steps", 1024, "--num-envs", 2, "--quiet", "--set",
                         "n_steps=32", "--set", "checkpoint_every=64", capsys=capsys)
    line = one_error_line(err)
    assert code == 1, err
    assert "reward function 'late' on prompt #" in line and "checkpoint" in line, line
    assert "is intact" in line, line
    assert any((out / "checkpoints").iterdir())
