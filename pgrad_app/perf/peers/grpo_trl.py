"""GRPO's speed side by side with TRL's ``GRPOTrainer``, and acting with the KV cache.

``grpo_vs_trl`` (opt-in: TRL runs under its own interpreter, :data:`TRL_PYTHON`): completion tokens
generated and trained per second on ``pgrad/Reversal-v0`` (3-5 digits, partial credit), pgrad's
``grpo`` agent against TRL's ``GRPOTrainer`` (:mod:`pgrad_app.perf.peers.trl_grpo_side`), the same
work per update on both sides: a causal Transformer of the same size (pgrad's ``CausalTransformer``
/ a GPT-2: d_model 64, 4 heads, 2 layers, MLP 256, context 12, ~0.1M weights), ``num_envs`` = 64
completions per update in groups of ``group_size`` = 8 prompts' copies, at most 6 tokens each (the
answer and the end-of-sequence token), one pass over the batch (``num_iterations`` 1), loss
``dapo``, beta 0, Adam at 1e-3, gradient norm clipped at 1, float32 on the CPU. Each run is a fresh
process that builds its side, runs ``warmup`` updates untimed and times the next ``steps``; runs
alternate (pgrad, TRL, TRL, pgrad, ...) so that machine load falls on both alike, and the value is
the median over rounds of pgrad's tokens/s over TRL's. A token is one generated token of a
completion, its end-of-sequence token included (pgrad: the env steps of the completions, its
episodes' lengths summed; TRL: its ``completion_mask`` summed) -- pgrad's ``env_steps`` counter also
counts the steps of envs whose completion had ended while others in the batch went on (masked out of
the update), which are not counted here. Without the interpreter the figure is marked skipped.

``transformer_cached_acting``: one batch of completions acted token by token (64 Reversal
prompts, 6 acting calls each) by :class:`pgrad.rl.acting.transformer_actor.CachedTransformerActor`
(the keys and values kept between calls, one token per row per call) against
:class:`pgrad.rl.acting.compiled_actor.CompiledActor` (the whole context each call) on the same
network, interleaved; the value is the cache's speed-up.

One side of ``grpo_vs_trl`` in this process (what the figure runs in a fresh one)::

    python -m pgrad_app.perf.peers.grpo_trl '{"steps": 20}'
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

from pgrad_app.perf.common import (
    alternate_rounds,
    figure,
    interleaved,
    interpreter_missing,
    side_process,
)

#: The interpreter with torch, transformers and trl (a separate venv: the project's has no torch);
#: ``PGRAD_TRL_PYTHON`` overrides it.
TRL_PYTHON = Path(os.environ.get("PGRAD_TRL_PYTHON", "/work/venv-trl/bin/python"))
#: TRL's side, run as a file by :data:`TRL_PYTHON`.
TRL_SCRIPT = Path(__file__).with_name("trl_grpo_side.py")
#: Both sides' settings (TRL's script reads the same keys; ``ffn_dim`` = pgrad's default 4 x
#: d_model, written out for GPT-2's ``n_inner``).
SPEC = {"d_model": 64, "num_heads": 4, "num_layers": 2, "ffn_dim": 256, "group_size": 8,
        "num_envs": 64, "min_digits": 3, "max_digits": 5, "warmup": 3, "steps": 30, "seed": 0,
        "learning_rate": 1e-3, "loss_type": "dapo", "epsilon": 0.2, "max_grad_norm": 1.0,
        "threads": 0}
#: Rounds of ``grpo_vs_trl`` unless ``--rounds`` says more than 1.
ROUNDS = 4
GOAL = ">= 1 x TRL's tokens/s"


def make_agent(spec: dict):
    """pgrad's grpo agent with the spec's sizes on ``pgrad/Reversal-v0`` (shaping on)."""
    import gymnasium as gym

    import agents
    from pgrad.rl.tokens import register

    register()
    s = {**SPEC, **spec}
    env_kwargs = {"min_digits": s["min_digits"], "max_digits": s["max_digits"], "shaping": True}
    return agents.make(
        "grpo", lambda: gym.make("pgrad/Reversal-v0", **env_kwargs), seed=s["seed"],
        num_envs=s["num_envs"], group_size=s["group_size"], d_model=s["d_model"],
        num_heads=s["num_heads"], num_layers=s["num_layers"], ffn_dim=s["ffn_dim"], epochs=1,
        learning_rate=s["learning_rate"], loss_type=s["loss_type"], epsilon=s["epsilon"],
        max_grad_norm=s["max_grad_norm"])


def pgrad_side(spec: dict) -> dict:
    """pgrad's side in this process: ``warmup`` updates untimed (tracing), then ``steps`` timed.

    Returns ``{side, tokens, wall_s, cpu_s, completions, env_steps, steps, params}``: ``tokens``
    the timed completions' lengths summed, ``env_steps`` the agent's counter over them (with
    the masked steps of envs done before the batch's longest completion).
    """
    unknown = sorted(set(spec) - set(SPEC))
    if unknown:
        raise ValueError(f"grpo_trl: unknown spec keys {unknown}; known: {sorted(SPEC)}")
    s = {**SPEC, **spec}
    if s["threads"]:  # before TensorFlow runs anything
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(int(s["threads"]))
        tf.config.threading.set_inter_op_parallelism_threads(int(s["threads"]))
    agent = make_agent(s)
    for _ in range(s["warmup"]):
        agent.step()
    tokens = completions = 0
    steps0, cpu0, start = agent.env_steps, _cpu(), time.perf_counter()
    for _ in range(s["steps"]):
        episodes = agent.step()["episodes"]  # (env_step, return, length) per completion
        tokens += sum(int(e[2]) for e in episodes)
        completions += len(episodes)
    wall, cpu = time.perf_counter() - start, _cpu() - cpu0
    return {"side": "pgrad", "tokens": tokens, "completions": completions,
            "wall_s": round(wall, 4), "cpu_s": round(cpu, 4), "steps": s["steps"],
            "env_steps": int(agent.env_steps - steps0),
            "params": int(sum(np.prod(v.shape) for v in agent.net.policy_variables))}


def _cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def side_run(side: str, spec: dict, trl_python: Path | None = None) -> dict:
    """One side in a fresh process: its JSON (the last line starting with ``{"side"``) plus
    ``process_wall_s`` and ``process_cpu_s`` of the whole process."""
    if side == "pgrad":
        argv = [sys.executable, "-m", "pgrad_app.perf.peers.grpo_trl", json.dumps(spec)]
    elif side == "trl":
        argv = [str(trl_python or TRL_PYTHON), str(TRL_SCRIPT), json.dumps(spec)]
    else:
        raise ValueError(f"side_run: side must be 'pgrad' or 'trl'; got {side!r}")
    return side_process(argv, f"grpo_vs_trl: the {side} run")


def trl_missing(trl_python: Path | None = None) -> str | None:
    """The one-line reason the TRL side cannot run, or None."""
    return interpreter_missing(Path(trl_python or TRL_PYTHON), "TRL",
                               "torch, transformers and trl", "PGRAD_TRL_PYTHON")


def grpo_vs_trl(repeats: int, steps: int | None = None, rounds: int = ROUNDS,
                trl_python: Path | None = None, threads: int = 0) -> dict:
    """pgrad's tokens/s over TRL's on Reversal, in ``rounds`` rounds of one run per side (the
    order reversed every other round); the value is the median of the rounds' ratios.
    ``threads`` > 0 caps both sides' thread pools (TensorFlow's intra- and inter-op, torch's
    ``set_num_threads``); 0 leaves each framework's default (one per core)."""
    del repeats
    python = Path(trl_python or TRL_PYTHON)
    reason = trl_missing(python)
    if reason is not None:
        return figure("grpo_vs_trl", float("nan"), GOAL, False, skipped=reason)
    if rounds < 1:
        raise ValueError(f"grpo_vs_trl: rounds must be >= 1; got {rounds}")
    spec = {**SPEC, "threads": int(threads),
            **({} if steps is None else {"steps": int(steps)})}
    measured = alternate_rounds(
        {"pgrad": lambda: side_run("pgrad", spec, python),
         "trl": lambda: side_run("trl", spec, python)},
        rounds, {"wall": rate, "cpu": lambda run: run["tokens"] / run["cpu_s"]})
    value, runs = measured.median("wall"), measured.runs
    return figure("grpo_vs_trl", value, GOAL, value >= 1.0,
                  tokens_per_s={"pgrad": measured.side_median("pgrad", rate),
                                "trl": measured.side_median("trl", rate)},
                  round_ratios=[round(r, 3) for r in measured.ratios["wall"]],
                  cpu_ratio=round(measured.median("cpu"), 3),
                  params={"pgrad": runs["pgrad"][0]["params"], "trl": runs["trl"][0]["params"]},
                  spec=spec, load_avg_1m=measured.load_avg_1m, runs=runs,
                  note="fresh process per run, timed after warm-up updates; tokens = completion "
                  "tokens (end-of-sequence included); cpu_ratio = the same by process CPU time "
                  "over the timed updates")


def rate(run: dict) -> float:
    """A run's completion tokens per second of its timed updates."""
    return run["tokens"] / run["wall_s"]


def completion_contexts(spec: dict, seed: int = 0) -> list[np.ndarray]:
    """The observations ``[B, L]`` float32 of one batch acting token by token on Reversal: B =
    ``num_envs`` prompts, then each with 1, 2, ... up to ``max_digits`` digits written (the
    last acting call of a full-length completion), ``max_digits + 1`` calls."""
    from pgrad.rl.tokens.tasks import Reversal

    s = {**SPEC, **spec}
    env = Reversal(s["min_digits"], s["max_digits"], shaping=True)
    rng = np.random.default_rng(seed)
    first = [env.reset(seed=seed + i)[0] for i in range(s["num_envs"])]  # [B] of [L]
    lengths = [int(np.count_nonzero(o)) for o in first]
    digits = rng.integers(2, 12, size=(s["num_envs"], s["max_digits"]))  # digit ids
    out = []
    for t in range(s["max_digits"] + 1):
        obs = np.stack(first).astype(np.float32)
        for b, n in enumerate(lengths):
            obs[b, n:n + t] = digits[b, :t]
        out.append(obs)
    return out


def cached_acting(repeats: int, spec: dict | None = None) -> dict:
    """The KV-cached actor against the compiled actor acting one batch of completions."""
    from pgrad.rl.acting.compiled_actor import CompiledActor
    from pgrad.rl.acting.transformer_actor import CachedTransformerActor

    s = {**SPEC, **(spec or {})}
    agent = make_agent(s)
    contexts = completion_contexts(s)
    cached = CachedTransformerActor(agent.net, agent.layout)
    plain = CompiledActor(agent.net, agent.layout)
    worst = 0.0
    for obs in contexts:  # same parameters, the cache stepping after the first call
        worst = max(worst, float(np.abs(cached.forward(obs)[0] - plain.forward(obs)[0]).max()))
    stepped = bool(cached.last_stepped.all())

    def with_cache():
        cached.reset_cache()
        for obs in contexts:
            cached.forward(obs)

    def without():
        for obs in contexts:
            plain.forward(obs)

    times = interleaved({"cached": with_cache, "full": without}, max(3, repeats))
    value = float(np.median(times["full"] / times["cached"]))
    calls = len(contexts)
    return figure("transformer_cached_acting", value, "(informative: the cache's speed-up)",
                  True, batch=s["num_envs"], acting_calls=calls,
                  context_length=int(contexts[0].shape[1]),
                  cached_ms_per_call=round(float(np.median(times["cached"])) / calls * 1e3, 3),
                  full_ms_per_call=round(float(np.median(times["full"])) / calls * 1e3, 3),
                  max_abs_param_diff=worst, rows_stepped_from_cache=stepped,
                  note="one batch of completions (the first call prefills the prompts, the "
                  "others step one token per row); median over interleaved rounds")


def main(argv: list[str]) -> int:
    """``python -m pgrad_app.perf.peers.grpo_trl '<JSON spec>'``: pgrad's side, one JSON line."""
    if len(argv) != 1:
        print("usage: python -m pgrad_app.perf.peers.grpo_trl '<JSON spec>'", file=sys.stderr)
        return 2
    print(json.dumps(pgrad_side(json.loads(argv[0]))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
