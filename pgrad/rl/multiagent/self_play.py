"""Self-play in two-player games on agent rows: a pool of past snapshots, and the rollout where
the learner plays one seat of each copy against an opponent drawn for the game.

* :class:`SnapshotPool` keeps up to ``K`` flat weight vectors ``[P]`` of the policy (a ring:
  the newest replaces the oldest) with the update each was taken at, in ``tf.Variable`` s, so a
  checkpoint holds them and a resumed run draws the opponents it would have drawn.
* :class:`SelfPlayCollector` is the :class:`~pgrad.rl.multiagent.collector.RowsCollector` of a
  two-player game where, in each copy ``b``, the learner holds one seat and the opponent the
  other:

  - each rollout starts new games (every copy reset with a seed from the rollout's key), so a
    rollout depends on nothing but the key, the policy and the pool: checkpoints fall between
    rollouts and resuming continues exactly; a game still running at a rollout's end is cut
    there, its last decision bootstrapped from the value of the observation it waits on, as at
    any rollout's end;
  - seats alternate: in the rollout of update ``u`` the learner starts in seat ``(b + u) mod 2``
    of copy ``b``, and takes the other seat in each next game of the copy, so it trains as first
    and as second player;
  - each game's opponent is the uniform random legal player
    (:func:`~pgrad.rl.multiagent.opponents.random_legal`) with probability ``random_prob``;
    otherwise the latest policy (the learner's own sampled actions) with probability
    ``latest_prob`` (or while the pool is empty), else a snapshot drawn uniformly from the
    pool, acting through :class:`~pgrad.rl.multiagent.opponents.SnapshotPlayer` (sampled,
    masked to the legal actions); with probability ``tactics_prob`` it is the one-move-deep
    tactical player of a k-in-a-row game (:mod:`pgrad.rl.multiagent.tactics`: it takes a win on
    the board, else blocks one);
  - only the learner's rows enter the update: the opponent's rows are never live (masked out
    as a waiting row is, :mod:`pgrad.rl.multiagent.compact`), and only the learner's episodes
    are reported (``episodes.csv``: the learner's result, +1 a win, -1 a loss, 0 a draw in
    PettingZoo's classic games).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from pgrad.rl.collection.rollout import PolicyFn, Trajectory
from pgrad.rl.multiagent.collector import RowsCollector
from pgrad.rl.multiagent.opponents import SnapshotPlayer, random_legal
from pgrad.rl.multiagent.tactics import LineGame, line_game, tactics_player

__all__ = ["LATEST", "RANDOM", "TACTICS", "SelfPlayCollector", "SnapshotPool"]

#: Added to a rollout's key for the generator of its games' seeds, seats and opponents.
_GAMES_STREAM = 0x5E1F
#: :attr:`SelfPlayCollector.opponent` of a game against the latest policy / the random player /
#: the tactical player (a snapshot's is its index in the pool, >= 0).
LATEST, RANDOM, TACTICS = -1, -2, -3


class SnapshotPool:
    """Up to ``size`` snapshots ``[P]`` of a policy's flat weights (see the module docstring).

    Args:
      size: the most snapshots kept, ``K``.
      dim: the weights of one snapshot, ``P``.
      name: the variables' name prefix.
    """

    def __init__(self, size: int, dim: int, name: str = "pool"):
        if int(size) < 1:
            raise ValueError(f"{name}: a pool keeps at least 1 snapshot; got size {size}.")
        self.size, self.dim, self.name = int(size), int(dim), name
        self.weights = tf.Variable(tf.zeros([self.size, self.dim]), trainable=False,
                                   name=f"{name}_weights")  # [K, P] float32
        self.updates = tf.Variable(tf.fill([self.size], tf.constant(-1, tf.int64)),
                                   trainable=False, name=f"{name}_updates")  # [K] int64, -1 empty
        self.count = tf.Variable(0, dtype=tf.int64, trainable=False,
                                 name=f"{name}_count")  # snapshots added so far

    def add(self, flat: np.ndarray, update: int) -> None:
        """Keeps ``flat`` ``[P]``, taken after ``update`` updates, in place of the oldest."""
        flat = np.asarray(flat, np.float32)
        if flat.shape != (self.dim,):
            raise ValueError(f"{self.name}: a snapshot has {self.dim} weights; got shape "
                             f"{flat.shape}.")
        slot = int(self.count.numpy()) % self.size
        self.weights[slot].assign(flat)
        self.updates[slot].assign(int(update))
        self.count.assign_add(1)

    def last_update(self) -> int:
        """The update the newest snapshot was taken at; -1 while the pool is empty."""
        count = int(self.count.numpy())
        return -1 if count == 0 else int(self.updates.numpy()[(count - 1) % self.size])

    def snapshots(self) -> tuple[np.ndarray, np.ndarray]:
        """``(weights [M, P] float32, updates [M] int64)`` of the ``M <= K`` kept snapshots, in
        slot order (the order :class:`SelfPlayCollector` draws from)."""
        updates = self.updates.numpy()
        kept = updates >= 0
        return self.weights.numpy()[kept], updates[kept]

    def trackables(self) -> dict[str, tf.Variable]:
        """The variables a checkpoint holds."""
        return {f"{self.name}_weights": self.weights, f"{self.name}_updates": self.updates,
                f"{self.name}_count": self.count}


class SelfPlayCollector(RowsCollector):
    """The rollout of a two-player game against a pool of snapshots (module docstring).

    Args:
      envs: agent rows of a game of two agents (``metadata["agent_rows"] == 2``).
      name: the env's name in messages.
      player: acts the pool's snapshots (of the learner's network: its numpy mirror, or the
        network itself with the snapshot's weights for an encoded policy).
      obs_norm, reward_norm: as :class:`~pgrad.rl.collection.rollout.Collector` (observation
        normalisation is refused: a snapshot would act on today's statistics).
    """

    def __init__(self, envs: Any, name: str, player: SnapshotPlayer, obs_norm: Any = None,
                 reward_norm: Any = None):
        if obs_norm is not None:
            raise ValueError("self-play acts past snapshots on the observations as they are: "
                             "normalize_obs must be False.")
        super().__init__(envs, name, obs_norm, reward_norm)
        if self.n_agents != 2:
            agents = list(getattr(envs.unwrapped, "possible_agents", []))
            raise ValueError(f"self-play plays games of two agents; env {name!r} has "
                             f"{self.n_agents} ({', '.join(map(str, agents))}).")
        self.player = player
        B = self.num_games
        #: ``[B]`` the learner's seat in each copy's game (0: ``possible_agents[0]``).
        self.seat = np.arange(B) % 2
        #: ``[B]`` the pool index of each copy's opponent, or :data:`LATEST`, :data:`RANDOM`,
        #: :data:`TACTICS`.
        self.opponent = np.full(B, LATEST)
        self._learner = np.zeros(self.num_envs, bool)  # [2 B] the learner's rows
        self._pool = np.zeros((0, player.size), np.float32)  # [M, P] this rollout's snapshots
        self._latest_prob, self._random_prob, self._tactics_prob = 1.0, 0.0, 0.0
        self._game: LineGame | None = None  # the tactical player's board, found when first used
        self._rng = np.random.default_rng(0)
        self._seat_rows()

    @property
    def learner_rows(self) -> np.ndarray:
        """``[2 B]`` bool: the rows the learner plays in the current games."""
        return self._learner.copy()

    def _seat_rows(self) -> None:
        rows = 2 * np.arange(self.num_games)
        self._learner[:] = False
        self._learner[rows + self.seat] = True

    def _draw(self, games: np.ndarray) -> None:
        """New opponents for the copies ``games``."""
        latest = self._rng.random(len(games)) < self._latest_prob  # [G]
        M = len(self._pool)
        picks = self._rng.integers(max(M, 1), size=len(games))
        self.opponent[games] = np.where(latest | (M == 0), LATEST, picks)
        if self._random_prob > 0:  # drawn after, so runs without it draw what they drew
            random = self._rng.random(len(games)) < self._random_prob  # [G]
            self.opponent[games] = np.where(random, RANDOM, self.opponent[games])
        if self._tactics_prob > 0:  # among the games not against random: tactics_prob of all
            share = self._tactics_prob / max(1.0 - self._random_prob, 1e-12)
            tactics = self._rng.random(len(games)) < share  # [G]
            self.opponent[games] = np.where(tactics & (self.opponent[games] != RANDOM), TACTICS,
                                            self.opponent[games])

    def collect_games(self, policy_fn: PolicyFn, num_steps: int, key: list[int],
                      pool: np.ndarray, latest_prob: float, random_prob: float = 0.0,
                      tactics_prob: float = 0.0) -> tuple[Trajectory, list]:
        """One rollout of new games (module docstring).

        Args:
          policy_fn: the learner's rollout policy (acts on every row; the opponent's rows take
            a snapshot's actions instead where the game's opponent is one).
          num_steps: steps of each copy, ``T``.
          key: the rollout's key (``[seed, updates]``): the games' seeds, the seats and the
            opponents follow from it.
          pool: ``[M, P]`` the snapshots opponents are drawn from (``M`` may be 0).
          latest_prob: the probability a game's opponent is the latest policy, among the
            games not against the random player.
          random_prob: the probability a game's opponent is the uniform random legal player.
          tactics_prob: the probability a game's opponent is the tactical player
            (``random_prob + tactics_prob <= 1``).

        Returns:
          ``(Trajectory [T, 2 B] whose opponent rows are masked out, the learner's
          episodes)``.
        """
        self._rng = np.random.default_rng([*map(int, key), _GAMES_STREAM])
        self._pool = np.asarray(pool, np.float32).reshape(-1, self.player.size)
        self._latest_prob, self._random_prob = float(latest_prob), float(random_prob)
        self._tactics_prob = float(tactics_prob)
        if not 0.0 <= self._random_prob <= 1.0:
            raise ValueError(f"random_prob must be in [0, 1]; got {random_prob}.")
        if not 0.0 <= self._tactics_prob <= 1.0 - self._random_prob + 1e-9:
            raise ValueError(f"tactics_prob must be in [0, 1 - random_prob]; got "
                             f"{tactics_prob} with random_prob {random_prob}.")
        if self._tactics_prob > 0:
            self.tactics_game()
        self.reset(seed=int(self._rng.integers(2**31 - 1)))
        self.seat = (np.arange(self.num_games) + int(key[-1])) % 2
        self._seat_rows()
        self._draw(np.arange(self.num_games))
        return self.collect(self._with_opponents(policy_fn), num_steps)

    def tactics_game(self) -> LineGame:
        """The board the tactical player reads for this game.

        Raises:
          ValueError: it does not know the game (one line naming it).
        """
        if self._game is None:
            rows: Any = self.envs.unwrapped
            game = rows.games[0] if getattr(rows, "games", None) else None
            name = (getattr(game, "metadata", None) or {}).get("name", self.name)
            self._game = line_game(name, rows.obs_dim,
                                   int(getattr(self.envs.single_action_space, "n", 0)))
        return self._game

    def _with_opponents(self, policy_fn: PolicyFn) -> PolicyFn:
        """``policy_fn`` with the live opponent rows of snapshot games acted by the snapshot,
        those of games against the random or the tactical player by that player."""
        n_actions = int(getattr(self.envs.single_action_space, "n", 0))

        def act(obs, action_mask=None):
            acted = (policy_fn(obs) if action_mask is None
                     else policy_fn(obs, action_mask=action_mask))
            games = np.flatnonzero(self.opponent != LATEST)
            rows = 2 * games + 1 - self.seat[games]
            moving = self.live[rows]
            if not moving.any():
                return acted
            games, rows = games[moving], rows[moving]
            actions, env_actions = np.array(acted[0]), np.array(acted[1])
            for k in np.unique(self.opponent[games]):
                mine = rows[self.opponent[games] == k]
                mask = None if action_mask is None else action_mask[mine]
                if k == RANDOM:
                    chosen = random_legal(self._rng, n_actions)(obs[mine], mask)
                elif k == TACTICS:
                    chosen = tactics_player(self._rng, self.tactics_game())(obs[mine], mask)
                else:
                    chosen = self.player.act(self._pool[k], obs[mine], mask, self._rng)
                actions[mine] = chosen.astype(actions.dtype).reshape(actions[mine].shape)
                env_actions[mine] = chosen.astype(env_actions.dtype)
            return (actions, env_actions, *acted[2:])

        return act

    def record_step(self, obs, acted: tuple, action_mask, stepped: tuple, where: int,
                    check: bool):
        """:meth:`RowsCollector.record_step` with the opponent's rows not live and their
        episodes unreported; a copy whose game ended swaps seats and draws a new opponent."""
        learner = self._learner.copy()
        self.live = self.live & learner
        raw, rewards, term, trunc, info = stepped
        if "_episode" in info:
            info = {**info, "_episode": np.logical_and(info["_episode"], learner)}
        out = super().record_step(obs, acted, action_mask, (raw, rewards, term, trunc, info),
                                  where, check)
        ended = info.get("env_done")
        if ended is not None and ended.any():
            games = np.flatnonzero(ended[::2])
            self.seat[games] = 1 - self.seat[games]
            self._seat_rows()
            self._draw(games)
        return out
