"""Recurrent PPO's speed side by side with sb3-contrib's ``RecurrentPPO`` on CartPoleNoVel-v1.

``recurrent_ppo_vs_sb3c`` (opt-in): env steps per second of ``pgrad-train`` (the command, in its
own process, with its run directory, default logging, checkpoints and export) against a process
that builds sb3-contrib's ``RecurrentPPO`` and calls ``learn`` (:mod:`pgrad_app.perf.peers.
sb3c_recurrent_side`, run by :data:`SB3C_PYTHON`: the project's environment has no torch), on
rl-zoo's ``ppo_lstm`` entry for CartPoleNoVel-v1 on both sides: pgrad's tuned entry
(``pgrad_app/config/hyperparams/ppo.yaml``), which is that entry in pgrad's names -- 8 envs x 32
steps, 20 epochs of one minibatch of 256, an LSTM of 64 for the actor and one for the critic,
[64] ReLU after each, observations and rewards normalised, linear learning rate and clip range.

Runs alternate (pgrad, sb3c, sb3c, pgrad, ...: :func:`pgrad_app.perf.common.alternate_rounds`)
so that machine load falls on both alike; the
value is the median over rounds of pgrad's env steps/s over sb3-contrib's, each by its whole
process wall (start-up included: what a user waits for either way); ``loop_ratio`` compares the
training loops alone (pgrad's ``learn`` loop against sb3-contrib's ``learn``). The 1-minute load
average is recorded before and after every run. Without the interpreter the figure is marked
skipped.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pgrad_app.perf.common import alternate_rounds, figure, interpreter_missing, side_process
from pgrad_app.perf.peers.sb3 import ENV_STEP_RATES, env_step_details, train_run

#: The interpreter with torch, stable-baselines3 and sb3-contrib; ``PGRAD_SB3C_PYTHON``
#: overrides it.
SB3C_PYTHON = Path(os.environ.get("PGRAD_SB3C_PYTHON", "/work/venv-trl/bin/python"))
#: sb3-contrib's side, run as a file by :data:`SB3C_PYTHON`.
SB3C_SCRIPT = Path(__file__).with_name("sb3c_recurrent_side.py")
ENV = "CartPoleNoVel-v1"
#: rl-zoo's budget for the entry (``n_timesteps``); ``--steps`` shortens the figure.
STEPS = 100_000
GOAL = ">= 1 x sb3-contrib RecurrentPPO's env steps/s (pgrad-train's whole process)"


def tuned_hp() -> dict:
    """pgrad's tuned ``ppo`` entry for CartPoleNoVel-v1 without its budget (rl-zoo's settings)."""
    from pgrad_app.config import tuned

    entry = tuned.load_table("ppo")[ENV]
    return {k: v for k, v in entry.items() if k != tuned.BUDGET_KEY}


def sb3c_missing(python: Path | None = None) -> str | None:
    """The one-line reason sb3-contrib's side cannot run, or None."""
    return interpreter_missing(Path(python or SB3C_PYTHON), "sb3-contrib",
                               "torch, stable-baselines3 and sb3-contrib", "PGRAD_SB3C_PYTHON")


def sb3c_run(steps: int, seed: int, python: Path | None = None) -> dict:
    """sb3-contrib's side in a fresh process: its JSON plus the whole process's wall and CPU."""
    spec = {"env": ENV, "steps": int(steps), "seed": int(seed)}
    return side_process([str(python or SB3C_PYTHON), str(SB3C_SCRIPT), json.dumps(spec)],
                        "recurrent_ppo_vs_sb3c: the sb3-contrib run")


def pgrad_run(steps: int, seed: int) -> dict:
    """``pgrad-train`` in a fresh process on the tuned entry (:func:`pgrad_app.perf.peers.
    side_by_side.command_run`)."""
    return train_run("command", {"agent": "ppo", "env": ENV, "seed": int(seed),
                                 "max_steps": int(steps), "hp": tuned_hp()})


def recurrent_ppo_vs_sb3c(repeats: int, steps: int = STEPS, rounds: int = 1, seed: int = 0,
                          python: Path | None = None) -> dict:
    """pgrad-train's env steps/s over sb3-contrib RecurrentPPO's on CartPoleNoVel-v1, in
    ``rounds`` rounds of one run per side (the order reversed every other round)."""
    del repeats
    reason = sb3c_missing(python)
    if reason is not None:
        return figure("recurrent_ppo_vs_sb3c", float("nan"), GOAL, False, skipped=reason)
    if rounds < 1 or steps < 256:
        raise ValueError(f"recurrent_ppo_vs_sb3c: rounds must be >= 1 and steps >= 256 (one "
                         f"rollout); got rounds={rounds}, steps={steps}")
    measured = alternate_rounds({"pgrad": lambda: pgrad_run(steps, seed),
                                 "sb3c": lambda: sb3c_run(steps, seed, python)},
                                rounds, ENV_STEP_RATES)
    value = measured.median("process")
    return figure("recurrent_ppo_vs_sb3c", value, GOAL, value >= 1.0,
                  **env_step_details(measured, "sb3c"),
                  measured_at_env_steps=steps, full_length=steps >= STEPS, hp=tuned_hp(),
                  load_avg_1m=measured.load_avg_1m, runs=measured.runs,
                  note="fresh process per run, one after the other (odd rounds reversed); "
                  "value = pgrad-train's env steps per second of whole-process wall over "
                  "sb3-contrib's (a process importing it and calling learn); loop_ratio = the "
                  "training loops alone; cpu_ratio = the same by process CPU time")
