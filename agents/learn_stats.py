"""What training counts beyond the agent's own counters (:class:`LearnStats`); saved with it.

Its own module so that the agent, the training loop (:mod:`agents.learning`) and persistence
all import it from below.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ROLLING = 20  # episodes in the rolling return (CartPole's "solved" criterion uses 20)
HISTORY = 100  # recent episode returns kept (and saved) for rolling windows


@dataclass
class LearnStats:
    """What training counts beyond the agent's own counters; saved with the agent."""

    episodes: int = 0  # finished training episodes, over every learn()
    wall_s: float = 0.0  # training wall time, over every learn()
    recent_returns: deque = field(default_factory=lambda: deque(maxlen=HISTORY))
    recent_lengths: deque = field(default_factory=lambda: deque(maxlen=HISTORY))
    #: ``info["is_success"]`` (1.0 / 0.0) of recent episodes whose env reports it (SB3's
    #: ``ep_success_buffer``: ``rollout/success_rate`` is their mean).
    recent_successes: deque = field(default_factory=lambda: deque(maxlen=HISTORY))

    def rolling_return(self, window: int = ROLLING) -> float | None:
        """Mean return of the last ``window`` episodes (``None`` before the first one)."""
        if not self.recent_returns:
            return None
        return float(np.mean(list(self.recent_returns)[-window:]))

    def meta(self) -> dict[str, Any]:
        """JSON values for a checkpoint's meta.json."""
        return {"episodes": self.episodes, "wall_s": self.wall_s,
                "recent_returns": [float(r) for r in self.recent_returns],
                "recent_lengths": [int(n) for n in self.recent_lengths],
                "recent_successes": [float(s) for s in self.recent_successes]}

    def load_meta(self, meta: dict[str, Any]) -> None:
        """Restores what :meth:`meta` wrote (missing keys keep their values)."""
        self.episodes = int(meta.get("episodes", self.episodes))
        self.wall_s = float(meta.get("wall_s", self.wall_s))
        if "recent_returns" in meta:
            self.recent_returns.clear()
            self.recent_returns.extend(float(r) for r in meta["recent_returns"])
        if "recent_lengths" in meta:
            self.recent_lengths.clear()
            self.recent_lengths.extend(int(n) for n in meta["recent_lengths"])
        if "recent_successes" in meta:
            self.recent_successes.clear()
            self.recent_successes.extend(float(s) for s in meta["recent_successes"])
