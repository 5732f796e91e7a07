"""One training run in this process, for the side-by-side figures of scripts/bench.py.

    python -m pgrad_app.perf.peers.side_by_side pgrad '{"agent": "a2c", "env": "CartPole-v1",
                                                   "seed": 0, "max_steps": 300000, "target": 475}'
    python -m pgrad_app.perf.peers.side_by_side sb3   '{"agent": "a2c", "env": "CartPole-v1",
                                                   "seed": 0, "max_steps": 300000, "target": 475}'
    python -m pgrad_app.perf.peers.side_by_side command '{"agent": "a2c", "env": "HalfCheetah-v5",
                                                     "seed": 22, "max_steps": 5000}'

Trains until the mean return of the last 20 training episodes reaches ``target`` (if given) or
``max_steps`` env steps (pgrad: ``agent.learn``, the loop every run uses), and prints one
JSON line: env steps, wall and CPU seconds from building the agent (env included; imports and
the env id's registration before, on both sides) to the end,
whether the target was reached, the last-20 mean return,
and the process's peak resident memory (VmHWM, which exec resets: this process alone; the
``command`` side reports the ``pgrad-train`` process's, from its ``ru_maxrss``).

``command`` runs ``pgrad-train`` itself into a temporary run directory (default logging,
checkpoints, export, plot) on ``max_steps`` (with ``--stop-at-return target`` if given), with
``hp`` as ``--set`` and no tuned entry; its ``solved`` and last-20 return come from the run's
``episodes.csv``.

Each side runs with its own defaults for the agent plus overrides (``hp``: pgrad's config fields;
``sb3_hp``: SB3's constructor arguments, over SB3_SETTINGS or over the spec's own ``sb3_settings``:
``{"n_envs", "hp", "network", "atari"}``, ``network`` naming one of pgrad's encoders as an SB3
features extractor, :mod:`pgrad_app.perf.peers.sb3_networks`, ``atari`` SB3's Atari envs and
``CnnPolicy``); the Stable-Baselines3 side never imports TensorFlow (it is blocked before
``stable_baselines3`` is imported, whose TensorBoard hook would load it otherwise) and runs PyTorch
with one thread (``torch_threads``, default 1: with PyTorch's default of one thread per core, on
this shared 2-core machine its OpenMP threads spin against each other and A2C CartPole ran ~30x
slower, 220 vs 6600 env steps/s, measured side by side).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

#: Stable-Baselines3 settings per (agent, env): rl-zoo's where it has them, else SB3's defaults.
SB3_SETTINGS = {
    ("a2c", "CartPole-v1"): {"n_envs": 8, "hp": {"ent_coef": 0.0}},  # rl-zoo a2c.yml
    ("ppo", "HalfCheetah-v5"): {"n_envs": 1, "hp": {}},  # SB3's PPO defaults (2048 x 10 x 64)
    # rl-zoo a2c.yml, MuJoCo: SB3's A2C defaults (1 env, 5 steps) + VecNormalize (obs, reward)
    ("a2c", "HalfCheetah-v5"): {"n_envs": 1, "hp": {}, "normalize": True},
}


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def last20(returns: list[float]) -> float | None:
    return float(sum(returns[-20:]) / len(returns[-20:])) if returns else None


def pgrad_run(spec: dict) -> dict:
    from pgrad_app.quiet import silence

    silence()  # this process's own TensorFlow, before agents imports it
    import agents
    from agents.callbacks import StopAtReturn
    from pgrad.rl.envs.ids import ensure_registered

    # Imports and the env's registration before the clock, as on SB3's side (which imports
    # SB3 and torch, and registers MinAtar, before its clock): the agent's module pulls in
    # TensorFlow Probability (~1.5-3.5 s here) and MinAtar's ids import seaborn and scipy
    # (~1.5-3 s); both are process start-up, which the command's whole-process wall counts.
    agents.get(spec["agent"])
    ensure_registered(spec["env"])
    target = spec.get("target")
    start, cpu_start = time.perf_counter(), time.process_time()
    agent = agents.make(spec["agent"], spec["env"], seed=spec["seed"], **spec.get("hp", {}))
    returns: list[float] = []
    callbacks = [lambda loop: returns.extend(r for _, r, _ in loop.new_episodes)]
    if target is not None:
        callbacks.append(StopAtReturn(target))
    agent.learn(spec["max_steps"], callbacks=callbacks, progress=False)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    steps, loop_wall = agent.env_steps, agent.learn_stats.wall_s
    parameters = sum(int(v.shape.num_elements()) for v in agent.net.variables)
    agent.close()
    solved = target is not None and len(returns) >= 20 and last20(returns) >= target
    return {"side": "pgrad", "solved": solved,
            "env_steps": int(steps), "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "loop_wall_s": round(float(loop_wall), 2), "last20_return": last20(returns),
            "episodes": len(returns), "parameters": parameters,
            "peak_rss_mb": peak_rss_mb()}


def command_run(spec: dict) -> dict:
    """``pgrad-train`` (``python -m pgrad_app train``, as the installed command runs it, in its
    own process) into a fresh run directory with its default logging, on the same settings as
    :func:`pgrad_run` (``hp`` as ``--set``, no tuned entry); the wall from start to the summary
    (start-up, export and plot included), its CPU, and the training loop's own wall
    (``loop_wall_s``, in the last checkpoint's meta)."""
    import resource
    import sys
    import tempfile
    from pathlib import Path

    out = Path(tempfile.mkdtemp(prefix="pgrad-bench-")) / "run"
    argv = ["--agent", spec["agent"], "--env", spec["env"], "--seed", str(spec["seed"]),
            "--total-steps", str(spec["max_steps"]), "--out", str(out), "--quiet",
            "--no-tuned", *[a for k, v in spec.get("hp", {}).items()
                            for a in ("--set", f"{k}={json.dumps(v)}")],
            *spec.get("argv", [])]
    target = spec.get("target")
    if target is not None:
        argv += ["--stop-at-return", str(target)]
    from pgrad_app.perf.common import timed_process

    done, wall, cpu = timed_process([sys.executable, "-m", "pgrad_app", "train", *argv])
    if done.returncode != 0:
        raise RuntimeError(f"pgrad-train failed ({done.returncode}): {done.stderr[-2000:]}")
    latest = sorted((out / "checkpoints").glob("step-*"))[-1]
    meta = json.loads((latest / "meta.json").read_text())
    rows = sum(1 for _ in open(out / "updates.csv")) - 1
    tb = sum(p.stat().st_size for p in (out / "tb").glob("events.*"))
    import csv

    with open(out / "episodes.csv", newline="") as f:
        returns = [float(row["return"]) for row in csv.DictReader(f)]
    solved = target is not None and len(returns) >= 20 and last20(returns) >= target
    return {"side": "command", "solved": bool(solved), "last20_return": last20(returns),
            "episodes": len(returns),
            "env_steps": int(meta["env_steps"]), "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2), "loop_wall_s": round(float(meta["wall_s"]), 2),
            "updates": int(meta["updates"]), "updates_csv_rows": rows, "tensorboard_bytes": tb,
            # The command's own process (this one only waits for it): the largest waited-for
            # child's peak, and this process has no other child.
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                                   1)}


def sb3_run(spec: dict) -> dict:
    sys.modules["tensorflow"] = None  # SB3's TensorBoard hook would import it: not SB3's cost
    import torch

    torch.set_num_threads(int(spec.get("torch_threads", 1)))
    import stable_baselines3 as sb3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    # The spec's own settings (the MinAtar figure builds them from pgrad's tuned entry), else the
    # table's, else SB3's defaults on one env.
    settings: dict[str, Any] = spec.get("sb3_settings") or SB3_SETTINGS.get(
        (spec["agent"], spec["env"]), {"n_envs": 1, "hp": {}})
    if spec["env"].startswith("MinAtar/"):  # MinAtar registers its ids on demand (as pgrad does)
        import gymnasium as gym
        import minatar.gym

        if spec["env"] not in gym.registry:
            minatar.gym.register_envs()
    target = spec.get("target")
    returns: list[float] = []

    class Stop(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    returns.append(float(info["episode"]["r"]))
            return not (target is not None and len(returns) >= 20 and last20(returns) >= target)

    start, cpu_start = time.perf_counter(), time.process_time()
    policy = "MlpPolicy"
    if settings.get("atari"):  # SB3's own Atari pipeline (rl-zoo's): AtariWrapper, 4 frames
        envs, policy = _sb3_atari(spec["env"], settings["n_envs"], spec["seed"]), "CnnPolicy"
    else:
        envs = make_vec_env(spec["env"], n_envs=settings["n_envs"], seed=spec["seed"])
    if settings.get("normalize"):
        from stable_baselines3.common.vec_env import VecNormalize

        envs = VecNormalize(envs)
    algo = {"a2c": sb3.A2C, "ppo": sb3.PPO}[spec["agent"]]
    policy_kwargs = {}
    if settings.get("network"):  # one of pgrad's encoders as an SB3 features extractor
        from pgrad_app.perf.peers.sb3_networks import POLICY_KWARGS

        policy_kwargs = {"policy_kwargs": POLICY_KWARGS[settings["network"]]()}
    model = algo(policy, envs, seed=spec["seed"], device="cpu", **policy_kwargs,
                 **{**settings["hp"], **spec.get("sb3_hp", {})})
    model.learn(spec["max_steps"], callback=Stop())
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    solved = target is not None and len(returns) >= 20 and last20(returns) >= target
    envs.close()
    return {"side": "sb3", "solved": bool(solved), "env_steps": int(model.num_timesteps),
            "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "last20_return": last20(returns),
            "episodes": len(returns), "peak_rss_mb": peak_rss_mb(),
            "parameters": sum(p.numel() for p in model.policy.parameters()),
            "versions": {"stable_baselines3": sb3.__version__, "torch": torch.__version__},
            "torch_threads": torch.get_num_threads(), "n_envs": settings["n_envs"],
            "vec_normalize": bool(settings.get("normalize")), "network": settings.get("network"),
            "tensorflow_loaded": tensorflow_loaded()}


def _sb3_atari(env_id: str, n_envs: int, seed: int):
    """SB3's Atari envs as rl-zoo makes them: ``make_atari_env`` (Monitor, then ``AtariWrapper``:
    no-op reset, frame skip 4 with max-pooling, episodic life, fire reset, 84x84 grayscale,
    clipped rewards) and ``VecFrameStack(4)``; an ``ALE/...-v5`` id with ``frameskip=1`` (the
    wrapper skips the frames, as pgrad's ``make_atari`` does on the same id)."""
    import ale_py
    import gymnasium as gym
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    env_kwargs = {"frameskip": 1} if env_id.startswith("ALE/") else {}
    return VecFrameStack(make_atari_env(env_id, n_envs=n_envs, seed=seed, env_kwargs=env_kwargs),
                         4)


def tensorflow_loaded() -> bool:
    """Whether any TensorFlow module got loaded here (``tensorflow`` itself is blocked by a
    ``None`` entry, so a module under it or a TensorFlow package beside it is what would show).

    The ``tensorboard`` package alone is not counted: SB3's logger imports it through
    ``torch.utils.tensorboard`` whenever it is installed (without TensorFlow, on tensorboard's
    own ``tensorflow_stub``), as it would for any SB3 user who has it."""
    return any(mod is not None and (name.split(".")[0] in ("tensorflow", "tensorflow_probability",
                                                            "tf_keras"))
               for name, mod in list(sys.modules.items()))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    runs = {"pgrad": pgrad_run, "command": command_run, "sb3": sb3_run}
    if len(argv) != 2 or argv[0] not in runs:
        print(__doc__, file=sys.stderr)
        return 2
    spec = json.loads(argv[1])
    print(json.dumps(runs[argv[0]](spec)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
