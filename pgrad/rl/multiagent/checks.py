"""What a PettingZoo game must give at each step, checked: one
:class:`pgrad.rl.envs.vector.EnvError`
line naming the env, the copy, the agent and the step.

Checked: an agent that is not one of ``possible_agents``; a reward, termination or truncation
missing for an agent that was in the episode; a reward that is not a finite number; an action
mask of the wrong size, of values other than bools or 0/1 integers
(:func:`pgrad.rl.collection.masks.bool_values`), or that forbids every action; an action the mask
forbids
(refused before the game sees it); an agent whose observation or action space changed since the
start.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from pgrad.rl.collection.masks import bool_values
from pgrad.rl.envs.vector import EnvError
from pgrad.rl.multiagent.pettingzoo_env import MASK_KEY

__all__ = ["action_mask", "error", "known_agents", "legal", "same_spaces", "step_dicts"]


def error(name: str, copy: int, agent: Any, where: str, what: str) -> EnvError:
    """``env 'X' (copy b), agent 'a' at step t: what.``"""
    return EnvError(f"env {name!r} (copy {copy}), agent {agent!r} at {where}: {what}.")


def known_agents(name: str, copy: int, agents: Collection, index: Mapping, where: str) -> None:
    """Refuses an agent that is not one of the game's ``possible_agents`` (``index``)."""
    for agent in agents:
        if agent not in index:
            raise error(name, copy, agent, where,
                        f"is not one of possible_agents {list(index)}; the rows are fixed "
                        "at the start")


def step_dicts(name: str, copy: int, agents: Sequence, rewards: Mapping, terminated: Mapping,
               truncated: Mapping, where: str) -> None:
    """Every agent in the episode before a step has a finite reward and both flags."""
    for agent in agents:
        for what, given in (("reward", rewards), ("termination", terminated),
                            ("truncation", truncated)):
            if agent not in given:
                raise error(name, copy, agent, where,
                            f"the step gave no {what} for this agent (it gave "
                            f"{sorted(map(str, given))})")
        r = rewards[agent]
        try:
            finite = math.isfinite(r)
        except TypeError:
            raise error(name, copy, agent, where,
                        f"reward {r!r} is not a number") from None
        if not finite:
            raise error(name, copy, agent, where, f"reward is {r}")


def action_mask(name: str, copy: int, agent: Any, where: str, obs: Any, info: Any,
                from_obs: bool, sizes: tuple[int, ...] | None) -> np.ndarray:
    """The ``[k]`` bool action mask of an agent that acts next, checked.

    Args:
      obs / info: the agent's observation and info; the mask is ``obs["action_mask"]`` if
        ``from_obs``, else ``info["action_mask"]``.
      sizes: :func:`pgrad.rl.collection.masks.mask_sizes` of the action space (None: cannot be
      masked).
    """
    if sizes is None:
        raise error(name, copy, agent, where,
                    "gives an action mask, but its action space is not Discrete or "
                    "MultiDiscrete")
    source = obs if from_obs else info
    if not isinstance(source, Mapping) or MASK_KEY not in source:
        place = "observation" if from_obs else "info"
        raise error(name, copy, agent, where, f"its {place} has no {MASK_KEY!r}; a game that "
                    "masks actions must give the mask of every agent that acts")
    mask, why = bool_values(source[MASK_KEY])  # bools or 0/1 integers, never cast from floats
    if mask is None:
        raise error(name, copy, agent, where, f"action_mask {why}")
    width = int(sum(sizes))
    if mask.size != width:
        raise error(name, copy, agent, where, f"action_mask has shape {mask.shape}; the action "
                    f"space needs {width} values")
    mask = mask.reshape(width)
    starts = np.cumsum((0, *sizes[:-1]))
    if not np.logical_or.reduceat(mask, starts).all():
        raise error(name, copy, agent, where,
                    "action_mask forbids every action; at least one must be legal")
    return mask


def legal(name: str, copy: int, agent: Any, where: str, action: Any, mask: np.ndarray,
          sizes: tuple[int, ...] | None) -> None:
    """Refuses an action the agent's mask forbids (before the game sees it)."""
    if sizes is None:
        return
    a = np.asarray(action).reshape(-1).astype(np.int64)
    shown = np.asarray(action).tolist()
    offsets = np.cumsum((0, *sizes[:-1]))
    if a.size != len(sizes) or np.any(a < 0) or np.any(a >= np.asarray(sizes)):
        raise error(name, copy, agent, where, f"action {shown} is outside the action space")
    if not mask[offsets + a].all():
        raise error(name, copy, agent, where, f"action {shown} is illegal (legal: "
                    f"{np.flatnonzero(mask).tolist()}); it was not sent to the env")


def same_spaces(name: str, copy: int, game: Any, obs_space: gym.Space, action_space: gym.Space,
                where: str) -> None:
    """Every agent in the episode still observes and acts in the spaces it had at the start."""
    for agent in game.agents:
        for kind, space in (("observation", obs_space), ("action", action_space)):
            now = getattr(game, f"{kind}_space")(agent)
            if now != space:
                raise error(name, copy, agent, where,
                            f"its {kind} space changed from {space} to {now}")
