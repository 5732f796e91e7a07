"""The agent's persistence methods: ``trackables``, ``save``, ``export_policy``.

:class:`PersistenceMethods` is the saving half of :class:`agents.base.ActorCriticAgent`'s
interface, as :class:`agents.acting.methods.ActingMethods` is its acting half: no state and no
``__init__`` of its own; it names what a checkpoint holds and hands the agent to
:mod:`agents.persistence.save_load` and :func:`pgrad.rl.export.saved_model.export_policy`.
``load`` stays on the agent class, which knows the registry it loads through.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym

from agents.config import ActorCriticConfig
from pgrad.rl.envs import vector as envs_lib
from pgrad.rl.export.saved_model import export_policy
from pgrad.rl.models.networks import ActorCritic
from pgrad.rl.observations.normalize import ObsNormalizer, RewardNormalizer


class PersistenceMethods:
    """What a checkpoint of an agent holds (:meth:`trackables`), the agent saved whole
    (:meth:`save`) and its policy exported alone (:meth:`export_policy`)."""

    # What the methods read of the agent (its constructor sets them: agents.base).
    name: str
    cfg: ActorCriticConfig
    net: ActorCritic
    env_id: Any
    observation_space: gym.Space
    obs_norm: ObsNormalizer | None
    reward_norm: RewardNormalizer | None
    optimizer: Any
    critic_optimizer: Any
    transform_state: Any
    update_targets: Any
    state_var: Any
    critic_state_var: Any
    env_steps_var: Any
    updates_var: Any
    seed_var: Any
    _synced_updates: int
    _sync: Callable[[], int]  # agents.acting.methods.ActingMethods._sync

    def trackables(self) -> dict[str, Any]:
        """Everything a ``tf.train.Checkpoint`` needs to resume this agent exactly.

        The caller may restore into these objects, so the numpy copies are marked stale here and
        re-read from the variables on next use (``step`` also re-reads them whenever the update
        counter differs from the one it last saw).
        """
        self._synced_updates = -1
        out: dict[str, Any] = dict(self.net.modules())
        if self.critic_optimizer is not None:
            out["critic_optimizer"] = self.critic_optimizer
        if self.net.recurrent:
            out.update(rollout_state=self.state_var, critic_state=self.critic_state_var)
        if hasattr(self.update_targets, "trackables"):
            out.update(self.update_targets.trackables())
        out.update(optimizer=self.optimizer, transform_state=self.transform_state,
                   env_steps=self.env_steps_var, updates=self.updates_var, seed=self.seed_var)
        if self.obs_norm is not None:
            out["obs_normalizer"] = self.obs_norm
        if self.reward_norm is not None:
            out["reward_normalizer"] = self.reward_norm
        return out

    def export_policy(self, path: str) -> None:
        """Saves a deterministic ``action(observation)`` SavedModel (see
        pgrad.rl.export.saved_model)."""
        self._sync()
        recipe = self.env_id.record() if isinstance(self.env_id, envs_lib.EnvRecipe) else None
        meta = {"env_id": self.env_id if isinstance(self.env_id, str) else None,
                "agent": self.name}
        if recipe is not None and not recipe["wrappers"]:  # an id with options: evaluable
            meta.update(env_id=recipe["id"], env_kwargs=recipe["kwargs"])
        export_policy(self.net, self.obs_norm, self.observation_space, path, meta)

    def save(self, path: str | Path) -> Any:
        """Saves the agent into directory ``path``: ``agent.json``, a checkpoint, the exported
        policy (see :mod:`agents.persistence.save_load`; ``agents.load(path)`` restores it
        exactly)."""
        from agents.persistence import save_load

        return save_load.save(self, path)  # type: ignore[arg-type]  # an agent's half
