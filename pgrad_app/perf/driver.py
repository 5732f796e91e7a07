"""The table of pgrad's performance figures, each a ratio of two things measured side by side.

    python scripts/bench.py                 # every default figure, then a table
    python scripts/bench.py --only clip_ratio --repeats 50
    python scripts/bench.py --only ppo_mujoco_vs_sb3 --steps 1000000   # opt-in, long
    python scripts/bench.py --only command_overhead --steps 5000       # pgrad-train vs learn
    python scripts/bench.py --only ppo_minatar_vs_sb3                  # opt-in, PPO MinAtar, 500k
    python scripts/bench.py --only ppo_atari_rss_vs_sb3 --steps 2048   # opt-in, peak RSS (<= 8192)
    python scripts/bench.py --only grpo_vs_trl --rounds 4              # opt-in, GRPO vs TRL
    python scripts/bench.py --only recurrent_ppo_vs_sb3c --rounds 2    # opt-in, LSTM PPO vs sb3c

Prints one JSON object per figure (``name``, ``value``, ``goal``, ``met``, ``details``) as it is
measured, then a readable table. Each figure runs in a fresh process, whose peak memory (VmHWM)
is in its details (``figure_process_peak_rss_mb``; both sides of an in-process ratio share it).
Timed ratios interleave the two sides (A, B, A, B, ...) after a warm-up and report the median
of the per-round ratios, so machine load shared by both sides cancels. Gradient shapes: a 64-64
tanh MLP with a Categorical head on CartPole shapes (obs 4, 2 actions), T = 2048 steps.
Figures against Stable-Baselines3 (``pip install 'pgrad[bench]'``) run each training run in its
own process (``python -m pgrad_app.perf.peers.side_by_side``) and report each side's peak memory;
without SB3 they are marked skipped. The command line is :mod:`pgrad_app.cli.bench`; see
docs/performance.md.
"""

from __future__ import annotations

from collections.abc import Callable

from pgrad_app.perf import (
    async_scaling,
    collection,
    conv_figures,
    gradients,
    scaling,
    speed,
)
from pgrad_app.perf.common import peak_rss_mb
from pgrad_app.perf.peers import grpo_trl, recurrent, sb3

FIGURES: dict[str, Callable] = {
    "per_step_ratio": gradients.per_step_ratio,
    "fused_ratio": gradients.fused_ratio,
    "clip_ratio": gradients.clip_ratio,
    "jacobian_ratio": gradients.jacobian_ratio,
    "diagnostics_ratio": gradients.diagnostics_ratio,
    "conv_ratios": conv_figures.conv_figures,
    "rollout_ratio": collection.rollout_ratio,
    "cnn_collection_ratio": collection.cnn_collection_ratio,
    "update_overhead": speed.update_overhead,
    "a2c_speed_ratio": speed.a2c_speed_ratio,
    "native_cartpole": collection.native_cartpole,
    "collection_envpool_cartpole": collection.collection_backends,
    "collection_envpool_cartpole_64envs": collection.collection_cartpole_64,
    "collection_envpool_halfcheetah": collection.collection_cheetah,
    "a2c_cartpole": sb3.a2c_cartpole,
    "ray_scaling": scaling.ray_scaling,
    "transformer_cached_acting": grpo_trl.cached_acting,
}
#: Figures run only when named with --only (long).
OPT_IN: dict[str, Callable] = {"ppo_mujoco_vs_sb3": sb3.ppo_mujoco_vs_sb3,
                               "a2c_mujoco_vs_sb3": sb3.a2c_mujoco_vs_sb3,
                               "command_overhead": sb3.command_overhead,
                               "naive_acting_ratio": collection.naive_acting_ratio,
                               "async_scaling": async_scaling.async_scaling,
                               "ppo_minatar_vs_sb3": sb3.ppo_minatar_vs_sb3,
                               "ppo_atari_rss_vs_sb3": sb3.ppo_atari_rss_vs_sb3,
                               "grpo_vs_trl": grpo_trl.grpo_vs_trl,
                               "recurrent_ppo_vs_sb3c": recurrent.recurrent_ppo_vs_sb3c}


#: The figures run side by side with SB3 in rounds (``--rounds``: sb3.side_by_side_vs_sb3).
SB3_SIDE_BY_SIDE = ("ppo_mujoco_vs_sb3", "a2c_mujoco_vs_sb3", "ppo_minatar_vs_sb3")


def run_figure(name: str, args) -> list[dict]:
    """Runs one figure here; adds this process's peak memory to each result."""
    fn = {**FIGURES, **OPT_IN}[name]
    kwargs = {}
    if name == "a2c_cartpole":
        kwargs = {"max_steps": args.max_steps, "seeds": tuple(args.seeds)}
    elif name in (*SB3_SIDE_BY_SIDE, "command_overhead"):
        kwargs = {} if args.steps is None else {"steps": args.steps}  # else the figure's own
        if name in SB3_SIDE_BY_SIDE:
            kwargs["rounds"] = args.rounds
    elif name == "grpo_vs_trl":  # --steps: timed updates per run; --rounds > 1 overrides
        kwargs = {"rounds": args.rounds if args.rounds > 1 else grpo_trl.ROUNDS,
                  **({} if args.steps is None else {"steps": args.steps})}
    elif name == "recurrent_ppo_vs_sb3c":  # --steps: env steps per run (default rl-zoo's 100k)
        kwargs = {"rounds": args.rounds, **({} if args.steps is None else {"steps": args.steps})}
    elif name == "ppo_atari_rss_vs_sb3":  # the peak needs a few updates, not a long run
        kwargs = {"steps": 8192 if args.steps is None else min(args.steps, 8192)}
    repeats = args.repeats
    if name == "conv_ratios":  # a NatureCNN gradient at T=256 is ~100x a CartPole one
        repeats = max(3, repeats // 8)
    elif name == "transformer_cached_acting":  # a round is a batch's 6 acting calls per side
        repeats = max(3, repeats // 2)
    out = fn(repeats, **kwargs)
    out = out if isinstance(out, list) else [out]
    for r in out:
        r["details"]["figure_process_peak_rss_mb"] = round(peak_rss_mb(), 1)
    return out
