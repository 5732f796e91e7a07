"""B copies of a PettingZoo game as one Gymnasium ``VectorEnv`` of ``n_agents x B`` rows.

Each row is one agent's view of one copy of the game; rows are ordered ``[env, agent]``: row
``b * n + i`` is agent ``possible_agents[i]`` of copy ``b``. So a rollout of ``T`` steps is a
``[T, n B]`` trajectory the engine takes as it takes any other, and one policy acts for every
agent (shared parameters).

Per row and step:

* **observation** ``[d (+ n)]`` float32: the agent's observation flattened (the
  ``"observation"`` part of PettingZoo's ``{"observation", "action_mask"}`` dicts), then, with
  ``agent_id=True``, the agent's index one-hot. A row whose agent has left the episode observes
  zeros (and its one-hot).
* **live** (``info["live"]`` ``[n B]`` bool, at the returned observations): whether the row's
  agent acts at the next step -- it is in the episode and, in a turn-based game, it is its
  turn. The action of a row that is not live is never sent to the game; such a row belongs to
  no loss (:mod:`pgrad.rl.multiagent.compact` drops it from the batch).
* **action mask** (``info["action_mask"]`` ``[n B, k]`` bool, where :mod:`pgrad.rl.collection.masks`
  reads it): the ``action_mask`` of the agent's observation or info; all true on rows that are
  not live (their action is ignored). An action a live row's mask forbids is refused before the
  game sees it.
* **reward / terminated / truncated**: the agent's; after an agent's episode ended and until its
  copy resets, its row has reward 0 and neither flag.
* **reset**: a copy resets in the step where its last agent is done (Gymnasium's ``SAME_STEP``
  autoreset, as :class:`pgrad.rl.collection.rollout.Collector` expects): every done row's last
  observation
  is in ``info["final_obs"]``, and ``info["env_done"]`` ``[n B]`` marks the rows of the copies
  that reset.
* **state** (``global_state=True``): ``info["state"]`` ``[n B, S]`` float32, the copy's
  ``state()`` (or, for a game without one, its agents' flat observations end to end), the
  same on each of its rows: the input of a centralised critic.

A game that gives something unusable raises :class:`pgrad.rl.envs.vector.EnvError`, one line naming
the
env, the copy, the agent and the step (:mod:`pgrad.rl.multiagent.checks`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from pgrad.rl.collection.masks import mask_sizes
from pgrad.rl.multiagent import checks
from pgrad.rl.multiagent.pettingzoo_env import (
    MASK_KEY,
    OBS_KEY,
    acting_agents,
    as_parallel,
    is_pettingzoo,
    observed_space,
    shared_spaces,
)

__all__ = ["AgentRowsVectorEnv"]


def _flat_space(space: gym.Space) -> gym.spaces.Box:
    flat = gym.spaces.flatten_space(space)
    if not isinstance(flat, gym.spaces.Box):
        raise ValueError(f"agent rows need observations that flatten to a Box; got {space}.")
    return flat


class AgentRowsVectorEnv(gym.vector.VectorEnv):
    """``B`` copies of a PettingZoo game as ``n_agents x B`` rows (see the module docstring).

    Args:
      env_fn: a callable returning a PettingZoo ``ParallelEnv`` or ``AECEnv`` (called ``num_envs``
        times), or one such env (then ``num_envs`` must be 1).
      num_envs: copies of the game, ``B``.
      agent_id: append each agent's index one-hot to its observation.
      global_state: put each copy's global state in ``info["state"]``.
      name: the env's name in error messages (default: the game's ``metadata["name"]``).

    Raises:
      TypeError: not a PettingZoo env; ValueError: agents with different spaces (one line
        naming them), observations that do not flatten to a Box.
    """

    def __init__(self, env_fn: Callable[[], Any] | Any, num_envs: int = 1, *,
                 agent_id: bool = False, global_state: bool = False, name: str | None = None):
        if int(num_envs) < 1:
            raise ValueError(f"num_envs must be >= 1; got {num_envs}.")
        if not callable(env_fn) or is_pettingzoo(env_fn):
            if int(num_envs) != 1:
                raise ValueError(f"one env instance is one copy, but num_envs={num_envs}: pass "
                                 "a factory to get several.")
            made = [env_fn]
        else:
            made = [env_fn() for _ in range(int(num_envs))]
        self.games = [as_parallel(g) for g in made]
        first = self.games[0]
        self.name = name or str(first.metadata.get("name") or type(first).__name__)
        self.possible_agents = list(first.possible_agents)
        for b, game in enumerate(self.games[1:], 1):
            if list(game.possible_agents) != self.possible_agents:
                raise ValueError(f"env {self.name!r}: copy {b} has agents "
                                 f"{list(game.possible_agents)}, copy 0 {self.possible_agents}.")
        self.n_agents = n = len(self.possible_agents)
        self.num_games = len(self.games)
        self.num_envs = n * self.num_games
        self.agent_index = {a: i for i, a in enumerate(self.possible_agents)}
        obs_space, act_space = shared_spaces(first, self.name)
        self.agent_obs_space, self.agent_action_space = obs_space, act_space
        self.obs_space, self.mask_in_obs = observed_space(obs_space)
        flat = _flat_space(self.obs_space)
        self.obs_dim = int(flat.shape[0])
        self.agent_id = bool(agent_id)
        low, high = flat.low.astype(np.float32), flat.high.astype(np.float32)
        if self.agent_id:
            low, high = np.append(low, np.zeros(n, np.float32)), np.append(high, np.ones(n))
        self.single_observation_space = gym.spaces.Box(low, high.astype(np.float32),
                                                       dtype=np.float32)
        self.single_action_space = act_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space,
                                                              self.num_envs)
        self.action_space = gym.vector.utils.batch_space(act_space, self.num_envs)
        self.metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP,
                         "agent_rows": n, "render_modes": []}
        self.global_state = bool(global_state)
        self._mask_sizes = mask_sizes(act_space)
        #: Whether the game gives action masks (decided at the first reset: an observation key
        #: says so at once; else an ``action_mask`` in the first acting agent's info).
        self.masked: bool | None = True if self.mask_in_obs else None
        R = self.num_envs
        self._obs = np.zeros((R, self.obs_dim + n * self.agent_id), np.float32)
        if self.agent_id:
            self._obs[:, self.obs_dim:] = np.tile(np.eye(n, dtype=np.float32), (self.num_games, 1))
        self._live = np.zeros(R, bool)
        width = 0 if self._mask_sizes is None else int(sum(self._mask_sizes))
        self._mask = np.ones((R, width), bool)
        self._state: np.ndarray | None = None
        self._steps = 0  # vector steps since construction (names the step in errors)

    # -- rows -------------------------------------------------------------------------------------

    @property
    def live(self) -> np.ndarray:
        """``[n B]`` bool: the rows whose agent acts at the next step (a copy)."""
        return self._live.copy()

    def row(self, copy: int, agent: Any) -> int:
        """The row of ``agent`` in copy ``copy``."""
        return copy * self.n_agents + self.agent_index[agent]

    def _flat(self, x: Any, b: int, agent: Any, where: str) -> np.ndarray:
        """One agent's observation as ``[d]`` float32 (its mask part dropped)."""
        if self.mask_in_obs:
            if not isinstance(x, dict) or OBS_KEY not in x:
                raise checks.error(self.name, b, agent, where,
                                   f"gave an observation without the {OBS_KEY!r} key its "
                                   f"space {self.agent_obs_space} has")
            x = x[OBS_KEY]
        if isinstance(self.obs_space, gym.spaces.Box):
            out = np.asarray(x, np.float32).reshape(-1)
        else:
            out = np.asarray(gym.spaces.flatten(self.obs_space, x), np.float32)
        if out.shape != (self.obs_dim,):
            raise checks.error(self.name, b, agent, where,
                               f"gave an observation of shape {np.shape(x)}; its space is "
                               f"{self.obs_space}")
        return out

    def _load(self, b: int, game: Any, obs: dict, infos: dict, where: str) -> None:
        """Rows of copy ``b`` from the observations and infos the game just returned."""
        n, d = self.n_agents, self.obs_dim
        acting = set(acting_agents(game))
        present = set(game.agents)
        checks.known_agents(self.name, b, present | acting, self.agent_index, where)
        if self.masked is None and acting:  # decided once, from the first acting agent's info
            a = min(acting, key=lambda x: self.agent_index[x])
            self.masked = isinstance(infos.get(a), dict) and MASK_KEY in infos[a]
        for i, agent in enumerate(self.possible_agents):
            r = b * n + i
            live = agent in acting
            if agent in present and agent in obs:
                self._obs[r, :d] = self._flat(obs[agent], b, agent, where)
            elif agent in present:
                raise checks.error(self.name, b, agent, where,
                                   "gave no observation for an agent still in the episode")
            else:
                self._obs[r, :d] = 0.0
            self._live[r] = live
            if self.masked:
                self._mask[r] = (checks.action_mask(self.name, b, agent, where, obs[agent],
                                                    infos.get(agent), self.mask_in_obs,
                                                    self._mask_sizes)
                                 if live else True)
        if self.global_state:
            self._load_state(b, game, present)

    def _load_state(self, b: int, game: Any, present: set) -> None:
        n = self.n_agents
        rows = slice(b * n, (b + 1) * n)
        try:
            state = np.asarray(game.state(), np.float32).reshape(-1)
        except (AttributeError, NotImplementedError):  # no state(): the joint observation
            joint = self._obs[rows, : self.obs_dim].copy()
            state = joint.reshape(-1)
        if self._state is None:
            self._state = np.zeros((self.num_envs, state.size), np.float32)
        self._state[rows] = state

    def _info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"live": self._live.copy()}
        if self.masked:
            info[MASK_KEY] = self._mask.copy()
            info["_" + MASK_KEY] = np.ones(self.num_envs, bool)
        if self.global_state and self._state is not None:
            info["state"] = self._state.copy()
        return info

    # -- the VectorEnv interface ---------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        """Resets every copy (copy ``b`` with ``seed + b``). Returns ``([n B, D] observations,
        info)``."""
        where = f"reset (step {self._steps})"
        for b, game in enumerate(self.games):
            obs, infos = game.reset(seed=None if seed is None else int(seed) + b,
                                    options=options)
            checks.same_spaces(self.name, b, game, self.agent_obs_space,
                               self.agent_action_space, where)
            self._load(b, game, obs, infos, where)
        return self._obs.copy(), self._info()

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                          dict[str, Any]]:
        """One step of every copy: each live row's action goes to its agent."""
        self._steps += 1
        where = f"step {self._steps}"
        R, n = self.num_envs, self.n_agents
        actions = np.asarray(actions)
        if actions.shape[:1] != (R,):
            raise ValueError(f"env {self.name!r} has {R} rows ({n} agents x {self.num_games} "
                             f"copies); got actions of shape {actions.shape}.")
        rewards = np.zeros(R, np.float64)
        term, trunc = np.zeros(R, bool), np.zeros(R, bool)
        env_done = np.zeros(R, bool)
        final_obs = np.empty(R, object)
        discrete = isinstance(self.single_action_space, gym.spaces.Discrete)
        for b, game in enumerate(self.games):
            present = list(game.agents)
            act = {}
            for agent in acting_agents(game):
                r = b * n + self.agent_index[agent]
                a = actions[r]
                if self.masked:
                    checks.legal(self.name, b, agent, where, a, self._mask[r], self._mask_sizes)
                act[agent] = int(a) if discrete else a
            obs, rew, te, tr, infos = game.step(act)
            checks.step_dicts(self.name, b, present, rew, te, tr, where)
            for agent in present:
                r = b * n + self.agent_index[agent]
                rewards[r], term[r], trunc[r] = rew[agent], te[agent], tr[agent]
                if te[agent] or tr[agent]:
                    last = self._obs[r].copy()
                    last[: self.obs_dim] = (self._flat(obs[agent], b, agent, where)
                                            if agent in obs else 0.0)
                    final_obs[r] = last
            if not game.agents:  # the episode is over: the SAME_STEP reset
                rows = slice(b * n, (b + 1) * n)
                for agent in present:  # every agent present at the end is done now
                    r = b * n + self.agent_index[agent]
                    if not (term[r] or trunc[r]):
                        trunc[r] = True
                        final_obs[r] = self._obs[r].copy()
                env_done[rows] = True
                obs, infos = game.reset(options=None)
                checks.same_spaces(self.name, b, game, self.agent_obs_space,
                                   self.agent_action_space, where)
            self._load(b, game, obs, infos, where)
        info = self._info()
        done = term | trunc
        if done.any():
            info["final_obs"], info["_final_obs"] = final_obs, done
            info["env_done"] = env_done
        return self._obs.copy(), rewards, term, trunc, info

    def close_extras(self, **kwargs: Any) -> None:
        for game in self.games:
            game.close()
