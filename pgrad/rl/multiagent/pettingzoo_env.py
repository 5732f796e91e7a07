"""PettingZoo envs as parallel games: which objects are PettingZoo envs, and the one interface
the agent rows step (:class:`pgrad.rl.multiagent.rows.AgentRowsVectorEnv`).

A PettingZoo ``ParallelEnv`` is used as it is: every agent in ``env.agents`` acts at every
step. An ``AECEnv`` whose metadata says ``is_parallelizable`` (MPE's) goes through PettingZoo's
own ``aec_to_parallel``. Any other ``AECEnv`` -- a board game, where one agent moves per turn --
becomes a :class:`TurnBasedParallelEnv`: a parallel game whose ``acting_agents`` is the one
agent to move, while the others are present (they observe and receive rewards) but wait.

The rows read ``acting_agents`` where a game has it and ``agents`` otherwise: in a parallel env
every present agent acts.

:func:`shared_spaces` checks that every agent observes and acts in the same spaces (one policy
over all rows needs them); the error names the agents whose spaces differ.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from pgrad.rl.envs.vector import EnvError

__all__ = ["TurnBasedParallelEnv", "acting_agents", "as_parallel", "is_pettingzoo",
           "observed_space", "shared_spaces"]

#: A PettingZoo observation that carries its own action mask: ``{"observation", "action_mask"}``.
OBS_KEY, MASK_KEY = "observation", "action_mask"


def _pettingzoo_classes() -> tuple[type, ...]:
    try:
        from pettingzoo.utils.env import AECEnv, ParallelEnv
    except ImportError:  # without PettingZoo nothing is a PettingZoo env
        return ()
    return (AECEnv, ParallelEnv)


def is_pettingzoo(env: Any) -> bool:
    """Whether ``env`` is a PettingZoo env (``AECEnv`` or ``ParallelEnv``, wrappers included)."""
    classes = _pettingzoo_classes()
    return bool(classes) and isinstance(env, classes)


def _is_parallel(env: Any) -> bool:
    from pettingzoo.utils.env import ParallelEnv

    return isinstance(env, ParallelEnv)


def as_parallel(env: Any) -> Any:
    """``env`` as a parallel game the agent rows can step.

    Args:
      env: a PettingZoo ``ParallelEnv`` (returned as it is), an ``AECEnv`` with
        ``metadata["is_parallelizable"]`` (through ``pettingzoo.utils.conversions.
        aec_to_parallel``) or any other ``AECEnv`` (a :class:`TurnBasedParallelEnv`: one agent
        acts per step).

    Raises:
      TypeError: ``env`` is not a PettingZoo env (a Gymnasium env goes to the ordinary
        single-agent rollout instead).
    """
    if not is_pettingzoo(env):
        kind = ("a Gymnasium env: train it by its id or factory as a single agent"
                if isinstance(env, (gym.Env, gym.vector.VectorEnv)) else
                f"a {type(env).__name__}")
        raise TypeError(f"agent rows need a PettingZoo ParallelEnv or AECEnv; got {kind}.")
    if _is_parallel(env):
        return env
    if env.metadata.get("is_parallelizable", False):
        from pettingzoo.utils.conversions import aec_to_parallel

        return aec_to_parallel(env)
    return TurnBasedParallelEnv(env)


def acting_agents(game: Any) -> list:
    """The agents whose actions the game's next ``step`` uses (all present ones in a parallel
    env; the one to move in a :class:`TurnBasedParallelEnv`)."""
    acting = getattr(game, "acting_agents", None)
    return list(game.agents if acting is None else acting)


def observed_space(space: gym.Space) -> tuple[gym.Space, bool]:
    """``(what the policy observes, whether the observation carries an action mask)``: the
    ``"observation"`` sub-space of PettingZoo's ``{"observation", "action_mask"}`` dicts, else
    the space itself."""
    if isinstance(space, gym.spaces.Dict) and MASK_KEY in space.spaces:
        if OBS_KEY not in space.spaces:
            raise ValueError(f"an observation space with an {MASK_KEY!r} key needs an "
                             f"{OBS_KEY!r} key beside it (PettingZoo's convention); got {space}.")
        return space.spaces[OBS_KEY], True
    return space, False


def shared_spaces(game: Any, name: str) -> tuple[gym.Space, gym.Space]:
    """``(observation space, action space)`` every possible agent of ``game`` shares.

    Raises:
      ValueError: agents observe or act in different spaces (one line naming them): one policy
        over all the agents' rows needs equal spaces.
    """
    agents = list(game.possible_agents)
    if not agents:
        raise ValueError(f"env {name!r} has no possible_agents.")
    for kind in ("observation", "action"):
        spaces = [getattr(game, f"{kind}_space")(a) for a in agents]
        groups: list[tuple[gym.Space, list]] = []
        for agent, space in zip(agents, spaces):
            for seen, members in groups:
                if seen == space:
                    members.append(agent)
                    break
            else:
                groups.append((space, [agent]))
        if len(groups) > 1:
            described = "; ".join(f"{', '.join(map(str, members))}: {space}"
                                  for space, members in groups)
            raise ValueError(f"env {name!r}: agents have different {kind} spaces ({described}); "
                             "one shared policy needs equal spaces across agents.")
    return game.observation_space(agents[0]), game.action_space(agents[0])


class TurnBasedParallelEnv:
    """An AEC game where one agent acts at a time, stepped as a parallel game.

    ``agents`` are the agents still in the episode; ``acting_agents`` is the one to move. A
    ``step(actions)`` uses only the mover's action (the others' are ignored) and returns, for
    every agent present before the step, its observation, the reward it received during the step
    (its ``_cumulative_rewards`` change: the AEC env accumulates the rewards of the moves made
    while an agent waits), and whether its episode ended. Agents that ended are stepped out with
    ``None`` (the AEC protocol) before the next agent to move is read.

    Args:
      env: a PettingZoo ``AECEnv``.
    """

    def __init__(self, env: Any):
        self.aec_env = env
        self.possible_agents = list(env.possible_agents)
        self.metadata = dict(getattr(env, "metadata", {}))
        self.agents: list = []

    def observation_space(self, agent: Any) -> gym.Space:
        return self.aec_env.observation_space(agent)

    def action_space(self, agent: Any) -> gym.Space:
        return self.aec_env.action_space(agent)

    @property
    def unwrapped(self) -> Any:
        return self.aec_env.unwrapped

    @property
    def acting_agents(self) -> list:
        """``[agent]`` to move, or ``[]`` once the episode is over."""
        env = self.aec_env
        return [env.agent_selection] if env.agents else []

    def state(self) -> np.ndarray:
        return self.aec_env.state()

    def _cumulative(self) -> dict:
        env = self.aec_env
        got = getattr(env, "_cumulative_rewards", None)
        return dict(env.rewards if got is None else got)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        env = self.aec_env
        env.reset(seed=seed, options=options)
        self._drop_ended()
        self.agents = list(env.agents)
        return {a: env.observe(a) for a in self.agents}, {a: env.infos.get(a, {})
                                                         for a in self.agents}

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        env = self.aec_env
        present = list(env.agents)
        if not present:
            raise RuntimeError("step after the episode ended; reset first.")
        mover = env.agent_selection
        before = self._cumulative()
        env.step(actions[mover])
        after = self._cumulative()
        # the mover's accumulator was zeroed when it moved: what it holds now is this step's
        rewards = {a: after[a] - (0.0 if a == mover else before[a])
                   for a in present if a in after and (a == mover or a in before)}
        obs = {a: env.observe(a) for a in present}
        terms = {a: bool(env.terminations[a]) for a in present if a in env.terminations}
        truncs = {a: bool(env.truncations[a]) for a in present if a in env.truncations}
        infos = {a: env.infos.get(a, {}) for a in present}
        self._drop_ended()
        self.agents = list(env.agents)
        return obs, rewards, terms, truncs, infos

    def _drop_ended(self) -> None:
        """Steps out (``None``, the AEC protocol) the agents whose episode ended, while one of
        them is to move."""
        env = self.aec_env
        while env.agents and (env.terminations[env.agent_selection]
                              or env.truncations[env.agent_selection]):
            env.step(None)

    def close(self) -> None:
        self.aec_env.close()


def check_agents(game: Any, name: str, where: str) -> None:
    """Refuses an agent that is not one of ``game.possible_agents`` (rows are fixed at start)."""
    known = set(game.possible_agents)
    for agent in game.agents:
        if agent not in known:
            raise EnvError(f"env {name!r}: agent {agent!r} appeared at {where} but is not one "
                           f"of possible_agents {list(game.possible_agents)}.")
