"""Evaluate a trained run: N episodes with its policy, mean ± std of return and length.

``pgrad.evaluate("runs/a2c-cartpole", episodes=20, deterministic=True)`` is what
``scripts/evaluate.py`` runs. The policy comes from the run's exported ``policy/`` SavedModel
(deterministic actions, the normaliser inside; plain ``tf.saved_model.load``) or, for sampled
actions or a run without an export, from its newest good checkpoint restored into a fresh agent.
Loading a run reads data only (YAML with the safe loader, TensorFlow checkpoints, a SavedModel
graph); no code from the run directory is imported or unpickled.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pgrad.errors import UserError, one_line
from pgrad.spaces import batch_of_one


def _run_settings(run_dir: Path) -> dict[str, Any]:
    from pgrad.config import load_yaml

    if not run_dir.is_dir():
        raise UserError(f"{run_dir} is not a directory; expected a run directory from train.py.")
    if not (run_dir / "config.yaml").is_file():
        raise UserError(f"{run_dir} holds no run (no config.yaml); expected a directory written "
                        "by scripts/train.py --out.")
    return load_yaml(run_dir / "config.yaml")


def _saved_model_policy(path: Path, space) -> Callable[[Any], np.ndarray]:
    """``fn(one observation) -> one env action`` from the exported SavedModel."""
    import gymnasium as gym
    import tensorflow as tf

    from pgrad import spaces

    action = tf.saved_model.load(str(path)).signatures["action"]
    if isinstance(space, gym.spaces.Box):
        prep = lambda o: np.asarray(o, space.dtype)[None]
    elif isinstance(space, gym.spaces.Discrete):
        prep = lambda o: np.asarray([o], np.int64)
    else:
        flat = spaces.make_preprocessor(space)
        prep = lambda o: np.asarray(flat(batch_of_one(o)), np.float32)

    def policy(obs):
        out = action(observation=tf.constant(prep(obs)))
        return next(iter(out.values())).numpy()[0]

    return policy


def _checkpoint_policy(run_dir: Path, values: dict, env_id: str,
                       deterministic: bool) -> tuple[Callable[[Any], np.ndarray], Any]:
    """``fn(one observation) -> one env action`` from the newest good checkpoint."""
    import agents
    from pgrad.checkpoint import CheckpointStore
    from pgrad.config import build, split_keys

    agent_cls = agents.get(str(values.get("agent")))
    _, hyper = split_keys(values, agent_cls.Config, str(run_dir / "config.yaml"))
    cfg = build(agent_cls.Config, dict(hyper, num_envs=1), {})
    agent = agent_cls(cfg, env_id=env_id, seed=int(values.get("seed", 0)))
    # The networks and normaliser statistics are all acting needs (the transform state and
    # optimizer of a run with a user transform need not match a default agent's).
    wanted = {k: v for k, v in agent.trackables().items()
              if k not in ("optimizer", "transform_state")}
    found = CheckpointStore(run_dir / "checkpoints").restore(wanted, partial=True)
    if found is None:
        agent.close()
        raise UserError(f"{run_dir} has neither an exported policy/ nor a checkpoint yet.")

    def policy(obs):
        return agent.act(batch_of_one(obs), deterministic=deterministic)[0]

    return policy, agent


def _check_same_spaces(env, trained_id: str, env_id: str) -> None:
    """Refuses an evaluation env whose spaces differ from the training env's."""
    import gymnasium as gym

    def short(space) -> str:
        if isinstance(space, gym.spaces.Box):
            return f"Box{space.shape} {space.dtype}"
        return str(space)

    trained = gym.make(trained_id)
    try:
        for what in ("observation_space", "action_space"):
            ours, theirs = getattr(env, what), getattr(trained, what)
            # Bounds may differ (the policy still runs); kind, shape and sizes may not.
            if short(ours) != short(theirs):
                env.close()
                raise UserError(
                    f"--env {env_id}: its {what.replace('_', ' ')} {short(ours)} differs from "
                    f"{short(theirs)} of {trained_id}, which the policy was trained on."
                )
    finally:
        trained.close()


def _evaluate_attacked(run_dir: Path, values: dict, episodes: int, deterministic: bool,
                       seed: int | None, env_id: str | None, write: bool, source: str,
                       attack: str, epsilons: Any, pgd_steps: int, video_dir) -> dict[str, Any]:
    """``evaluate(..., attack=...)``: the checkpointed policy under attacks, one row per epsilon."""
    from pgrad import robustness
    from pgrad.config import resolve_env

    if video_dir is not None:
        raise UserError("--video cannot be combined with --attack.")
    if source == "policy":
        raise UserError("--attack needs the checkpoint (the exported policy has no gradients).")
    if attack not in robustness.ATTACKS:
        raise UserError(f"--attack must be one of {', '.join(robustness.ATTACKS)}; "
                        f"got {attack!r}.")
    eps = robustness.parse_epsilons("0,0.01,0.05,0.1" if epsilons is None else epsilons)
    env_spec = env_id or str(values.get("env", ""))
    bare_id = resolve_env(env_spec, forbid_dir=None if env_id else run_dir)
    trained_on = str(values.get("env", ""))
    if env_id and env_id != trained_on:
        import gymnasium as gym

        probe = gym.make(bare_id)
        _check_same_spaces(probe, resolve_env(trained_on, forbid_dir=run_dir), bare_id)
        probe.close()
    seed = int(values.get("seed", 0)) + 1000 if seed is None else int(seed)
    _, agent = _checkpoint_policy(run_dir, values, bare_id, deterministic)
    try:
        rob = robustness.robustness(agent, bare_id, attack, eps, episodes, seed, deterministic,
                                    pgd_steps)
    finally:
        agent.close()
    clean = rob["rows"][0]  # epsilon 0 sorts first
    result = {
        "run": str(run_dir), "env": env_spec, "episodes": episodes,
        "deterministic": bool(deterministic), "seed": seed, "source": "checkpoint",
        "return_mean": clean["return_mean"], "return_std": clean["return_std"],
        "length_mean": clean["length_mean"], "length_std": float(np.std(clean["lengths"])),
        "returns": clean["returns"], "lengths": clean["lengths"], "video_dir": None,
        "attack": rob,
    }
    if write:
        tmp = run_dir / "eval.json.tmp"
        tmp.write_text(json.dumps(result, indent=1) + "\n")
        os.replace(tmp, run_dir / "eval.json")
        robustness.plot_robustness(
            rob, run_dir / "robustness.png",
            title=f"{values.get('agent')} on {env_spec}, seed {values.get('seed', 0)}")
    return result


def evaluate(
    run_dir: str | os.PathLike,
    episodes: int = 10,
    deterministic: bool = False,
    seed: int | None = None,
    video_dir: str | os.PathLike | None = None,
    env_id: str | None = None,
    write: bool = True,
    source: str = "auto",
    attack: str | None = None,
    epsilons: Any = None,
    pgd_steps: int = 10,
) -> dict[str, Any]:
    """Runs ``episodes`` episodes of a trained run's policy and summarises them.

    Args:
      run_dir: a run directory written by ``scripts/train.py``.
      episodes: number of episodes (>= 1).
      deterministic: greedy actions (the mode) instead of sampled ones.
      seed: env seed of the first episode (later episodes continue its RNG); default: the run's
        seed + 1000, so evaluation episodes differ from the training ones.
      video_dir: record every episode as mp4 here (Gymnasium's RecordVideo; needs moviepy).
      env_id: evaluate on another env with the same spaces (default: the run's env).
      write: write ``run_dir/eval.json``.
      source: ``"auto"`` (the exported policy for deterministic actions if present, else the
        checkpoint), ``"policy"`` or ``"checkpoint"``.
      attack: ``"fgsm"`` or ``"pgd"``: evaluate under observation attacks instead (see
        :mod:`pgrad.robustness`; always the checkpoint, which has the differentiable policy).
        The top-level return/length keys are then the clean (epsilon 0) episodes, ``"attack"``
        holds one row per epsilon, and ``run_dir/robustness.png`` plots return against epsilon.
      epsilons: with ``attack``: L-inf radii in raw observation units (a list or ``"0.01,0.1"``;
        0 is always added); default ``0, 0.01, 0.05, 0.1``.
      pgd_steps: with ``attack="pgd"``: sign-gradient steps.

    Returns:
      ``{"return_mean", "return_std", "length_mean", "length_std", "returns", "lengths", ...}``.

    Raises:
      UserError: no run in ``run_dir``, bad arguments, unknown env, moviepy missing for video.
    """
    import gymnasium as gym

    from pgrad.config import resolve_env

    run_dir = Path(run_dir)
    values = _run_settings(run_dir)
    if source not in ("auto", "policy", "checkpoint"):
        raise UserError(f"source must be 'auto', 'policy' or 'checkpoint'; got {source!r}.")
    if source == "policy" and not deterministic:
        raise UserError("the exported policy is deterministic; use deterministic=True with it.")
    if int(episodes) < 1:
        raise UserError(f"episodes must be >= 1; got {episodes}.")
    if attack is not None:
        return _evaluate_attacked(run_dir, values, int(episodes), deterministic, seed, env_id,
                                  write, source, attack, epsilons, pgd_steps, video_dir)
    env_spec = env_id or str(values.get("env", ""))
    bare_id = resolve_env(env_spec, forbid_dir=None if env_id else run_dir)
    seed = int(values.get("seed", 0)) + 1000 if seed is None else int(seed)
    if video_dir is not None:
        # Rendering to rgb arrays needs no display; keep SDL from looking for one.
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
        try:
            import moviepy  # noqa: F401
        except ImportError:
            raise UserError("--video needs moviepy: pip install 'pgrad[video]' "
                            "(or pip install moviepy).") from None
    try:
        env = gym.make(bare_id, render_mode="rgb_array" if video_dir is not None else None)
    except gym.error.Error as err:
        raise UserError(f"cannot create env {bare_id!r}: {one_line(err)}") from None
    trained_on = str(values.get("env", ""))
    if env_id and env_id != trained_on:
        _check_same_spaces(env, resolve_env(trained_on, forbid_dir=run_dir), bare_id)
    agent = None
    try:
        policy_dir = run_dir / "policy"
        exported = (policy_dir / "saved_model.pb").is_file()
        if source == "policy" and not exported:
            raise UserError(f"{run_dir} has no exported policy/ (the run did not finish).")
        if deterministic and exported and source != "checkpoint":
            policy, used = _saved_model_policy(policy_dir, env.observation_space), "policy"
        else:
            policy, agent = _checkpoint_policy(run_dir, values, bare_id, deterministic)
            used = "checkpoint"
        if video_dir is not None:
            env = gym.wrappers.RecordVideo(env, str(video_dir), episode_trigger=lambda i: True,
                                           name_prefix="eval", disable_logger=True)
        returns, lengths = [], []
        env.action_space.seed(seed)
        for i in range(int(episodes)):
            # Only the first reset is seeded; later episodes continue the env's RNG. (No reset
            # after the last episode: RecordVideo would start an empty extra video.)
            obs, _ = env.reset(seed=seed) if i == 0 else env.reset()
            total, length, done = 0.0, 0, False
            while not done:
                obs, reward, terminated, truncated, _ = env.step(policy(obs))
                total += float(reward)
                length += 1
                done = bool(terminated or truncated)
            returns.append(total)
            lengths.append(length)
    finally:
        env.close()
        if agent is not None:
            agent.close()
    result = {
        "run": str(run_dir),
        "env": env_spec,
        "episodes": int(episodes),
        "deterministic": bool(deterministic),
        "seed": seed,
        "source": used,
        "return_mean": float(np.mean(returns)),
        "return_std": float(np.std(returns)),
        "length_mean": float(np.mean(lengths)),
        "length_std": float(np.std(lengths)),
        "returns": returns,
        "lengths": lengths,
        "video_dir": None if video_dir is None else str(video_dir),
    }
    if not all(math.isfinite(r) for r in returns):
        raise UserError(f"env {env_spec!r} produced a non-finite reward during evaluation.")
    if write:
        tmp = run_dir / "eval.json.tmp"
        tmp.write_text(json.dumps(result, indent=1) + "\n")
        os.replace(tmp, run_dir / "eval.json")
    return result
