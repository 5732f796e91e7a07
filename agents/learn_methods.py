"""The agent's learning methods: ``learn`` and ``learn_stats``.

:class:`LearningMethods` is the training half of :class:`agents.base.ActorCriticAgent`'s
interface, as :mod:`agents.acting.methods` is its acting half and :mod:`agents.persistence.methods`
its saving half: ``learn`` runs :class:`agents.learning.Loop` over ``agent.step`` with the
user's callbacks (Stable-Baselines3's argument names accepted), TensorBoard's when the agent was
made with ``tensorboard_log``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents.catalog import sb3_names
from agents.learn_stats import LearnStats
from agents.learning import Loop
from agents.logger import TensorBoardLog


class LearningMethods:
    """``agent.learn`` (:class:`agents.learning.Loop` over ``agent.step``) and
    ``agent.learn_stats``: the training half of :class:`agents.base.ActorCriticAgent`'s
    interface (no state of its own beyond the stats it keeps in the agent's ``__dict__``)."""

    # What the methods read of the agent (its constructor sets them: agents.base).
    verbose: int | None
    tensorboard_log: Any
    if TYPE_CHECKING:
        @property
        def env_steps(self) -> int: ...  # agents.acting.methods.ActingMethods.env_steps

    def learn(self, total_steps: int | None = None, callbacks: Any = None,
              progress: bool | None = None, *, total_timesteps: int | None = None,
              progress_bar: bool | None = None, callback: Any = None, **sb3: Any
              ) -> Any:
        """Trains for ``total_steps`` more env steps (the counters continue, as
        Stable-Baselines3's ``learn(..., reset_num_timesteps=False)``); returns the agent.

        Args:
          total_steps: env steps to add (rounded up to whole updates).
          callbacks: a :class:`agents.learning.Callback`, a plain ``fn(loop) -> bool | None``
            called after every update (``False`` stops), or a list of them
            (:mod:`agents.callbacks`: evaluation, checkpoints, stop at a return).
          progress: a progress bar on stderr; None: as the agent's ``verbose`` says (shown
            unless it is 0; 2 adds a line of metrics per update).
          total_timesteps, progress_bar, callback: Stable-Baselines3's names of the three.
        """
        total_steps, callbacks, progress = sb3_names.learn_arguments(
            total_steps, callbacks, progress, total_timesteps, progress_bar, callback, sb3)
        progress, callbacks = sb3_names.verbose_learning(self.verbose, progress, callbacks)
        if int(total_steps) < 0:
            raise ValueError(f"total_steps must be >= 0; got {total_steps}.")
        if self.tensorboard_log is not None:  # after the user's (an EvalCallback's rows)
            callbacks = [callbacks, TensorBoardLog(self.tensorboard_log)]
        Loop(self, self.env_steps + int(total_steps), callbacks, progress).run()  # type: ignore[arg-type]
        return self

    @property
    def learn_stats(self) -> LearnStats:
        """Episodes, wall time and recent returns over every ``learn`` (saved with the agent):
        an :class:`agents.learn_stats.LearnStats`."""
        stats = self.__dict__.get("_learn_stats")
        if stats is None:
            stats = self._learn_stats = LearnStats()
        return stats
