"""Evaluate a training run directory: what ``scripts/evaluate.py`` (``pgrad-evaluate``) runs.

The policy comes from the run's exported ``policy/`` (deterministic or sampled actions, and
attacks: the export carries the differentiable parameters) or, for a run without an export (an
interrupted one) or with ``source="checkpoint"``, from its newest good checkpoint restored into
a fresh agent. The episodes themselves are :func:`pgrad.evaluate`'s. Loading a run reads data
only (YAML with the safe loader, TensorFlow checkpoints, a SavedModel graph); no code from the
run directory is imported.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pgrad.core.errors import UserError, one_line

SOURCES = ("auto", "policy", "checkpoint")


def run_settings(run_dir: Path) -> dict[str, Any]:
    """The run's ``config.yaml`` as a dict (safe YAML), or a :class:`UserError`."""
    from pgrad_app.settings import load_yaml

    if not run_dir.is_dir():
        raise UserError(f"{run_dir} is not a directory; expected a run directory from train.py.")
    if not (run_dir / "config.yaml").is_file():
        raise UserError(f"{run_dir} holds no run (no config.yaml); expected a directory written "
                        "by train.py --out.")
    return load_yaml(run_dir / "config.yaml")


def checkpoint_agent(run_dir: Path, values: dict, env_id: str):
    """A fresh agent of the run's kind on ``env_id`` with the newest good checkpoint's networks
    and normaliser statistics (what acting needs)."""
    import agents
    from agents.persistence import restore
    from pgrad_app.settings import build, split_keys

    agent_cls = agents.get(str(values.get("agent")))
    _, hyper = split_keys(values, agent_cls.Config, str(run_dir / "config.yaml"))
    cfg = build(agent_cls.Config, dict(hyper, num_envs=1, vector_mode="sync"), {})
    agent = agent_cls(cfg, env_id=env_id, seed=int(values.get("seed", 0)))
    try:
        restore(agent, run_dir / "checkpoints", acting_only=True)
    except ValueError as err:
        agent.close()
        if "holds no checkpoint" in str(err):
            raise UserError(f"{run_dir} has neither an exported policy/ nor a checkpoint "
                            "yet.") from None
        raise UserError(f"{run_dir}: {one_line(err)}") from None
    return agent


def check_same_spaces(env_id: str, trained_id: str) -> None:
    """Refuses an evaluation env whose spaces differ from the training env's."""
    import gymnasium as gym

    def short(space) -> str:
        if isinstance(space, gym.spaces.Box):
            return f"Box{space.shape} {space.dtype}"
        return str(space)

    ours, trained = gym.make(env_id), gym.make(trained_id)
    try:
        for what in ("observation_space", "action_space"):
            a, b = getattr(ours, what), getattr(trained, what)
            # Bounds may differ (the policy still runs); kind, shape and sizes may not.
            if short(a) != short(b):
                raise UserError(
                    f"--env {env_id}: its {what.replace('_', ' ')} {short(a)} differs from "
                    f"{short(b)} of {trained_id}, which the policy was trained on."
                )
    finally:
        ours.close()
        trained.close()


def evaluate_run(
    run_dir: str | os.PathLike,
    episodes: int = 10,
    deterministic: bool = True,
    seed: int | None = None,
    video_dir: str | os.PathLike | None = None,
    env_id: str | None = None,
    write: bool = True,
    source: str = "auto",
    attack: str | None = None,
    epsilons: Any = None,
    pgd_steps: int = 10,
) -> dict[str, Any]:
    """Evaluates the policy of a run directory; writes ``eval.json`` (and ``robustness.png``).

    Args:
      run_dir: a run directory written by ``train.py``.
      episodes: number of episodes (>= 1).
      deterministic: greedy actions (the default) instead of sampled ones.
      seed: seed of the first episode (episode i gets ``seed + i``); default: the run's seed +
        1000, so evaluation episodes differ from the training ones.
      video_dir: record every episode as mp4 here (needs moviepy).
      env_id: evaluate on another env with the same spaces (default: the run's env).
      write: write ``run_dir/eval.json`` (and ``robustness.png`` with an attack).
      source: ``"auto"`` (the export if present, else the checkpoint), ``"policy"`` or
        ``"checkpoint"``.
      attack, epsilons, pgd_steps: observation attacks, as :func:`pgrad.evaluate`.

    Raises:
      UserError: no run in ``run_dir``, bad arguments, unknown env, moviepy missing for video.
    """
    import pgrad
    from pgrad.rl.export import find_export
    from pgrad_app import robustness
    from pgrad_app.plugins import resolve_env

    run_dir = Path(run_dir)
    values = run_settings(run_dir)
    if source not in SOURCES:
        raise UserError(f"source must be one of {', '.join(SOURCES)}; got {source!r}.")
    if int(episodes) < 1:
        raise UserError(f"--episodes must be >= 1; got {episodes}.")
    if seed is not None and int(seed) < 0:
        raise UserError(f"--seed must be >= 0; got {seed}.")
    if attack is not None:
        if attack not in robustness.ATTACKS:
            raise UserError(f"--attack must be one of {', '.join(robustness.ATTACKS)}; "
                            f"got {attack!r}.")
        if video_dir is not None:
            raise UserError("--video cannot be combined with --attack.")
        if int(pgd_steps) < 1:
            raise UserError(f"--pgd-steps must be >= 1; got {pgd_steps}.")
    eps = robustness.parse_epsilons("0,0.01,0.05,0.1" if epsilons is None else epsilons)
    trained_on = str(values.get("env", ""))
    env_spec = env_id or trained_on
    bare_id = resolve_env(env_spec, forbid_dir=None if env_id else run_dir)
    if env_id and env_id != trained_on:
        check_same_spaces(bare_id, resolve_env(trained_on, forbid_dir=run_dir))
    seed = int(values.get("seed", 0)) + 1000 if seed is None else int(seed)
    if video_dir is not None:
        try:
            import moviepy  # noqa: F401
        except ImportError:
            raise UserError("--video needs moviepy: pip install 'pgrad[video]' "
                            "(or pip install moviepy).") from None
        _check_writable_dir(Path(video_dir))
    exported = find_export(run_dir / "policy") is not None
    if source == "policy" and not exported:
        raise UserError(f"{run_dir} has no exported policy/ (the run did not finish).")
    agent = None
    try:
        if exported and source != "checkpoint":
            target, used = run_dir / "policy", "policy"
        else:
            agent = target = checkpoint_agent(run_dir, values, bare_id)
            used = "checkpoint"
        try:
            result = pgrad.evaluate(target, env_id=bare_id, episodes=episodes,
                                    deterministic=deterministic, seed=seed, video_dir=video_dir,
                                    attack=attack, epsilons=eps, pgd_steps=pgd_steps)
        except ValueError as err:
            raise UserError(one_line(err)) from None
    finally:
        if agent is not None:
            agent.close()
    result = {"run": str(run_dir), **result, "env": env_spec, "source": used}
    if write:
        tmp = run_dir / "eval.json.tmp"
        tmp.write_text(json.dumps(result, indent=1) + "\n")
        os.replace(tmp, run_dir / "eval.json")
        if attack is not None:
            robustness.plot_robustness(
                result["attack"], run_dir / "robustness.png",
                title=f"{values.get('agent')} on {env_spec}, seed {values.get('seed', 0)}")
    return result


def _check_writable_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".pgrad-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise UserError(f"--video {path}: cannot write there ({err.strerror or err}).") from None
