"""Evaluate a policy: N episodes, mean ± std of return and length, optionally under attack.

``pgrad.evaluate(agent_or_path, env_id=None, episodes=10, deterministic=True)`` runs
``episodes`` episodes, env ``i`` seeded ``seed + i``, all stepped together (one batched policy
call per step: :func:`pgrad.rl.evaluation.episodes.run_episodes`). The policy is an agent (anything
with
a ``policy`` attribute that is a :class:`pgrad.rl.acting.policy.Policy`, e.g. ``agents.make(...)``),
a ``Policy``, or a path to an exported policy (a run or save directory holding ``policy/``, or the
export itself: see :mod:`pgrad.rl.export.saved_model`). Loading a path reads data only; no code
from it is
imported.

**Which episodes.** One protocol everywhere pgrad evaluates a policy trained with seed ``s``
(``pgrad-evaluate``, evaluations during training, the benchmark's final score, the learning
targets): episode ``i`` resets with seed ``s + EVAL_SEED_OFFSET + i`` (:func:`eval_seed`), apart
from every training env (sub-env ``j`` of a run is seeded ``s + j``), and the same episodes
every time, so evaluations of one run compare like with like.

Deterministic actions (the distribution's mode) are the default, as in Stable-Baselines3's
``evaluate_policy`` and rl-zoo's ``enjoy.py``.

The envs are built as for training (:func:`pgrad.rl.envs.vector.make_env`). For an env that reports
whole
games (Atari) an episode is a whole game (:mod:`pgrad.rl.evaluation.episodes`).

With ``attack="fgsm"`` or ``"pgd"`` every observation is perturbed against the policy before it
acts, for each radius in ``epsilons`` (0, the clean baseline, always included), every radius on
the same seeded episodes (:mod:`pgrad.rl.evaluation.attacks`).

The episode loop and the attacks live in those two modules; their names are importable from here
too (their home before the split). The loop reads ``DEFAULT_MAX_EPISODE_STEPS`` from its own
module: set it there.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from pgrad.rl.evaluation.attacks import ATTACKS, attack_function, robustness  # noqa: F401 (re-exported)
from pgrad.rl.evaluation.episodes import (  # noqa: F401 (re-exported: their home before the split)
    DEFAULT_MAX_EPISODE_STEPS,
    episode_cap,
    run_episodes,
    summary,
)
from pgrad.rl.evaluation.target import Borrowed, as_policy

#: Evaluation episodes of a run trained with seed ``s`` start at seed ``s + EVAL_SEED_OFFSET``.
EVAL_SEED_OFFSET = 10_000


#: Episodes run side by side hold one env each: more than this is a typo, not an evaluation.
MAX_EPISODES = 10_000


def eval_seed(train_seed: int) -> int:
    """The seed of the first evaluation episode of a run trained with ``train_seed``."""
    return int(train_seed) + EVAL_SEED_OFFSET


def evaluate(
    target: Any,
    env_id: Any = None,
    episodes: int = 10,
    deterministic: bool = True,
    seed: int = 0,
    video_dir: str | os.PathLike | None = None,
    attack: str | None = None,
    epsilons: Sequence[float] = (0.0, 0.01, 0.05, 0.1),
    pgd_steps: int = 10,
    env_kwargs: dict[str, Any] | None = None,
    *,
    n_eval_episodes: int | None = None,
    render_mode: str | None = None,
) -> dict[str, Any]:
    """Runs ``episodes`` episodes of a policy and summarises them.

    ``n_eval_episodes`` is Stable-Baselines3's name of ``episodes``. ``render_mode="human"``
    shows the episodes on screen (each env made with Gymnasium's ``render_mode="human"``; it
    needs a display, or ``SDL_VIDEODRIVER=dummy`` to render nowhere).

    Args:
      target: an agent, a :class:`~pgrad.rl.acting.policy.Policy`, or the path of an exported policy
        (a run/save directory with ``policy/``, or the export itself).
      env_id: the env: a registered id, a factory (an
        :class:`pgrad.rl.envs.recipe.EnvRecipe` too) or one ``gym.Env`` instance (its
        episodes then run one after the other, and it is left
        open); default: the agent's, or the one the export records.
      episodes: number of episodes (>= 1); episode ``i`` resets with ``seed + i``.
      deterministic: the distribution's mode (default) instead of sampled actions.
      seed: seed of the first episode.
      video_dir: record every episode as mp4 here (Gymnasium's RecordVideo; needs moviepy).
      attack: ``"fgsm"`` or ``"pgd"``: evaluate under observation attacks (``"attack"`` in the
        result holds one row per epsilon; the top-level numbers are the clean episodes).
      epsilons: with ``attack``: L-inf radii in raw observation units (0 is always added).
      pgd_steps: with ``attack="pgd"``: sign-gradient steps.
      env_kwargs: the env's options, as for training (:func:`pgrad.rl.envs.vector.make_env`; e.g. an
        Atari run's ``{"frame_stack": 2}``).

    Returns:
      ``{"env", "episodes", "deterministic", "seed", "return_mean", "return_std",
      "length_mean", "length_std", "returns", "lengths", "video_dir"[, "attack"]}``.

    Raises:
      ValueError: bad arguments, an env that emits non-finite rewards, an unusable export.
      ImportError: moviepy missing for ``video_dir``.
    """
    from pgrad.rl.envs.ids import is_atari_id
    from pgrad.rl.envs.recipe import EnvRecipe, env_name
    from pgrad.rl.envs.recipe import make_env as build_env

    if n_eval_episodes is not None:
        episodes = n_eval_episodes
    if not 1 <= int(episodes) <= MAX_EPISODES:
        raise ValueError(f"episodes must be in [1, {MAX_EPISODES:,}]; got {episodes}.")
    if int(seed) < 0:
        raise ValueError(f"seed must be >= 0; got {seed}.")
    if attack is not None and video_dir is not None:
        raise ValueError("video recording cannot be combined with an attack.")
    if render_mode not in (None, "human"):
        raise ValueError(f"render_mode must be 'human' (on screen) or None; got {render_mode!r} "
                         "(video_dir records rgb_array frames).")
    if render_mode is not None and (video_dir is not None or attack is not None):
        raise ValueError("render_mode='human' shows plain episodes; it cannot be combined with "
                         "video recording or an attack.")
    env_kwargs = dict(env_kwargs or {})
    policy, env_id = as_policy(target, env_id, env_kwargs)
    instance = isinstance(env_id, (gym.Env, gym.vector.VectorEnv))
    if isinstance(env_id, gym.vector.VectorEnv):
        raise ValueError("evaluation steps single envs; pass the env id, a factory or one "
                         "gym.Env instead of a VectorEnv.")
    if instance and (video_dir is not None or attack is not None or env_kwargs or render_mode):
        raise ValueError("video, rendering, attacks and env_kwargs build envs of their own; pass "
                         "the env id or a factory instead of an env instance.")
    name = env_name(env_id)
    episodes, seed = int(episodes), int(seed)
    render = None
    if video_dir is not None:
        # Rendering to rgb arrays needs no display; keep SDL from looking for one.
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
        import moviepy  # noqa: F401  (RecordVideo needs it; fail before any episode runs)

        render = "rgb_array"
    elif render_mode is not None:
        render = render_mode

    def make_env(i: int):
        def record(env, **fps):
            with warnings.catch_warnings():  # every env records into the same folder, by design
                warnings.filterwarnings("ignore", message=".*Overwriting existing videos.*")
                return gym.wrappers.RecordVideo(env, str(video_dir), episode_trigger=lambda _: True,
                                                name_prefix=f"eval-{i}", disable_logger=True,
                                                **fps)

        kwargs = dict(env_kwargs, **({"render_mode": render} if render else {}))
        # Atari: film under the episodic-life wrapper, where one episode is one game, in real
        # time (the emulator runs at 60 frames a second)
        recording = render == "rgb_array"
        inside = recording and is_atari_id(env_id) and kwargs.get("preprocess", True)
        if inside:
            fps = max(1, 60 // int(kwargs.get("frame_skip", 4)))
            kwargs["game_wrapper"] = lambda env: record(env, fps=fps)
        if instance:
            return Borrowed(env_id)
        if isinstance(env_id, EnvRecipe):
            env = env_id(**kwargs)
        else:
            env = build_env(env_id, **kwargs)
        if render == "human" and "human" not in env.metadata.get("render_modes", ()):
            env.close()
            raise ValueError(f"env {name!r} cannot render on screen: its render modes are "
                             f"{list(env.metadata.get('render_modes', ()))}.")
        return record(env) if recording and not inside else env

    result: dict[str, Any] = {"env": name, "episodes": episodes,
                              "deterministic": bool(deterministic), "seed": seed,
                              "video_dir": None if video_dir is None else str(video_dir)}
    successes: list[Any] = []  # info["is_success"] per episode (None: not reported)
    if instance:  # one env: its episodes one after the other (seed + i each)
        runs = [run_episodes(policy, make_env, 1, seed + i, deterministic, name=name,
                             successes=successes) for i in range(episodes)]
        result.update(summary([r for rs, _ in runs for r in rs], [n for _, ns in runs
                                                                    for n in ns], successes))
    elif attack is None:
        result.update(summary(*run_episodes(policy, make_env, episodes, seed, deterministic,
                                             name=name, successes=successes), successes))
    else:
        result["attack"] = robustness(policy, make_env, attack, epsilons, episodes, seed,
                                      deterministic, pgd_steps, name=name)
        clean = result["attack"]["rows"][0]
        result.update(summary(clean["returns"], clean["lengths"]))
    if not all(math.isfinite(r) for r in result["returns"]):
        raise ValueError(f"env {name!r} produced a non-finite reward during evaluation.")
    return result
