"""The evaluation episode loop: episodes of a policy side by side, one batched policy call a step.

:func:`run_episodes` is what :func:`pgrad.evaluate` (:mod:`pgrad.rl.evaluation.evaluate_policy`,
which builds the
envs and picks the seeds) and its observation attacks (:mod:`pgrad.rl.evaluation.attacks`) run;
:func:`summary` gives the numbers they report of its returns and lengths.

For an env that reports whole games (:data:`pgrad.rl.envs.vector.GAME_INFO`: Atari) an episode is a
whole game: a lost life ends the env's episode and the loop resets it and plays on, as training's
vector envs do (the policy sees what it saw in training, FIRE pressed after a lost life included),
until the game is over; its return and length are the game's real score and steps. SB3's
``evaluate_policy`` counts Atari episodes the same way, from its ``Monitor``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from pgrad.rl.acting.policy import Policy

#: The step cap of an evaluation episode whose env's spec sets none (an env whose episodes never
#: end must not hang an evaluation); with a spec, its ``max_episode_steps``.
DEFAULT_MAX_EPISODE_STEPS = 100_000


def episode_cap(env: gym.Env | gym.vector.VectorEnv) -> int:
    """The step cap of an evaluation episode in ``env``: its spec's ``max_episode_steps``, else
    :data:`DEFAULT_MAX_EPISODE_STEPS`."""
    spec = getattr(env, "spec", None)
    cap = getattr(spec, "max_episode_steps", None)
    return int(cap) if isinstance(cap, int) and cap > 0 else DEFAULT_MAX_EPISODE_STEPS


def run_episodes(
    policy: Policy,
    make_env: Callable[[int], Any],
    episodes: int,
    seed: int,
    deterministic: bool = True,
    perturb: Callable[[np.ndarray], np.ndarray] | None = None,
    name: str = "env",
    successes: list | None = None,
) -> tuple[list[float], list[int]]:
    """Runs ``episodes`` episodes side by side; returns (returns, lengths) in episode order.

    ``successes``, when given a list, receives each episode's ``info["is_success"]`` at its
    end (None where the env reports none), in episode order.

    ``make_env(i)`` builds env ``i`` (reset with ``seed + i``; an env reporting whole games plays
    a whole game, see the module docstring); an episode is cut at :func:`episode_cap` steps, with
    one warning; ``perturb(flat [B, d])`` changes
    the flat raw observations before the policy sees them (an attack); ``name`` names the env in
    errors.

    Action masks are read as training reads them (:class:`pgrad.rl.collection.masks.EnvMasks`): the
    source is decided at each env's reset, and every later step must give its mask from it.

    Raises:
      EnvError: an env failed (constructor, reset or step, an observation that does not fit
        its space, a NaN/Inf observation or reward), or gave a missing or bad action mask
        (:func:`pgrad.rl.collection.masks.check`), naming the episode and its step.
    """
    from pgrad.rl.collection.masks import EnvMasks
    from pgrad.rl.envs.vector import GAME_INFO, EnvError, describe_failure
    from pgrad.rl.observations.spaces import batch_of_one, obs_layout

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
        layout = getattr(policy, "layout", None) or obs_layout(policy.observation_space)

        def at(i: int, step: int) -> str:  # where, in mask errors
            return f"step {step} of evaluation episode {i} (seed {seed + i})"

        # The masks as training reads them: the source decided at the reset, then every step's
        # [1, n] mask from it (a mask missing at a later step is an error, never "all legal").
        readers = [EnvMasks(env, layout, name) for env in envs]
        obs, legal_now = [], []  # legal_now[i]: [1, n] bool at obs[i], or None (no masks)
        for i, env in enumerate(envs):
            try:
                first, info = env.reset(seed=seed + i)
            except Exception as err:
                raise failed(err, i, "the reset") from err
            obs.append(first)
            legal_now.append(readers[i].reset(first, info, f"the reset of evaluation episode "
                                                           f"{i} (seed {seed + i})"))
        masked = [i for i, m in enumerate(legal_now) if m is not None]
        if masked and len(masked) < episodes:
            plain = next(i for i, m in enumerate(legal_now) if m is None)
            raise EnvError(f"env {name!r} gave an action mask at the reset of evaluation "
                           f"episode {masked[0]} but none at that of episode {plain}; an env "
                           "that masks actions must give the mask from every reset.")
        returns, lengths = [0.0] * episodes, [0] * episodes
        success: list[Any] = [None] * episodes
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
                legal.append(legal_now[i])
            if layout.flat:
                flat = np.concatenate(rows).astype(np.float32)
            else:  # the parts of observations with images, each in its own dtype
                flat = layout.concat(rows)
            if perturb is not None:
                flat = perturb(flat)
            # [len(live), n] bool: every env gives masks, or none does (checked at the resets);
            # the mask only where the envs give one: a Policy of the user's need not take it.
            masks: dict[str, np.ndarray] = {} if not masked else {
                "action_mask": np.concatenate([m for m in legal if m is not None])}
            if states is None:
                actions = policy.act_flat(flat, deterministic, rng, **masks)
            else:
                actions, states[live] = policy.act_with_state(flat, states[live], starts[live],
                                                              deterministic, rng, **masks)
                starts[live] = False
            still = []
            for j, i in enumerate(live):
                try:
                    obs[i], reward, term, trunc, info = envs[i].step(actions[j])
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
                            starts[i] = True
                        except Exception as err:
                            raise failed(err, i, f"the reset after step {lengths[i]}") from err
                        game = info.get(GAME_INFO)  # (a game can end inside a reset)
                    done = game is not None
                    if done:
                        returns[i], lengths[i] = float(game["r"]), int(game["l"])
                if done and "is_success" in info:
                    success[i] = info["is_success"]
                if not done and lengths[i] >= caps[i]:  # an episode that never ends: cut
                    done = True
                    capped.append(i)
                if not done:  # the mask of the observation it acts on next
                    legal_now[i] = readers[i].read(obs[i], info, at(i, lengths[i]))
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
    if successes is not None:
        successes.extend(success)
    return returns, lengths


def summary(returns: Sequence[float], lengths: Sequence[int],
            successes: Sequence[Any] | None = None) -> dict[str, Any]:
    """Mean and std of the episodes' returns and lengths, and the episodes themselves; with
    ``successes`` where every episode reported one (``info["is_success"]``, Gymnasium's and
    SB3's key), also ``success_rate``."""
    out = {"return_mean": float(np.mean(returns)), "return_std": float(np.std(returns)),
           "length_mean": float(np.mean(lengths)), "length_std": float(np.std(lengths)),
           "returns": list(returns), "lengths": list(lengths)}
    if successes and all(s is not None for s in successes):
        out["success_rate"] = float(np.mean([bool(s) for s in successes]))
    return out
