"""A small task where most actions are illegal at every step: with a mask, or with a penalty.

:class:`OffersEnv`: each step ``offered`` of ``n`` items are on offer (a fresh random subset),
and the agent picks one. Item ``i`` is worth ``(i + 1) / n``; picking an item that is not on
offer is illegal: reward -1, and the episode goes on. An episode is ``horizon`` picks. The
observation is which items are on offer (``n`` 0/1 values) and the fraction of the episode
gone. The best policy picks the most valuable item on offer: ``horizon * E[max]`` (16.5 with
the defaults: 20 picks, 3 of 10 items on offer); picking uniformly among the legal items gets
11.0, uniformly among all items -10.7.

The same task comes in two registered ids, which differ only in whether the env tells the
agent what is legal:

* ``MaskedOffers-v0``: ``info["action_mask"]`` from ``reset`` and every ``step`` (Gymnasium's
  convention): a masked policy never picks an illegal item.
* ``PenaltyOffers-v0``: no mask; the agent learns from the -1 rewards which picks are illegal.

``OffersEnv(mask="observation")`` gives the mask as a Dict observation key instead
(PettingZoo's convention), and ``ActionMasker(OffersEnv(mask=None), OffersEnv.legal_actions)``
as an ``action_masks()`` method (sb3-contrib's); see :mod:`pgrad.rl.collection.masks`. The ids are
registered on first use (:func:`pgrad.rl.envs.vector.ensure_registered`).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

#: id -> the ``mask`` option of its OffersEnv
IDS = {"MaskedOffers-v0": "info", "PenaltyOffers-v0": None}
MASK_OPTIONS = (None, "info", "observation")
ILLEGAL_REWARD = -1.0


class OffersEnv(gym.Env):
    """Pick one of the items on offer each step (see the module docstring).

    Args:
      n: items (actions).
      offered: items on offer at each step (``1 <= offered <= n``).
      horizon: picks per episode.
      mask: where the env says which items are on offer: ``"info"``, ``"observation"``, or
        None (it does not: illegal picks are only penalised).
    """

    metadata = {"render_modes": []}

    def __init__(self, n: int = 10, offered: int = 3, horizon: int = 20,
                 mask: str | None = "info"):
        if mask not in MASK_OPTIONS:
            raise ValueError(f"mask must be one of {MASK_OPTIONS}; got {mask!r}.")
        if not 1 <= int(offered) <= int(n) or int(horizon) < 1:
            raise ValueError(f"need 1 <= offered <= n and horizon >= 1; got n={n}, "
                             f"offered={offered}, horizon={horizon}.")
        self.n, self.offered, self.horizon, self.mask = int(n), int(offered), int(horizon), mask
        self.values = (np.arange(self.n, dtype=np.float64) + 1.0) / self.n
        self.action_space = gym.spaces.Discrete(self.n)
        features = gym.spaces.Box(0.0, 1.0, (self.n + 1,), np.float32)
        self.observation_space = features if mask != "observation" else gym.spaces.Dict({
            "observation": features, "action_mask": gym.spaces.MultiBinary(self.n)})
        self._legal = np.zeros(self.n, np.int8)
        self._t = 0

    def _offer(self) -> None:
        self._legal = np.zeros(self.n, np.int8)
        self._legal[self.np_random.choice(self.n, self.offered, replace=False)] = 1

    def _obs(self):
        x = np.append(self._legal, self._t / self.horizon).astype(np.float32)
        if self.mask == "observation":
            return {"observation": x, "action_mask": self._legal.copy()}
        return x

    def _info(self) -> dict:
        return {"action_mask": self._legal.copy()} if self.mask == "info" else {}

    def legal_actions(self) -> np.ndarray:
        """``[n]`` bool: the items on offer now (for
        :class:`pgrad.rl.collection.masks.ActionMasker`)."""
        return self._legal.astype(bool)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray | dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        self._offer()
        return self._obs(), self._info()

    def step(self, action: Any
             ) -> tuple[np.ndarray | dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        a = int(action)
        reward = float(self.values[a]) if self._legal[a] else ILLEGAL_REWARD
        self._t += 1
        self._offer()
        return self._obs(), reward, self._t >= self.horizon, False, self._info()


def register() -> None:
    """Registers :data:`IDS` with Gymnasium (once)."""
    for env_id, mask in IDS.items():
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=f"{__name__}:OffersEnv", kwargs={"mask": mask})
