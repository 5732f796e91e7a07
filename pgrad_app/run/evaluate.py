"""Evaluate a run directory or a saved agent: what ``pgrad-evaluate`` (scripts/evaluate.py) runs.

The policy comes from the run's exported ``policy/`` (deterministic or sampled actions, and
attacks: the export carries the differentiable parameters) or, for a run without an export (an
interrupted one) or with ``source="checkpoint"``, from its newest good checkpoint restored into
a fresh agent; an export that cannot be loaded falls back to the checkpoint with a warning. The
episodes themselves are :func:`pgrad.evaluate`'s. Loading a run reads data only (YAML with the
safe loader, TensorFlow checkpoints, a SavedModel graph): an env module the run's config names
(``module:EnvId``) is imported only if the user names it again (``--env``) or passes
``--trust-run-code``, and never from inside the run directory.

What is evaluated comes from :mod:`pgrad_app.run.eval_sources` (settings, export, checkpoint);
the refusals before any episode from :mod:`pgrad_app.run.eval_checks`; this module is the flow,
the team evaluation of a game of many agents, and the result files.

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
from pgrad_app.run.eval_checks import (
    check_creates,
    check_renders,
    check_same_spaces,
    check_writable_dir,
)
from pgrad_app.run.eval_sources import checkpoint_agent, load_export, run_settings
from pgrad_app.run.layout import RunLayout

SOURCES = ("auto", "policy", "checkpoint")


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
    from pgrad.rl.collection.rollout import EnvError
    from pgrad.rl.evaluation.evaluate_policy import ATTACKS, MAX_EPISODES, eval_seed
    from pgrad.rl.export.saved_model import find_export
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
    check_creates(bare_id)
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
        check_writable_dir(Path(video_dir))
        check_renders(bare_id)
    exported = find_export(RunLayout(run_dir).policy) is not None
    if source == "policy" and not exported:
        raise UserError(f"{run_dir} has no exported policy/ (the run did not finish).")
    target, used, problem = None, "policy", None
    if exported and source != "checkpoint":
        target, problem = load_export(RunLayout(run_dir).policy, bare_id)
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


