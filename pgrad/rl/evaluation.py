"""Evaluate a policy: N episodes, mean ± std of return and length, optionally under attack.

``pgrad.evaluate(agent_or_path, env_id=None, episodes=10, deterministic=True)`` runs
``episodes`` episodes, env ``i`` seeded ``seed + i``, all stepped together (one batched policy
call per step). The policy is an agent (anything with a ``policy`` attribute that is a
:class:`pgrad.rl.policy.Policy`, e.g. ``agents.make(...)``), a ``Policy``, or a path to an
exported policy (a run or save directory holding ``policy/``, or the export itself: see
:mod:`pgrad.rl.export`). Loading a path reads data only; no code from it is imported.

**Which episodes.** One protocol everywhere pgrad evaluates a policy trained with seed ``s``
(``pgrad-evaluate``, evaluations during training, the benchmark's final score, the learning
targets): episode ``i`` resets with seed ``s + EVAL_SEED_OFFSET + i`` (:func:`eval_seed`), apart
from every training env (sub-env ``j`` of a run is seeded ``s + j``), and the same episodes
every time, so evaluations of one run compare like with like.

Deterministic actions (the distribution's mode) are the default, as in Stable-Baselines3's
``evaluate_policy`` and rl-zoo's ``enjoy.py``.

The envs are built as for training (:func:`pgrad.rl.envs.make_env`). For an env that reports whole
games (:data:`pgrad.rl.envs.GAME_INFO`: Atari) an episode is a whole game: a lost life ends the
env's episode and the loop resets it and plays on, as training's vector envs do (the policy sees
what it saw in training, FIRE pressed after a lost life included), until the game is over; its
return and length are the game's real score and steps. SB3's ``evaluate_policy`` counts Atari
episodes the same way, from its ``Monitor``.

With ``attack="fgsm"`` or ``"pgd"`` every observation is perturbed against the policy before it
acts, for each radius in ``epsilons`` (0, the clean baseline, always included); the attacked
quantity is the log-probability of the action the policy would take on the clean observation
(:mod:`pgrad.tools.adversarial`), and epsilon is in raw observation units (the flattened
observation the env returns, before normalisation). Every radius runs the same seeded episodes.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from pgrad.rl.eval_target import Borrowed, as_policy
from pgrad.rl.policy import Policy

ATTACKS = ("fgsm", "pgd")
#: Evaluation episodes of a run trained with seed ``s`` start at seed ``s + EVAL_SEED_OFFSET``.
EVAL_SEED_OFFSET = 10_000


#: Episodes run side by side hold one env each: more than this is a typo, not an evaluation.
MAX_EPISODES = 10_000
#: The step cap of an evaluation episode whose env's spec sets none (an env whose episodes never
#: end must not hang an evaluation); with a spec, its ``max_episode_steps``.
DEFAULT_MAX_EPISODE_STEPS = 100_000


def episode_cap(env: gym.Env | gym.vector.VectorEnv) -> int:
    """The step cap of an evaluation episode in ``env``: its spec's ``max_episode_steps``, else
    :data:`DEFAULT_MAX_EPISODE_STEPS`."""
    spec = getattr(env, "spec", None)
    cap = getattr(spec, "max_episode_steps", None)
    return int(cap) if isinstance(cap, int) and cap > 0 else DEFAULT_MAX_EPISODE_STEPS


def eval_seed(train_seed: int) -> int:
    """The seed of the first evaluation episode of a run trained with ``train_seed``."""
    return int(train_seed) + EVAL_SEED_OFFSET


def run_episodes(
    policy: Policy,
    make_env: Callable[[int], Any],
    episodes: int,
    seed: int,
    deterministic: bool = True,
    perturb: Callable[[np.ndarray], np.ndarray] | None = None,
    name: str = "env",
) -> tuple[list[float], list[int]]:
    """Runs ``episodes`` episodes side by side; returns (returns, lengths) in episode order.

    ``make_env(i)`` builds env ``i`` (reset with ``seed + i``; an env reporting whole games plays
    a whole game, see the module docstring); an episode is cut at :func:`episode_cap` steps, with
    one warning; ``perturb(flat [B, d])`` changes
    the flat raw observations before the policy sees them (an attack); ``name`` names the env in
    errors.

    Raises:
      EnvError: an env failed (constructor, reset or step, an observation that does not fit
        its space, a NaN/Inf observation or reward), naming the episode and its step.
    """
    from pgrad.rl.envs import GAME_INFO, EnvError, describe_failure
    from pgrad.rl.masks import env_mask
    from pgrad.rl.spaces import batch_of_one, obs_layout

    def failed(err: Exception, i: int, what: str) -> EnvError:
        return EnvError(f"env {name!r} failed at {what} of evaluation episode {i} (seed "
                        f"{seed + i}): {describe_failure(err, policy.observation_space)}")

    def nonfinite(what: str, i: int, step: int) -> EnvError:
        return EnvError(f"env {name!r} returned a non-finite {what} at "
                        f"{'the reset' if step == 0 else f'step {step}'} of evaluation episode "
                        f"{i} (seed {seed + i}); pgrad needs finite observations and rewards.")

    envs: list = []
    try:
        for i in range(episodes):
            try:
                envs.append(make_env(i))
            except Exception as err:
                raise EnvError(f"env {name!r} could not be created for evaluation: "
                               f"{describe_failure(err)}") from err
        rng = np.random.default_rng([seed, 7])
        obs, infos = [], []  # infos: of each env's last reset or step (its action mask)
        for i, env in enumerate(envs):
            try:
                first, info = env.reset(seed=seed + i)
            except Exception as err:
                raise failed(err, i, "the reset") from err
            obs.append(first)
            infos.append(info)
        layout = getattr(policy, "layout", None) or obs_layout(policy.observation_space)
        returns, lengths = [0.0] * episodes, [0] * episodes
        games = [bool(env.metadata.get(GAME_INFO)) for env in envs]
        caps = [episode_cap(env) for env in envs]
        capped = []
        live = list(range(episodes))
        # a recurrent policy's state per episode, reset where an episode (or a life) starts
        size = int(getattr(policy, "state_size", 0) or 0)
        states = np.zeros((episodes, size), np.float32) if size else None
        starts = np.ones(episodes, bool)
        while live:
            rows, legal = [], []
            for i in live:
                try:
                    rows.append(policy.flatten(batch_of_one(obs[i])))
                except (ValueError, TypeError, IndexError) as err:
                    raise failed(err, i, f"step {lengths[i]} (its observation)") from err
                # NaN/Inf in the vector part (images are integers): the policy would act on it
                vec = layout.vector(rows[-1])
                if vec is not None and not np.isfinite(vec).all():
                    raise nonfinite("observation", i, lengths[i])
                legal.append(env_mask(envs[i], layout, obs[i], infos[i], name,
                                      f"step {lengths[i]} of evaluation episode {i}"))
            if layout.flat:
                flat = np.concatenate(rows).astype(np.float32)
            else:  # the parts of observations with images, each in its own dtype
                flat = layout.concat(rows)
            if perturb is not None:
                flat = perturb(flat)
            action_mask = None
            if any(m is not None for m in legal):  # (an env without one: every action legal)
                width = next(m for m in legal if m is not None).shape[1]
                action_mask = np.concatenate([np.ones((1, width), bool) if m is None else m
                                              for m in legal])
            # The mask only where an env gave one: a Policy of the user's need not take it.
            masked = {} if action_mask is None else {"action_mask": action_mask}
            if states is None:
                actions = policy.act_flat(flat, deterministic, rng, **masked)
            else:
                actions, states[live] = policy.act_with_state(flat, states[live], starts[live],
                                                              deterministic, rng, **masked)
                starts[live] = False
            still = []
            for j, i in enumerate(live):
                try:
                    obs[i], reward, term, trunc, info = envs[i].step(actions[j])
                    infos[i] = info
                    reward, done = float(reward), bool(term or trunc)
                except Exception as err:
                    raise failed(err, i, f"step {lengths[i] + 1}") from err
                if not math.isfinite(reward):
                    raise nonfinite("reward", i, lengths[i] + 1)
                returns[i] += reward
                lengths[i] += 1
                if done and games[i]:  # the game's end, or a lost life: reset and play on
                    game = info.get(GAME_INFO)
                    if game is None:
                        try:
                            obs[i], info = envs[i].reset()
                            infos[i] = info
                            starts[i] = True
                        except Exception as err:
                            raise failed(err, i, f"the reset after step {lengths[i]}") from err
                        game = info.get(GAME_INFO)  # (a game can end inside a reset)
                    done = game is not None
                    if done:
                        returns[i], lengths[i] = float(game["r"]), int(game["l"])
                if not done and lengths[i] >= caps[i]:  # an episode that never ends: cut
                    done = True
                    capped.append(i)
                if not done:
                    still.append(i)
            live = still
        if capped:
            warnings.warn(f"env {name!r}: {len(capped)} evaluation episode(s) did not end "
                          f"within {caps[capped[0]]:,} steps and were cut there (their return "
                          "is of those steps; set the env's max_episode_steps).", stacklevel=2)
    finally:
        closing = []
        for env in envs:
            try:
                env.close()
            except Exception as err:  # the episodes are done: say so, lose nothing
                closing.append(err)
        if closing:
            warnings.warn(f"env {name!r}: close() raised in {len(closing)} evaluation env(s): "
                          f"{describe_failure(closing[0])}", stacklevel=2)
    return returns, lengths


def attack_function(policy: Policy, kind: str, pgd_steps: int = 10) -> Callable[..., Any]:
    """``tf.function (flat raw obs [B, d], epsilon []) -> perturbed flat raw obs [B, d]``."""
    import tensorflow as tf

    from pgrad.tools.adversarial import fgsm, pgd

    if kind not in ATTACKS:
        raise ValueError(f"attack must be one of {', '.join(ATTACKS)}; got {kind!r}.")
    layout = getattr(policy, "layout", None)
    if layout is not None and not layout.flat:
        raise ValueError("observation attacks perturb vector observations only; this policy "
                         f"observes images ({policy.observation_space}).")

    def attack(flat, eps):
        if kind == "fgsm":
            return fgsm(flat, policy.distribution, eps)
        return pgd(flat, policy.distribution, eps, steps=pgd_steps)

    dim = policy.flatten(_sample_batch(policy.observation_space)).shape[1]
    return tf.function(attack, input_signature=[tf.TensorSpec([None, dim], tf.float32),
                                                tf.TensorSpec([], tf.float32)])


def _sample_batch(space):
    from pgrad.rl.spaces import batch_of_one

    return batch_of_one(space.sample())


def _summary(returns: Sequence[float], lengths: Sequence[int]) -> dict[str, Any]:
    return {"return_mean": float(np.mean(returns)), "return_std": float(np.std(returns)),
            "length_mean": float(np.mean(lengths)), "length_std": float(np.std(lengths)),
            "returns": list(returns), "lengths": list(lengths)}


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
      target: an agent, a :class:`~pgrad.rl.policy.Policy`, or the path of an exported policy
        (a run/save directory with ``policy/``, or the export itself).
      env_id: the env: a registered id, a factory (an :class:`pgrad.rl.envs.EnvRecipe` too) or
        one ``gym.Env`` instance (its episodes then run one after the other, and it is left
        open); default: the agent's, or the one the export records.
      episodes: number of episodes (>= 1); episode ``i`` resets with ``seed + i``.
      deterministic: the distribution's mode (default) instead of sampled actions.
      seed: seed of the first episode.
      video_dir: record every episode as mp4 here (Gymnasium's RecordVideo; needs moviepy).
      attack: ``"fgsm"`` or ``"pgd"``: evaluate under observation attacks (``"attack"`` in the
        result holds one row per epsilon; the top-level numbers are the clean episodes).
      epsilons: with ``attack``: L-inf radii in raw observation units (0 is always added).
      pgd_steps: with ``attack="pgd"``: sign-gradient steps.
      env_kwargs: the env's options, as for training (:func:`pgrad.rl.envs.make_env`; e.g. an
        Atari run's ``{"frame_stack": 2}``).

    Returns:
      ``{"env", "episodes", "deterministic", "seed", "return_mean", "return_std",
      "length_mean", "length_std", "returns", "lengths", "video_dir"[, "attack"]}``.

    Raises:
      ValueError: bad arguments, an env that emits non-finite rewards, an unusable export.
      ImportError: moviepy missing for ``video_dir``.
    """
    from pgrad.rl.env_ids import is_atari_id
    from pgrad.rl.env_recipe import EnvRecipe, env_name
    from pgrad.rl.env_recipe import make_env as build_env

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
    if instance:  # one env: its episodes one after the other (seed + i each)
        runs = [run_episodes(policy, make_env, 1, seed + i, deterministic, name=name)
                for i in range(episodes)]
        result.update(_summary([r for rs, _ in runs for r in rs], [n for _, ns in runs
                                                                    for n in ns]))
    elif attack is None:
        result.update(_summary(*run_episodes(policy, make_env, episodes, seed, deterministic,
                                             name=name)))
    else:
        result["attack"] = robustness(policy, make_env, attack, epsilons, episodes, seed,
                                      deterministic, pgd_steps, name=name)
        clean = result["attack"]["rows"][0]
        result.update(_summary(clean["returns"], clean["lengths"]))
    if not all(math.isfinite(r) for r in result["returns"]):
        raise ValueError(f"env {name!r} produced a non-finite reward during evaluation.")
    return result


def robustness(policy: Policy, make_env: Callable[[int], Any], kind: str,
               epsilons: Sequence[float], episodes: int, seed: int, deterministic: bool,
               pgd_steps: int = 10,
               name: str = "env") -> dict[str, Any]:
    """Mean ± std return under ``kind`` attacks for each epsilon (0 = clean), same episodes."""
    import tensorflow as tf

    if int(pgd_steps) < 1:
        raise ValueError(f"pgd_steps must be >= 1; got {pgd_steps}.")
    eps_list = sorted({float(e) for e in epsilons} | {0.0})
    if any(not math.isfinite(e) or e < 0 for e in eps_list):
        raise ValueError(f"epsilons must be finite and >= 0; got {list(epsilons)}.")
    attack = attack_function(policy, kind, int(pgd_steps))
    rows = []
    for eps in eps_list:
        perturb = None
        if eps > 0:
            e = tf.constant(eps, tf.float32)
            perturb = lambda flat, e=e: attack(tf.constant(flat), e).numpy()  # noqa: E731
        returns, lengths = run_episodes(policy, make_env, episodes, seed, deterministic, perturb,
                                        name=name)
        rows.append({"epsilon": eps, **_summary(returns, lengths)})
    return {
        "kind": kind,
        "space": "raw observation units (before observation normalisation), L-inf",
        "pgd_steps": int(pgd_steps) if kind == "pgd" else None,
        "target": "log-prob of the greedy action at the clean observation",
        "epsilons": [r["epsilon"] for r in rows],
        "return_mean": [r["return_mean"] for r in rows],
        "return_std": [r["return_std"] for r in rows],
        "length_mean": [r["length_mean"] for r in rows],
        "rows": rows,
    }
