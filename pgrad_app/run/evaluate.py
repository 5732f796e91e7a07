"""Evaluate a run directory or a saved agent: what ``pgrad-evaluate`` (scripts/evaluate.py) runs.

The policy comes from the run's exported ``policy/`` (deterministic or sampled actions, and
attacks: the export carries the differentiable parameters) or, for a run without an export (an
interrupted one) or with ``source="checkpoint"``, from its newest good checkpoint restored into
a fresh agent; an export that cannot be loaded falls back to the checkpoint with a warning. The
episodes themselves are :func:`pgrad.evaluate`'s. Loading a run reads data only (YAML with the
safe loader, TensorFlow checkpoints, a SavedModel graph): an env module the run's config names
(``module:EnvId``) is imported only if the user names it again (``--env``) or passes
``--trust-run-code``, and never from inside the run directory.

Failures are one line: bad input or a damaged run directory is a :class:`UserError` (exit 2),
an env that fails during the episodes a :class:`RunError` (exit 1).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from pgrad.rl.storage.files import write_json_atomic
from pgrad_app.errors import RunError, UserError, one_line
from pgrad_app.run.layout import RunLayout

SOURCES = ("auto", "policy", "checkpoint")


def run_settings(run_dir: Path) -> dict[str, Any]:
    """The run's ``config.yaml`` (safe YAML), or for a directory ``agent.save`` wrote, the same
    settings from its ``agent.json``; a :class:`UserError` if it is neither."""
    from pgrad_app.config.settings import saved_run_values
    from pgrad_app.config.yamlfile import load_yaml

    try:
        is_dir = run_dir.is_dir()
    except OSError as err:  # e.g. a name too long for the file system
        raise UserError(f"{run_dir}: {err.strerror or err}.") from None
    if not is_dir:
        raise UserError(f"{run_dir} is not a directory; expected a run directory from "
                        "pgrad-train or a directory from agent.save.")
    if RunLayout(run_dir).config.is_file():
        return load_yaml(RunLayout(run_dir).config)
    saved = saved_run_values(run_dir)
    if saved is None:
        raise UserError(f"{run_dir} holds no run (no config.yaml) and no saved agent (no "
                        "agent.json); expected a directory written by pgrad-train --out or "
                        "agent.save.")
    return saved


def checkpoint_agent(run_dir: Path, values: dict, env_id: str, one_env: bool = True):
    """A fresh agent of the run's kind on ``env_id`` with the newest good checkpoint's networks
    and normaliser statistics (what acting needs); on one env unless ``one_env`` is false (the
    run's own count: a game of many agents sizes its update by it)."""
    import agents
    from agents.persistence.save_load import restore
    from pgrad_app.config.settings import build, split_keys

    agent_cls = agents.get(str(values.get("agent")))
    _, hyper = split_keys(values, agent_cls.Config, str(RunLayout(run_dir).config))
    cfg = build(agent_cls.Config, dict(hyper, **({"num_envs": 1} if one_env else {}),
                                       vector_mode="sync"), {})
    try:
        agent = agent_cls(cfg, env_id=env_id, seed=int(values.get("seed", 0)))
    except ValueError as err:  # EnvError too: the env failed while being created
        raise UserError(f"cannot rebuild the agent of {run_dir}: {one_line(err)}") from None
    skipped: list[str] = []  # shown once a checkpoint was restored; else the error says it
    try:
        restore(agent, RunLayout(run_dir).checkpoints, acting_only=True, warn=skipped.append)
    except ValueError as err:
        agent.close()
        if "holds no checkpoint" in str(err):
            raise UserError(f"{run_dir} has neither an exported policy/ nor a checkpoint "
                            "yet.") from None
        raise UserError(f"{run_dir}: {one_line(err)}") from None
    for text in skipped:
        print(f"warning: {text}", file=sys.stderr, flush=True)
    return agent


def check_same_spaces(env_id: str, trained_id: str) -> None:
    """Refuses an evaluation env whose spaces differ from the training env's."""
    import gymnasium as gym

    from pgrad.rl.envs.recipe import env_name

    def short(space) -> str:
        if isinstance(space, gym.spaces.Box):
            return f"Box{space.shape} {space.dtype}"
        return str(space)

    ours, trained = _build(env_id), _build(trained_id)
    try:
        for what in ("observation_space", "action_space"):
            a, b = getattr(ours, what), getattr(trained, what)
            # Bounds may differ (the policy still runs); kind, shape and sizes may not.
            if short(a) != short(b):
                raise UserError(
                    f"--env {env_name(env_id)}: its {what.replace('_', ' ')} {short(a)} differs "
                    f"from "
                    f"{short(b)} of {env_name(trained_id)}, which the policy was trained on."
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
    trust_run_code: bool = False,
    render: str | None = None,
) -> dict[str, Any]:
    """Evaluates the policy of a run directory; writes ``eval.json`` for the plain evaluation
    (deterministic episodes on the run's env), ``eval-VARIANT.json`` for any other
    (:func:`variant_name`: video, attack, sampled actions, another env), and
    ``robustness.png`` with an attack; ``result["written"]`` names the file.

    Args:
      run_dir: a run directory written by ``pgrad-train``, or a directory ``agent.save`` wrote.
      episodes: number of episodes (>= 1).
      deterministic: greedy actions (the default) instead of sampled ones.
      seed: seed of the first episode (episode i gets ``seed + i``); default: pgrad's evaluation
        protocol, the run's seed + 10000 (:func:`pgrad.rl.evaluation.evaluate_policy.eval_seed`).
      video_dir: record every episode as mp4 here (needs moviepy).
      env_id: evaluate on another env with the same spaces (default: the run's env).
      write: write ``run_dir/eval.json`` (and ``robustness.png`` with an attack).
      source: ``"auto"`` (the export if present, else the checkpoint), ``"policy"`` or
        ``"checkpoint"``.
      attack, epsilons, pgd_steps: observation attacks, as :func:`pgrad.evaluate`.
      trust_run_code: import the env module the run's config names even if ``env_id`` does not
        name it again.
      render: ``"human"``: show the episodes on screen (``eval-human.json``).

    Raises:
      UserError: no run in ``run_dir``, bad arguments, unknown env, moviepy missing for video,
        an env that cannot record video, a run whose export and checkpoints are all unusable,
        code named by the run directory that was not allowed.
      RunError: the env failed during the episodes.
    """
    import pgrad
    from pgrad.rl.evaluation.evaluate_policy import ATTACKS, MAX_EPISODES, eval_seed
    from pgrad.rl.export.saved_model import find_export
    from pgrad.rl.rollout import EnvError
    from pgrad_app.config.plugins import (
        check_run_code,
        env_source,
        import_gym_packages,
        names_code,
        resolve_env,
        run_code_of,
        same_spec,
    )
    from pgrad_app.run import robustness

    run_dir = Path(run_dir)
    values = run_settings(run_dir)
    if source not in SOURCES:
        raise UserError(f"source must be one of {', '.join(SOURCES)}; got {source!r}.")
    if not 1 <= int(episodes) <= MAX_EPISODES:
        raise UserError(f"--episodes must be in [1, {MAX_EPISODES:,}]; got {episodes}.")
    if seed is not None and int(seed) < 0:
        raise UserError(f"--seed must be >= 0; got {seed}.")
    if attack is not None:
        if attack not in ATTACKS:
            raise UserError(f"--attack must be one of {', '.join(ATTACKS)}; "
                            f"got {attack!r}.")
        if video_dir is not None or render is not None:
            raise UserError(f"{'--video' if video_dir else '--render'} cannot be combined with "
                            "--attack.")
    if render is not None and video_dir is not None:
        raise UserError("--render human shows the episodes and --video records them; choose one.")
    eps = robustness.parse_epsilons("0,0.01,0.05,0.1" if epsilons is None else epsilons)
    if attack is not None:
        robustness.check_attack(attack, eps, pgd_steps)
    trained_on = str(values.get("env", ""))
    env_spec = env_id or trained_on
    if not env_spec:
        raise UserError(f"{run_dir} does not record a registered env id (the agent was made on "
                        "an env factory); pass --env ENV_ID.")
    own = env_id is None or same_spec(env_id, trained_on)  # the run's own env
    if own and names_code(trained_on):
        check_run_code("env", trained_on, env_id, trust_run_code, run_dir, "--env")
    code = run_code_of(values)
    if code and not trust_run_code:
        raise UserError(f"{run_dir} names code to import: {', '.join(code)}. pgrad imports code "
                        "named by a run directory only with --trust-run-code (after checking "
                        "it).")
    import_gym_packages(values.get("gym_packages"), forbid_dir=run_dir)
    # Code inside the run directory is never imported, whether the run or the user names it.
    bare_id = resolve_env(env_spec, forbid_dir=run_dir)
    # The run's env options and wrappers come with its id (and with another id of the same
    # spaces: the wrappers may be what makes the spaces fit).
    bare_id = env_source(bare_id, values.get("env_kwargs"), values.get("env_wrapper"),
                         forbid_dir=run_dir)
    if not own:
        if names_code(trained_on):  # comparing spaces needs the run's env: its code
            check_run_code("env", trained_on, None, trust_run_code, run_dir, "--env")
        check_same_spaces(bare_id, env_source(resolve_env(trained_on, forbid_dir=run_dir),
                                              values.get("env_kwargs"), values.get("env_wrapper"),
                                              forbid_dir=run_dir))
    team = _team_evaluation(run_dir, values, bare_id, episodes, deterministic, seed, attack,
                            video_dir)
    if team is not None:  # a game of many agents (ippo, mappo): the team's return
        result = {"run": str(run_dir), **team, "env": env_spec, "source": "checkpoint"}
        written = RunLayout(run_dir).evaluation_of(variant_name(
            deterministic, None, None if own else env_spec, None, None))
        result["written"] = str(written)
        if write:
            _save_result(written, result)
        return result
    _check_creates(bare_id)
    tracked = write and attack is None and values.get("track") == "wandb"
    if tracked:  # the tracked run gets the result too: its login checked before the work
        from pgrad_app.run.tracking import check_can_start

        check_can_start("wandb")
    seed = eval_seed(int(values.get("seed", 0))) if seed is None else int(seed)
    if video_dir is not None:
        try:
            import moviepy  # noqa: F401
        except ImportError:
            raise UserError("--video needs moviepy: pip install 'pgrad[video]' "
                            "(or pip install moviepy).") from None
        _check_writable_dir(Path(video_dir))
        _check_renders(bare_id)
    exported = find_export(RunLayout(run_dir).policy) is not None
    if source == "policy" and not exported:
        raise UserError(f"{run_dir} has no exported policy/ (the run did not finish).")
    target, used, problem = None, "policy", None
    if exported and source != "checkpoint":
        target, problem = _load_export(RunLayout(run_dir).policy, bare_id)
        if problem is not None and source == "policy":
            raise UserError(f"{run_dir}: {problem}")
        exported = problem is None
    agent = None
    try:
        if not exported or source == "checkpoint":
            try:
                agent = target = checkpoint_agent(run_dir, values, bare_id)
            except UserError as err:
                if problem is None:
                    raise
                raise UserError(f"{run_dir}: its exported policy cannot be loaded ({problem}), "
                                f"nor a checkpoint: {err}") from None
            used = "checkpoint"
            if problem is not None:
                print(f"warning: {problem}; evaluated the newest good checkpoint instead.",
                      file=sys.stderr, flush=True)
        try:
            result = pgrad.evaluate(target, env_id=bare_id, episodes=episodes,
                                    deterministic=deterministic, seed=seed, video_dir=video_dir,
                                    attack=attack, epsilons=eps, pgd_steps=pgd_steps,
                                    render_mode=render)
        except EnvError as err:
            raise RunError(one_line(err)) from None
        except (ValueError, OSError) as err:
            raise UserError(one_line(err)) from None
    finally:
        if agent is not None:
            agent.close()
    result = {"run": str(run_dir), **result, "env": env_spec, "source": used}
    written = RunLayout(run_dir).evaluation_of(variant_name(
        deterministic, video_dir, None if own else env_spec, attack, render))
    result["written"] = str(written)
    if write:
        _save_result(written, result)
        if tracked:
            from pgrad_app.run.tracking import log_evaluation

            log_evaluation(run_dir, result, video_dir)
        if attack is not None:
            robustness.plot_robustness(
                result["attack"], RunLayout(run_dir).robustness,
                title=f"{values.get('agent')} on {env_spec}, seed {values.get('seed', 0)}")
    return result


def _headline(result: dict) -> str:
    """The evaluation in a few words, for an error line when its file could not be written."""
    attack = result.get("attack")
    if attack:
        return ", ".join(f"epsilon {r['epsilon']:g}: return {r['return_mean']:.2f} ± "
                         f"{r['return_std']:.2f}" for r in attack["rows"])
    return (f"return {result['return_mean']:.2f} ± {result['return_std']:.2f}, length "
            f"{result['length_mean']:.1f} over {result['episodes']} episodes")


def variant_name(deterministic: bool, video_dir, env: str | None, attack: str | None,
                 render: str | None = None) -> str:
    """``""`` for the plain evaluation (deterministic actions on the run's own env, no video,
    no attack; its episode count and seed are in the file), else what differs (``"video"``,
    ``"attack-fgsm"``, ``"sampled"``, ``"env-ID"``, joined by ``-``): its file is
    ``eval-VARIANT.json`` beside ``eval.json``."""
    import re

    parts = [f"attack-{attack}"] if attack else []
    if video_dir is not None:
        parts.append("video")
    if render is not None:
        parts.append(render)
    if not deterministic:
        parts.append("sampled")
    if env:
        parts.append("env-" + re.sub(r"[^A-Za-z0-9._-]+", "_", str(env)))
    return "-".join(parts)


def _check_writable_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".pgrad-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise UserError(f"--video {path}: cannot write there ({err.strerror or err}).") from None


def _build(env_id, **kwargs):
    """One env of an id or recipe (its options plus ``kwargs``)."""
    from pgrad.rl.envs.recipe import EnvRecipe, make_env

    return env_id(**kwargs) if isinstance(env_id, EnvRecipe) else make_env(env_id, **kwargs)


def _save_result(written: Path, result: dict) -> None:
    """Writes an evaluation's JSON; an OS error is one line that carries the results (nothing
    was printed yet)."""
    try:
        write_json_atomic(written, result)
    except OSError as err:
        raise RunError(f"cannot write {written}: {err.strerror or err}; the results were not "
                       f"saved: {_headline(result)}.") from None


def _team_evaluation(run_dir: Path, values: dict, env: Any, episodes: int, deterministic: bool,
                     seed: int | None, attack: str | None, video_dir: Any) -> dict | None:
    """The team's evaluation (``agent.evaluate_team``) of a run whose agent plays a game of
    many agents, or None: the run's agent is a single-agent one."""
    import agents

    try:
        cls = agents.get(values.get("agent", ""))
    except ValueError:
        return None
    if not hasattr(cls, "evaluate_team"):
        return None
    if attack is not None or video_dir is not None:
        raise UserError(f"{run_dir}: a game of many agents is evaluated for its team's return "
                        "only (no --attack, no --video).")
    agent = checkpoint_agent(run_dir, values, env, one_env=False)
    from pgrad.rl.evaluation.evaluate_policy import eval_seed

    first = eval_seed(int(values.get("seed", 0))) if seed is None else int(seed)
    try:
        result = agent.evaluate_team(episodes, deterministic, first)
        result.setdefault("length_std", 0.0)
        return {**result, "deterministic": bool(deterministic), "seed": first}
    except ValueError as err:
        raise UserError(one_line(err)) from None
    finally:
        agent.close()


def _check_creates(env_id: str) -> None:
    """Refuses an env whose constructor fails, in one line, before anything is loaded."""

    from pgrad.rl.envs.recipe import env_name

    try:
        env = _build(env_id)
    except Exception as err:  # noqa: BLE001  (the env's own constructor)
        raise UserError(f"env {env_name(env_id)!r} could not be created: {type(err).__name__}: "
                        f"{one_line(err)}") from None
    env.close()


def _check_renders(env_id: str) -> None:
    """Refuses --video for an env that cannot render frames (e.g. no ``render_mode`` argument)."""
    import warnings

    from pgrad.rl.envs.recipe import env_name

    try:
        with warnings.catch_warnings(record=True) as caught:  # shown only if it works
            env = _build(env_id, render_mode="rgb_array")
    except Exception as err:  # noqa: BLE001  (the env's own constructor)
        hint = (" (its constructor takes no render_mode)" if "render_mode" in str(err) else "")
        raise UserError(f"--video: env {env_name(env_id)!r} cannot render frames{hint}: "
                        f"{type(err).__name__}: {one_line(err)}") from None
    for w in caught:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)
    env.close()


def _load_export(path: Path, env_id: str):
    """``(policy, None)`` for a loadable export at ``path``, else ``(None, why not)``."""

    from pgrad.rl.export.saved_model import ExportedPolicy

    probe = _build(env_id)
    try:
        return ExportedPolicy(path, probe.observation_space, probe.action_space), None
    except ValueError as err:
        return None, one_line(err)
    finally:
        probe.close()
