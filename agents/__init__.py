"""Agents: REINFORCE and A2C behind one small interface, looked up by name.

Usage::

    import agents
    AgentCls = agents.get("a2c")           # or "reinforce"; unknown name -> ValueError
    cfg = AgentCls.Config(num_envs=8)      # dataclass; every field documented in metadata["help"]
    cfg.validate()                         # ValueError("gamma must be in [0, 1]; got 1.5") etc.
    agent = AgentCls(cfg, env_id="CartPole-v1", seed=0, transform=None)
    info = agent.step()
    agent.close()

Constructor ``AgentCls(cfg, env_id="CartPole-v1", seed=0, transform=None)``:
  ``env_id`` is a registered Gymnasium id or a callable returning a ``gymnasium.Env``;
  ``transform=None`` uses the agent's default chain, a ``pgrad.GradientTransform`` replaces the
  policy-gradient chain (value and entropy terms are always added after it). The number of
  parallel envs is ``cfg.num_envs``. Raises ValueError for unsupported observation/action spaces.

``agent.step() -> dict``: collects one batch (A2C: ``n_steps x num_envs`` steps; REINFORCE:
  whole episodes, at least ``batch_steps`` steps) and makes one update (one ``tf.function``):
  ``{"env_steps": int total so far,
     "episodes": [(env_step, return, length), ...] finished during this call,
     "metrics": {name: float}}`` with ``policy_loss``, ``value_loss``, ``entropy``,
  ``pg_grad_norm`` (policy gradient after the chain), ``grad_norm`` (combined, before
  ``max_grad_norm`` clipping), ``learning_rate``, ``nonfinite_skipped`` (1 if the update had a
  NaN/Inf gradient and was skipped), ``batch_steps``, ``advantage_mean``, ``path_fused`` and what
  the chain reports (``clip_fraction`` when ``clip_per_step`` is in it).
  An env that emits a NaN/Inf observation or reward raises ValueError naming the env and step.

``agent.env_steps`` -- int. ``agent.act(obs_batch, deterministic=False) -> np.ndarray`` env
  actions for a batch of raw observations. ``agent.trackables() -> dict`` of everything for
  ``tf.train.Checkpoint`` (networks, optimizer, transform state, counters, normaliser statistics,
  and the seed; sampling randomness is derived from (seed, update count)).
``agent.export_policy(path)`` -- SavedModel with ``action(observation)`` (deterministic, normaliser
  inside), loadable with plain ``tf.saved_model.load``.
``agent.observation_space``, ``agent.action_space``, ``agent.env_id``, ``agent.close()``.

Same seed and config give identical episodes on CPU.
"""

from __future__ import annotations

import pgrad  # noqa: F401  (silences TensorFlow before it is imported)
from agents.a2c import A2C
from agents.common import Agent, CommonConfig
from agents.reinforce import Reinforce

_REGISTRY: dict[str, type[Agent]] = {"a2c": A2C, "reinforce": Reinforce}


def names() -> list[str]:
    """Registered agent names."""
    return sorted(_REGISTRY)


def get(name: str) -> type[Agent]:
    """The agent class registered as ``name`` (case-insensitive)."""
    try:
        return _REGISTRY[name.lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"unknown agent {name!r}; known agents: {', '.join(names())}.") from None


__all__ = ["A2C", "Agent", "CommonConfig", "Reinforce", "get", "names"]
