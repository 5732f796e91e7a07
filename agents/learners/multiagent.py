"""The ``ippo`` and ``mappo`` agents: the actor-critic agent on the agent rows of a PettingZoo game.

What they are (configs, defaults): :mod:`agents.algorithms.multiagent`. Here, what they change
in the actor-critic agent, and nothing else:

* the env: the PettingZoo game (a factory, an instance, ``"module:factory"``, or agent rows
  built already) becomes ``num_envs`` copies of agent rows (:func:`pgrad.rl.multiagent.
  make_agent_rows`; MAPPO's rows also observe the copy's state,
  :class:`pgrad.rl.multiagent.central.StateRowsVectorEnv`), collected by the
  :class:`~pgrad.rl.multiagent.collector.RowsCollector` (live steps first, dead ones masked);
* the update's config (:attr:`IPPO.rows_cfg`): ``num_envs`` rows, not copies, and minibatches
  of ``n_steps x rows / num_minibatches``; the agent's own :attr:`cfg` keeps the user's values
  (saved with the agent, and ``steps_per_update`` in steps of the game);
* MAPPO's network: the actor's MLP reads the row's own columns, the critic's MLP the state
  (and the own columns with ``critic_input="state_and_obs"``), each through the network
  builder's own-encoder hook (:class:`ColumnsMLP`), followed by one output layer each;
* IPPO's ``encoder="board_cnn"``: the same hook builds a
  :class:`~pgrad.rl.multiagent.board.BoardCNN` on the board columns of the rows (the
  game's 3-D observation ``Box``), shared by actor and critic unless ``share_encoder=False``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import keras
import numpy as np
import tensorflow as tf

from agents.algorithms.multiagent import BOARD_CNN, IPPOConfig, MAPPOConfig, rows_chain
from agents.base import ActorCriticAgent
from pgrad.rl import multiagent
from pgrad.rl.models.dense import mlp
from pgrad.rl.multiagent.board import BoardCNN, board_columns
from pgrad.rl.multiagent.central import StateRowsVectorEnv
from pgrad.rl.multiagent.games import game_source
from pgrad.rl.multiagent.statistics import AgentEpisodeStatistics

__all__ = ["IPPO", "MAPPO", "ColumnsMLP", "game_source"]  # game_source: re-exported


class ColumnsMLP(keras.layers.Layer):
    """``[N, D] -> [N, hidden[-1]]``: the MLP of the given columns of a row.

    Args:
      columns: ``[K]`` the columns it reads.
      hidden, activation, seed, ortho_init: as :func:`pgrad.rl.models.dense.mlp`.
    """

    def __init__(self, columns: np.ndarray, hidden: tuple, activation: str, seed: int,
                 ortho_init: bool, name: str):
        super().__init__(name=name)
        self.columns = [int(c) for c in columns]
        self.mlp = (mlp(len(self.columns), hidden, None, activation, name=f"{name}_mlp",
                        seed=seed, ortho_init=ortho_init) if hidden else None)

    def call(self, x: tf.Tensor) -> tf.Tensor:
        x = tf.gather(x, self.columns, axis=1)  # [N, K]
        return x if self.mlp is None else self.mlp(x)


class _ActorThenCritic:
    """The own-encoder hook of :func:`pgrad.rl.models.networks.actor_critic` with
    ``share_encoder=False``: called once for the actor's encoder, then once for the critic's."""

    __name__ = "mappo_columns"
    mappo_columns = True  # MAPPOConfig.validate takes it as the encoder

    def __init__(self, parts: list[tuple[np.ndarray, str]], cfg: Any, seed: int):
        self._parts, self._cfg, self._seed, self._calls = parts, cfg, seed, 0

    def __call__(self, space: gym.Space) -> ColumnsMLP:
        if self._calls >= len(self._parts):
            raise RuntimeError("mappo's encoders were asked for a third time; the network "
                               "builds one for the actor and one for the critic")
        columns, name = self._parts[self._calls]
        self._calls += 1
        return ColumnsMLP(columns, tuple(self._cfg.hidden), self._cfg.activation,
                          self._seed + 1000 * self._calls, bool(self._cfg.ortho_init), name)


class _BoardBuilder:
    """The own-encoder hook of :func:`pgrad.rl.models.networks.actor_critic` for
    ``encoder="board_cnn"``: a new :class:`BoardCNN` on the rows' board at each call (the actor's,
    then the critic's with ``share_encoder=False``)."""

    __name__ = BOARD_CNN

    def __init__(self, rows: Any, cfg: Any, seed: int, where: str):
        env = rows.unwrapped
        self._columns = board_columns(env.obs_space, int(rows.single_observation_space.shape[0]),
                                      where)
        self._cfg, self._seed, self._calls = cfg, seed, 0

    def __call__(self, space: gym.Space) -> BoardCNN:
        shape, board, others = self._columns
        self._calls += 1
        cfg = self._cfg
        name = BOARD_CNN if self._calls == 1 else f"critic_{BOARD_CNN}"
        return BoardCNN(shape, board, others, tuple(cfg.board_filters), tuple(cfg.hidden),
                        cfg.activation, self._seed + 1000 * self._calls, bool(cfg.ortho_init),
                        name)


class IPPO(ActorCriticAgent):
    """PPO on agent rows, parameters shared by all agents (:mod:`agents.algorithms.multiagent`).

    Args: as :class:`agents.base.ActorCriticAgent`; ``env_id`` a PettingZoo game's factory,
      instance or ``"module:factory"`` name, or agent rows (from :func:`pgrad.rl.multiagent.
      make_agent_rows`; ``num_envs`` then follows their copies).
    """

    Config: type = IPPOConfig
    name = "ippo"

    def __init__(self, cfg: IPPOConfig | str | None = None, env_id: Any = None, seed: int = 0,
                 transform: Any = None, *, verbose: int | None = None, **sb3: Any):
        if not isinstance(cfg, self.Config) or sb3:  # SB3's form: Cls("MlpPolicy", env, ...)
            from agents.catalog import sb3_names

            cfg, env_id, rest = sb3_names.constructor(type(self), cfg, env_id, sb3)
            seed = rest.get("seed", seed)
            if rest.get("tensorboard_log") is not None:
                self.tensorboard_log = str(rest["tensorboard_log"])
        if not isinstance(cfg, self.Config):
            raise TypeError(f"{type(self).__name__} needs a {self.Config.__qualname__}; "
                            f"got {type(cfg).__name__}.")
        user: Any = cfg
        user.validate()
        self.seed = int(seed)  # the critic's and actor's MLPs are seeded from it
        rows, source, why, user = self._make_rows(user, env_id)
        try:
            rows_cfg = self._rows_config(user, rows)
        except Exception:
            rows.close()
            raise
        super().__init__(rows_cfg, env_id=rows, seed=seed, transform=transform,
                         verbose=verbose)
        #: The config the update runs on (``num_envs`` rows); :attr:`cfg` is the user's.
        self.rows_cfg, self.cfg = rows_cfg, user
        self.env_id, self.env_unbuildable = source, why
        self.env_name = self.collector.name = str(source if isinstance(source, str)
                                                   else rows.unwrapped.name)
        multiagent.use_agent_rows(self)
        #: The self-play part (``cfg.self_play``: :mod:`agents.learners.self_play`), or None.
        self.self_play = self._make_self_play()

    # -- the rows --------------------------------------------------------------------------------

    def _build_rows(self, game: Any, cfg: Any) -> Any:
        return multiagent.make_agent_rows(game, cfg.num_envs, agent_id=cfg.agent_id)

    def _make_rows(self, cfg: Any, env_id: Any) -> tuple:
        """``(rows, source, why not rebuildable, cfg)`` (``cfg.num_envs`` set to the copies of
        rows built already)."""
        if multiagent.is_agent_rows(env_id):
            rows: Any = (env_id if isinstance(env_id, AgentEpisodeStatistics)
                         else AgentEpisodeStatistics(env_id))
            copies = int(rows.unwrapped.num_games)
            if cfg.num_envs not in (copies, rows.num_envs):
                raise ValueError(f"{self.name}: the agent rows have {copies} copies; num_envs="
                                 f"{cfg.num_envs} differs.")
            self._check_rows(rows.unwrapped, cfg)
            why: str | None = ("agent rows built already cannot be built again: pass the "
                               "game's factory or 'module:factory' name instead")
            return rows, None, why, dataclasses.replace(cfg, num_envs=copies)
        game, source, why = game_source(env_id, self.name)
        return self._build_rows(game, cfg), source, why, cfg

    def _check_rows(self, rows: Any, cfg: IPPOConfig) -> None:
        if bool(rows.agent_id) != bool(cfg.agent_id):
            raise ValueError(f"{self.name}: agent_id={cfg.agent_id} but the agent rows were "
                             f"built with agent_id={rows.agent_id}.")

    def _rows_config(self, cfg: Any, rows: Any) -> Any:
        """The update's config: ``num_envs`` rows, minibatches of rows."""
        batch = int(cfg.n_steps) * rows.num_envs
        if batch % int(cfg.num_minibatches):
            raise ValueError(f"num_minibatches {cfg.num_minibatches} must divide the "
                             f"{batch} rows of an update (n_steps {cfg.n_steps} x "
                             f"{rows.unwrapped.n_agents} agents x {cfg.num_envs} copies).")
        size = batch // int(cfg.num_minibatches)
        out = dataclasses.replace(cfg, num_envs=rows.num_envs,
                                  minibatch_size=0 if size == batch else size)
        if isinstance(cfg.encoder, str) and cfg.encoder == BOARD_CNN:
            where = f"env {getattr(rows.unwrapped, 'name', self.name)!r}"
            out = dataclasses.replace(out, encoder=_BoardBuilder(rows, cfg, self.seed + 7000,
                                                                 where))
        setattr(out, "counts_rows", True)  # noqa: B010 (read by IPPOConfig.validate)
        return out

    # -- evaluation ------------------------------------------------------------------------------

    def evaluate_team(self, episodes: int = 10, deterministic: bool = True,
                      seed: int | None = None) -> dict[str, Any]:
        """The team's return over ``episodes`` fresh episodes of the game (one per copy of new
        agent rows; :func:`pgrad.rl.multiagent.evaluate.team_episodes`): ``return_mean`` is
        the mean over episodes of the mean over agents of each agent's return. ``seed``: the
        first episode's (default: pgrad's evaluation seed, the agent's seed + 10,000)."""
        from pgrad.rl.evaluation.evaluate_policy import eval_seed
        from pgrad.rl.multiagent.evaluate import team_episodes

        if self.env_id is None:
            raise ValueError(f"{self.name}: {self.env_unbuildable}.")
        if not 1 <= int(episodes) <= 10_000:
            raise ValueError(f"episodes must be in [1, 10000]; got {episodes}.")
        game, _, _ = game_source(self.env_id, self.name)
        rows = self._build_rows(game, dataclasses.replace(self.cfg, num_envs=int(episodes)))
        first = eval_seed(self.seed) if seed is None else int(seed)
        try:
            result = team_episodes(lambda obs, masks: self.act(obs, deterministic, masks), rows,
                                   first)
        finally:
            rows.close()
        if self.self_play is not None:  # the learner against a random and an earlier policy
            from agents.learners.self_play import evaluation_rows

            result.update(self.self_play.evaluate(self, episodes, deterministic, first,
                                                  evaluation_rows(self)))
        return result

    # -- self_play: the learner against a pool of past policies (agents/learners/self_play.py) --

    def _make_self_play(self) -> Any:
        if not getattr(self.cfg, "self_play", False):
            return None
        from agents.learners.self_play import SelfPlay

        try:
            return SelfPlay(self)
        except Exception:
            self.collector.close()
            raise

    def _collect(self, policy_fn: Any, updates: int = 0) -> tuple:
        if getattr(self, "self_play", None) is not None:
            return self.self_play.collect(self, policy_fn, updates)
        return super()._collect(policy_fn, updates)

    # -- what the declaration would give a declared agent ------------------------------------------

    def default_transform(self) -> Any:
        """PPO's chain: ``chain(clip_ratio("clip_range"), mean_steps())``; with
        ``credit="coma"`` the clip on COMA's advantage (:func:`~agents.algorithms.multiagent.
        rows_chain`)."""
        cfg: Any = self.cfg
        return rows_chain(cfg)

    # -- credit="coma": COMA's critic beside the update (agents/learners/counterfactual.py) -------

    def make_targets(self) -> Any:
        """GAE(lambda), through MAPPO's value normalisation with ``value_norm``
        (:class:`agents.update.value_norm.ValueNormTargets`: its statistics count the live
        steps, the mask :meth:`_update_args` hands it); with ``credit="coma"`` also the
        rollout's Q values, the acting policy's probabilities and the taken actions for the
        chain (:class:`CounterfactualCredit`)."""
        cfg: Any = self.cfg  # the update's: num_envs counts rows
        if getattr(cfg, "credit", "gae") != "coma" and getattr(cfg, "value_norm", False):
            from agents.update.value_norm import ValueNormTargets
            from pgrad.rl.observations.normalize import ValueNormalizer

            live = tf.Variable(tf.ones([int(cfg.n_steps), int(cfg.num_envs)]),
                               trainable=False, name="value_norm_live")
            return ValueNormTargets(cfg.gamma, cfg.gae_lambda, ValueNormalizer(), live)
        if getattr(cfg, "credit", "gae") != "coma":
            return super().make_targets()
        from agents.learners.counterfactual import CounterfactualCredit

        self.credit = CounterfactualCredit(self)
        return self.credit.targets

    def _update_on(self, traj: Any, updates: int, base: int, taken: int,
                   recurrent: tuple | None = None, fixed_shape: bool = True) -> dict[str, Any]:
        credit = getattr(self, "credit", None)
        extra = {} if credit is None else credit.prepare(self, traj, updates)
        return {**super()._update_on(traj, updates, base, taken, recurrent, fixed_shape),
                **extra}

    def _update_args(self, traj: Any, updates: int, base: int, taken: int,
                     recurrent: tuple | None = None, host: bool = False) -> tuple:
        live = getattr(self.update_targets, "live", None)
        if live is not None:  # value_norm: the rollout's live steps enter its statistics
            live.assign(np.ones(live.shape, np.float32) if traj.mask is None
                        else np.asarray(traj.mask, np.float32))
        return super()._update_args(traj, updates, base, taken, recurrent, host)

    def trackables(self) -> dict[str, Any]:
        credit = getattr(self, "credit", None)
        play = getattr(self, "self_play", None)
        return {**super().trackables(), **({} if credit is None else credit.critic.trackables()),
                **({} if play is None else play.trackables())}

    def steps_per_update(self) -> int:
        """Env steps per update, in steps of the game: ``n_steps x num_envs`` copies."""
        return int(self.cfg.n_steps) * int(self.cfg.num_envs)


class MAPPO(IPPO):
    """IPPO with a centralised critic reading the copy's global state (module docstring)."""

    Config: type = MAPPOConfig
    name = "mappo"

    def _build_rows(self, game: Any, cfg: Any) -> Any:
        return AgentEpisodeStatistics(StateRowsVectorEnv(game, cfg.num_envs,
                                                         agent_id=cfg.agent_id))

    def _check_rows(self, rows: Any, cfg: Any) -> None:
        super()._check_rows(rows, cfg)
        if not isinstance(rows, StateRowsVectorEnv):
            raise ValueError(f"{self.name}'s critic reads the state: build its rows with "
                             "pgrad.rl.multiagent.central.StateRowsVectorEnv, or pass the game.")

    def _rows_config(self, cfg: Any, rows: Any) -> Any:
        rows_cfg = super()._rows_config(cfg, rows)
        env = rows.unwrapped
        own = env.own_columns
        if cfg.critic_input == "state":  # the state, and the one-hot with agent_id
            critic = np.concatenate([own[env.obs_dim:], env.state_columns])
        else:
            critic = np.arange(env.own_dim + env.state_dim)
        builder = _ActorThenCritic([(own, "actor_columns"), (critic, "critic_columns")],
                                   cfg, seed=self.seed + 7000)
        out = dataclasses.replace(rows_cfg, encoder=builder, share_encoder=False,
                                  shared_trunk=False)
        setattr(out, "counts_rows", True)  # noqa: B010
        return out

    @property
    def critic_columns(self) -> list[int]:
        """The row columns the critic reads."""
        encoder: Any = self.net.critic_encoder
        return list(encoder.own.columns)

    @property
    def actor_columns(self) -> list[int]:
        """The row columns the actor reads."""
        encoder: Any = self.net.encoder
        return list(encoder.own.columns)
