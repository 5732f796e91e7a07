"""Figures side by side with Stable-Baselines3 (``pip install 'pgrad[bench]'``).

Each training run is its own process (:mod:`pgrad_app.perf.peers.side_by_side`), whose peak
memory it reports; without SB3 the SB3 figures are marked skipped.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import numpy as np

from pgrad_app.perf.common import Rounds, figure, timed_process


def sb3_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("stable_baselines3") is not None


def train_run(side: str, spec: dict) -> dict:
    """One training run in a fresh process (:mod:`pgrad_app.perf.peers.side_by_side`); its JSON,
    plus ``process_wall_s``: the whole process from the outside (interpreter start, imports, the
    run, exit), which is what a user waits for from either ``pgrad-train`` or a script calling
    SB3's ``learn``; and ``process_cpu_s``, that whole process's CPU time (its own children
    included), which machine load inflates far less than the wall."""
    out, process_wall, process_cpu = timed_process(
        [sys.executable, "-m", "pgrad_app.perf.peers.side_by_side", side, json.dumps(spec)])
    if out.returncode != 0:
        raise RuntimeError(f"{side} run {spec} failed:\n{out.stderr[-3000:]}")
    return {**json.loads(out.stdout.strip().splitlines()[-1]),
            "process_wall_s": round(process_wall, 2), "process_cpu_s": round(process_cpu, 2)}


def process_rate(run: dict) -> float:
    """Env steps per second of a run's whole process wall (start-up included)."""
    return run["env_steps"] / run["process_wall_s"]


def loop_rate(run: dict) -> float:
    """Env steps per second of a run's training loop alone (a ``command`` run's ``loop_wall_s``,
    another side's ``wall_s``)."""
    return run["env_steps"] / (run["loop_wall_s"] if run["side"] == "command" else run["wall_s"])


def cpu_rate(run: dict) -> float:
    """Env steps per second of a run's whole process CPU time."""
    return run["env_steps"] / run["process_cpu_s"]


#: The rates that compare a ``pgrad-train`` run (:func:`train_run` on the ``command`` side) with
#: another project's run in a fresh process, as :func:`pgrad_app.perf.common.alternate_rounds`
#: takes them.
ENV_STEP_RATES: dict[str, Callable[[dict], float]] = {
    "process": process_rate, "loop": loop_rate, "cpu": cpu_rate}


def env_step_details(measured: Rounds, theirs: str) -> dict:
    """What a figure of ``pgrad-train`` (side ``"pgrad"``) beside another project's side
    ``theirs`` reports of rounds measured with :data:`ENV_STEP_RATES`: each side's median env
    steps/s by whole-process wall and by training loop, the per-round whole-process ratios, and
    the median loop and CPU ratios."""
    return {
        "env_steps_per_s": {"pgrad_train": measured.side_median("pgrad", process_rate),
                            theirs: measured.side_median(theirs, process_rate)},
        "loop_env_steps_per_s": {"pgrad": measured.side_median("pgrad", loop_rate),
                                 theirs: measured.side_median(theirs, loop_rate)},
        "round_ratios": [round(r, 3) for r in measured.ratios["process"]],
        "loop_ratio": round(measured.median("loop"), 3),
        "cpu_ratio": round(measured.median("cpu"), 3)}


def a2c_cartpole(repeats: int, seeds=(0, 1, 2), max_steps: int = 300_000) -> list[dict]:
    """A2C to a last-20 mean of 475 on CartPole-v1: ``pgrad-train`` (the command, with its run
    directory), Stable-Baselines3 and the bare ``agent.learn`` side by side.

    One fresh process per run; per seed command, SB3, bare (next seed reversed), each side with
    its own defaults (pgrad's A2C: 16 envs, lr 1.4e-3; SB3: rl-zoo's CartPole A2C, 8 envs).
    ``a2c_cartpole_vs_sb3`` compares what users wait for: the command's whole process (start-up,
    training to the target, checkpoint, export, plot) against a process that imports SB3 and
    calls ``learn`` (goal <= 0.5x); ``bare_ratio`` is the bare loop's in-process wall
    over SB3's (the earlier figure, goal <= 0.33x).
    """
    del repeats
    runs: dict[str, list[dict]] = {"command": [], "sb3": [], "pgrad": []}
    sides = ["command", "sb3", "pgrad"] if sb3_available() else ["command", "pgrad"]
    for i, seed in enumerate(seeds):
        for side in sides if i % 2 == 0 else sides[::-1]:
            spec = {"agent": "a2c", "env": "CartPole-v1", "seed": seed,
                    "max_steps": max_steps, "target": 475}
            runs[side].append(train_run(side, spec))

    def med(side, key):
        return float(np.median([r[key] for r in runs[side]]))

    ours = runs["pgrad"]
    solved = all(r["solved"] for r in ours) and all(r["solved"] for r in runs["command"])
    wall = med("pgrad", "wall_s")
    rss = max(r["peak_rss_mb"] for r in ours)
    out = [figure("a2c_cartpole_wall_s", wall, "(reported; the goal is the SB3 ratio)", solved,
                  median_env_steps=med("pgrad", "env_steps"),
                  command_median_process_wall_s=med("command", "process_wall_s"),
                  runs=ours, command_runs=runs["command"],
                  note="median over seeds; wall from agent construction to solved, fresh "
                  "process per run; cpu_s = process CPU time over all threads")]
    goal = "<= 0.5 x SB3's solve wall, through the command"
    if "sb3" in sides:
        theirs = runs["sb3"]
        value = med("command", "process_wall_s") / med("sb3", "process_wall_s")
        bare = wall / med("sb3", "wall_s")
        out.append(figure(
            "a2c_cartpole_vs_sb3", value, goal, solved and value <= 0.5,
            command_median_process_wall_s=med("command", "process_wall_s"),
            sb3_median_process_wall_s=med("sb3", "process_wall_s"),
            bare_ratio=round(bare, 3), bare_goal="<= 0.33", bare_met=bool(bare <= 0.33),
            pgrad_median_wall_s=wall, sb3_median_wall_s=med("sb3", "wall_s"),
            cpu_ratio=round(med("command", "process_cpu_s") / med("sb3", "process_cpu_s"), 3),
            bare_cpu_ratio=round(med("pgrad", "cpu_s") / med("sb3", "cpu_s"), 3),
            command_median_env_steps=med("command", "env_steps"),
            pgrad_median_env_steps=med("pgrad", "env_steps"),
            sb3_median_env_steps=med("sb3", "env_steps"),
            sb3_all_solved=all(r["solved"] for r in theirs), sb3_runs=theirs,
            peak_rss_mb={"pgrad": rss, "sb3": max(r["peak_rss_mb"] for r in theirs)}))
    else:
        out.append(figure("a2c_cartpole_vs_sb3", float("nan"), goal, False,
                          skipped="stable-baselines3 is not installed (pip install "
                          "'pgrad[bench]')"))
    out.append(figure("a2c_cartpole_peak_rss_mb", rss, "(reported, no goal)", True,
                      sb3_peak_rss_mb=(max(r["peak_rss_mb"] for r in runs["sb3"])
                                       if runs["sb3"] else None),
                      note="max over the per-seed run processes (VmHWM of each)"))
    return out


#: The order of the three runs of a side-by-side round; odd rounds run it reversed, so that a
#: machine whose speed drifts over the minutes of a round favours neither side across rounds.
ROUND_ORDER = ("command", "sb3", "pgrad")


def side_by_side_vs_sb3(name: str, goal: str, spec: dict, steps: int, full: int,
                        rounds: int = 1) -> dict:
    """Training runs side by side, each in its own process, same env steps and seed:
    ``pgrad-train`` (the command, run directory and default logging), SB3, and the bare
    ``agent.learn``; ``rounds`` times, every other round in reverse order (bare, SB3, command).

    Value: the command's whole process wall over SB3's (a process importing SB3 and calling
    ``learn``), per env step, the median over the rounds (each round's in ``rounds``);
    ``bare_ratio``: the bare loop's in-process wall over SB3's (the earlier figure). ``full``
    is the length the goal is stated for; shorter runs give the ratio at their length, labelled
    so.
    """
    if not sb3_available():
        return figure(name, float("nan"), goal, False,
                      skipped="stable-baselines3 is not installed (pip install 'pgrad[bench]')")
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1; got {rounds}")
    spec = {**spec, "max_steps": steps}
    measured, all_runs = [], []
    for k in range(rounds):
        order = ROUND_ORDER if k % 2 == 0 else ROUND_ORDER[::-1]
        runs = {side: train_run(side, spec) for side in order}
        measured.append(round_ratios(runs["command"], runs["sb3"], runs["pgrad"]))
        all_runs.extend(runs[side] for side in order)

    def med(key: str) -> float:
        return float(np.median([m[key] for m in measured]))

    value, bare = med("value"), med("bare_ratio")
    first = measured[0]
    return figure(name, value, goal, value <= 0.5,
                  measured_at_env_steps=steps, full_length=steps >= full,
                  command_outside_loop_s=first["command_outside_loop_s"],
                  command_outside_loop_share=first["command_outside_loop_share"],
                  sb3_outside_learn_s=first["sb3_outside_learn_s"],
                  loop_ratio=round(med("loop_ratio"), 3),
                  bare_ratio=round(bare, 3), bare_met=bool(bare <= 0.5),
                  env_steps_per_s=first["env_steps_per_s"],
                  cpu_ratio=round(med("cpu_ratio"), 3),
                  bare_cpu_ratio=round(med("bare_cpu_ratio"), 3),
                  rounds=[{k: v for k, v in m.items() if k != "peak_rss_mb"} for m in measured],
                  runs=all_runs, peak_rss_mb=first["peak_rss_mb"],
                  note=f"{rounds} round(s) of three runs one after the other (command, SB3, "
                  "bare; odd rounds reversed); value = the median over rounds of whole-process "
                  "walls; the last-20 training return is in each run")


def round_ratios(command: dict, theirs: dict, ours: dict) -> dict:
    """One side-by-side round's ratios from its three runs (:func:`train_run` results)."""

    def per_step(run: dict, key: str) -> float:
        return run[key] / run["env_steps"]

    # The command's seconds outside its training loop (interpreter and imports, settings, run
    # directory, final checkpoint, export, plot): a fixed cost, reported apart so that a run
    # too short for the figure's length shows it; SB3's outside its learn() likewise.
    fixed = command["process_wall_s"] - command["loop_wall_s"]
    return {
        "value": round(per_step(command, "process_wall_s")
                       / per_step(theirs, "process_wall_s"), 3),
        "bare_ratio": round(per_step(ours, "wall_s") / per_step(theirs, "wall_s"), 3),
        "loop_ratio": round(per_step(command, "loop_wall_s") / per_step(theirs, "wall_s"), 3),
        "cpu_ratio": round(per_step(command, "process_cpu_s")
                           / per_step(theirs, "process_cpu_s"), 3),
        "bare_cpu_ratio": round(per_step(ours, "cpu_s") / per_step(theirs, "cpu_s"), 3),
        "command_outside_loop_s": round(fixed, 2),
        "command_outside_loop_share": round(fixed / command["process_wall_s"], 3),
        "sb3_outside_learn_s": round(theirs["process_wall_s"] - theirs["wall_s"], 2),
        "env_steps_per_s": {r["side"]: round(r["env_steps"] / r["wall_s"], 1)
                            for r in (command, theirs, ours)},
        "peak_rss_mb": {r["side"]: r["peak_rss_mb"] for r in (command, theirs, ours)},
    }


def ppo_mujoco_vs_sb3(repeats: int, steps: int = 50_000, seed: int = 0,
                      rounds: int = 1) -> dict:
    """PPO on HalfCheetah-v5, pgrad then Stable-Baselines3, same settings and env steps (opt-in).

    Both with SB3's PPO defaults (1 env, 2048 steps x 10 epochs x minibatch 64, Adam 3e-4,
    64-64 tanh actor and critic). The goal is stated for 1M steps (``--steps 1000000``).
    """
    del repeats
    return side_by_side_vs_sb3(
        "ppo_mujoco_vs_sb3", "<= 0.5 x SB3's wall through the command (1M steps)",
        {"agent": "ppo", "env": "HalfCheetah-v5", "seed": seed}, steps, 1_000_000, rounds)


def a2c_mujoco_vs_sb3(repeats: int, steps: int = 50_000, seed: int = 21,
                      rounds: int = 1) -> dict:
    """A2C on HalfCheetah-v5 with rl-zoo's MuJoCo A2C setting, pgrad then SB3 (opt-in).

    SB3's A2C defaults plus rl-zoo's ``normalize: true``: 1 env, 5-step updates (one update
    per 5 env steps: the per-update fixed cost decides the wall), RMSprop 7e-4, observations
    and rewards normalised; pgrad with the same settings. The goal is stated for 300k steps
    (``--steps 300000``), seed 21.
    """
    del repeats
    hp = {"num_envs": 1, "n_steps": 5, "normalize_obs": True, "normalize_reward": True}
    return side_by_side_vs_sb3(
        "a2c_mujoco_vs_sb3", "<= 0.5 x SB3's wall through the command (300k steps)",
        {"agent": "a2c", "env": "HalfCheetah-v5", "seed": seed, "hp": hp}, steps, 300_000,
        rounds)


def command_overhead(repeats: int, steps: int = 50_000, seed: int = 22) -> dict:
    """``pgrad-train`` (run directory, default logging, checkpoints, export) against the bare
    ``agent.learn`` on the same settings, one after the other (the bare loop first): A2C on
    HalfCheetah-v5, rl-zoo's MuJoCo A2C setting (1 env x 5 steps, observations and rewards
    normalised), where each update is small and any per-update logging cost shows.

    The value is the command's whole process over a whole process that imports pgrad and calls
    ``agent.learn`` (what a user waits for either way: start-up included), by wall;
    ``cpu_ratio`` is the same by CPU time, which the machine's load inflates far less than the
    wall of two runs made one after the other; ``loop_ratio`` compares the training loops alone
    (the command's end adds a fixed export and plot). Goal: within 1.15x of the bare loop.
    """
    del repeats
    hp = {"num_envs": 1, "n_steps": 5, "normalize_obs": True, "normalize_reward": True}
    spec = {"agent": "a2c", "env": "HalfCheetah-v5", "seed": seed, "hp": hp, "max_steps": steps}
    bare, command = train_run("pgrad", spec), train_run("command", spec)
    value = command["process_wall_s"] / bare["process_wall_s"]
    loop = (command["loop_wall_s"] / command["env_steps"]) / (
        bare["loop_wall_s"] / bare["env_steps"])
    return figure("command_overhead", value, "<= 1.15 x the bare agent.learn", value <= 1.15,
                  loop_ratio=round(loop, 3), measured_at_env_steps=steps,
                  cpu_ratio=round(command["process_cpu_s"] / bare["process_cpu_s"], 3),
                  cpu_met=bool(command["process_cpu_s"] / bare["process_cpu_s"] <= 1.15),
                  updates_csv_rows=command["updates_csv_rows"],
                  tensorboard_bytes=command["tensorboard_bytes"], runs=[bare, command],
                  note="one after the other (agent.learn first), whole processes; the "
                  "command's includes its run directory, final checkpoint, export and learning "
                  "curve")


def minatar_settings(agent: str = "ppo") -> tuple[dict, dict]:
    """``(pgrad hp, SB3 settings)`` from pgrad's tuned ``minatar`` family entry: the same
    envs, rollout, epochs, minibatch and coefficients on both sides (SB3's names), and SB3 given
    pgrad's ``minatar_cnn`` as its features extractor (the heads one linear layer each)."""
    from agents.catalog.sb3_names import RENAMED
    from pgrad_app.config import tuned

    hp = {k: v for k, v in tuned.load_table(agent)["minatar"].items() if k != tuned.BUDGET_KEY}
    to_sb3 = {v: k for k, v in RENAMED.items()}
    sb3_hp = {to_sb3.get(k, k): v for k, v in hp.items()}
    n_envs = sb3_hp.pop("n_envs")
    sb3_hp["learning_rate"] = float(str(sb3_hp["learning_rate"]).removeprefix("lin_"))  # speed only
    return hp, {"n_envs": n_envs, "hp": sb3_hp, "network": "minatar_cnn"}


#: ``ppo_minatar_vs_sb3``'s default length: MinAtar runs are 5M steps, where the command's fixed
#: ~7 s of start-up and export are nothing; at 500k they are under a tenth of its wall (at 57k,
#: seven updates, they were half), and a side takes ~2 min on a quiet machine.
MINATAR_STEPS = 500_000


def ppo_minatar_vs_sb3(repeats: int, steps: int = MINATAR_STEPS, seed: int = 0,
                       env: str = "MinAtar/Breakout-v1", rounds: int = 1) -> dict:
    """PPO on MinAtar Breakout, ``pgrad-train`` then SB3 then the bare ``agent.learn`` (opt-in).

    pgrad's tuned ``minatar`` entry on both sides (64 envs x 128 steps, 4 epochs of minibatches
    of 1024, Adam 2.5e-3 (decayed linearly in pgrad, constant in SB3: the cost is the same),
    clip 0.2 on policy and value, ent 0.01, vf 0.5, grad norm 0.5) and the same network (the
    MinAtar paper's conv 16 3x3 + 128 units, shared by actor and critic; SB3 gets it as a
    features extractor, :mod:`pgrad_app.perf.peers.sb3_networks`). Goal: >= 2x SB3's env
    steps/s, i.e. the command's wall per env step <= 0.5 x SB3's, stated at
    :data:`MINATAR_STEPS` (``--steps`` changes the length; ``full_length`` says whether the run
    had it; ``command_outside_loop_s`` is the command's fixed cost).
    """
    del repeats
    hp, sb3_settings = minatar_settings("ppo")
    return side_by_side_vs_sb3(
        "ppo_minatar_vs_sb3", "<= 0.5 x SB3's wall per env step (>= 2x its env steps/s)",
        {"agent": "ppo", "env": env, "seed": seed, "hp": hp, "sb3_settings": sb3_settings},
        steps, MINATAR_STEPS, rounds)


def ppo_atari_rss_vs_sb3(repeats: int, steps: int = 4096, seed: int = 0,
                         env: str = "ALE/Breakout-v5") -> dict:
    """Peak memory of a PPO Atari run: ``pgrad-train``, SB3 and the bare ``agent.learn``, each in
    its own process, on the same settings (opt-in; goal: within 1.5x of SB3's).

    rl-zoo's Atari PPO on both sides (pgrad's ``atari`` entry): 8 envs x 128 steps, 4 epochs of
    minibatches of 256, clip 0.1, vf 0.5, ent 0.01, the NatureCNN shared by actor and critic,
    the standard preprocessing (SB3: ``make_atari_env`` + ``VecFrameStack(4)``); the learning
    rate constant at 2.5e-4 (rl-zoo's is linear from there: no difference to memory). The value
    is the command's peak RSS over SB3's; ``bare`` beside it. A short budget measures the peak:
    the rollout and update buffers are the same size at every update.
    """
    del repeats
    hp = {"num_envs": 8, "n_steps": 128, "epochs": 4, "minibatch_size": 256,
          "learning_rate": 2.5e-4, "clip_range": 0.1, "vf_coef": 0.5, "ent_coef": 0.01}
    to_sb3 = {"epochs": "n_epochs", "minibatch_size": "batch_size"}
    sb3_hp = {to_sb3.get(k, k): v for k, v in hp.items() if k != "num_envs"}
    name, goal = "ppo_atari_rss_vs_sb3", "<= 1.5 x SB3's peak RSS"
    if not sb3_available():
        return figure(name, float("nan"), goal, False,
                      skipped="stable-baselines3 is not installed (pip install 'pgrad[bench]')")
    spec = {"agent": "ppo", "env": env, "seed": seed, "hp": hp, "max_steps": steps,
            "sb3_settings": {"n_envs": 8, "hp": sb3_hp, "atari": True}}
    runs = [train_run(side, spec) for side in ("command", "sb3", "pgrad")]
    rss = {r["side"]: r["peak_rss_mb"] for r in runs}
    value = rss["command"] / rss["sb3"]
    return figure(name, value, goal, value <= 1.5, peak_rss_mb=rss,
                  bare_ratio=round(rss["pgrad"] / rss["sb3"], 3),
                  env_steps={r["side"]: r["env_steps"] for r in runs},
                  env_steps_per_s={r["side"]: round(r["env_steps"] / r["wall_s"], 1)
                                   for r in runs}, runs=runs,
                  note="one process per side (command, SB3, bare), one after the other; "
                  "VmHWM of each (the command's from its ru_maxrss)")
