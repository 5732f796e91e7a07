"""Agents: one actor-critic agent and its presets (REINFORCE, A2C, PPO, NPG, IMPALA, APPO), by name.

The layer above pgrad: it builds on ``pgrad.rl`` (rollouts, networks, returns) and
``pgrad.engine`` (per-step gradients through a transform chain); nothing in pgrad imports it.

Usage::

    import agents
    agent = agents.make("a2c", "CartPole-v1", seed=0, learning_rate=1e-3)
    agent.learn(100_000, callbacks=agents.callbacks.StopAtReturn(475))  # returns the agent
    agent.save("runs/cp")                  # agents.load("runs/cp") restores it exactly
    action, state = agent.predict(obs)     # env-ready action(s), deterministic by default
    info = agent.step()                    # or by hand: one rollout + one update
    agent.close()

    pop = agents.Population("a2c", "CartPole-v1", seeds=range(80, 90))  # many seeds, one process
    pop.learn(100_000)                     # docs/populations.md

    AgentCls = agents.get("ppo")           # the class; AgentCls.Config is its dataclass
    agent = AgentCls(AgentCls.Config(num_envs=8), env_id="CartPole-v1", seed=0, transform=None)

Constructor ``AgentCls(cfg, env_id="CartPole-v1", seed=0, transform=None)``:
  ``env_id`` is a registered Gymnasium id or a callable returning a ``gymnasium.Env``;
  ``transform=None`` uses the preset's chain; a ``pgrad.GradientTransform`` replaces the
  policy-gradient chain (value and entropy terms are always added after it). Raises ValueError
  for unsupported observation/action spaces or a config value out of range.

``agent.step() -> dict``: collects one rollout (``n_steps x num_envs`` steps, or whole episodes
  of at least ``batch_steps`` steps) and updates on it (``epochs`` passes in minibatches, one
  compiled graph): ``{"env_steps": int total so far, "episodes": [(env_step, return, length),
  ...] finished during this call, "metrics": {name: float}}`` with ``policy_loss``,
  ``value_loss``, ``entropy``, ``approx_kl``, ``pg_grad_norm`` (policy gradient after the
  chain; absent when the aux terms share its backward pass, ``agents.update.minibatch.FOLD_AUX``),
  ``grad_norm`` (combined, before ``max_grad_norm`` clipping), ``learning_rate``,
  ``nonfinite_skipped`` (the fraction of minibatch steps skipped for NaN/Inf gradients),
  ``batch_steps``, ``advantage_mean``, ``minibatch_updates``, ``path_fused`` and what the chain
  reports (``clip_fraction`` of ``clip_per_step`` or ``clip_ratio``). An env that fails or emits
  a NaN/Inf observation or reward raises ``pgrad.rl.envs.vector.EnvError`` (a ValueError) naming the
  env and step; an update that makes the policy's weights non-finite raises FloatingPointError.

``agent.learn(total_steps, callbacks=None, progress=True)`` -- ``step`` until ``total_steps``
  more env steps, through :class:`agents.learning.Loop` with callbacks (:mod:`agents.callbacks`:
  ``EvalCallback``, ``Checkpoint``, ``StopAtReturn``; or a plain ``fn(loop)``, ``False`` stops);
  returns the agent. ``agent.save(path)`` / ``agents.load(path)``: see
  :mod:`agents.persistence.save_load`.

``agent.env_steps`` -- int. ``agent.act(obs_batch, deterministic=False)`` returns env actions
  (feed-forward policies); ``agent.predict(obs, state=None, episode_start=None,
  deterministic=True) -> (action, state)`` in Stable-Baselines3's shape (``state`` None for a
  feed-forward policy; a recurrent one's state goes into the next call).
  ``agent.trackables()`` -- a dict of everything for ``tf.train.Checkpoint`` (networks,
  optimizer, transform state, counters, normaliser statistics, the seed).
  ``agent.export_policy(path)`` -- a SavedModel with
  ``action(observation)`` (deterministic, normaliser inside), loadable with plain
  ``tf.saved_model.load``. ``agent.observation_space``, ``agent.action_space``, ``agent.env_id``,
  ``agent.close()``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agents.algorithms.a2c import A2CConfig
from agents.algorithms.impala import APPOConfig, IMPALAConfig
from agents.algorithms.npg import NPGConfig
from agents.algorithms.ppo import PPOConfig
from agents.algorithms.reinforce import ReinforceConfig
from agents.catalog.declare import Algorithm
from agents.catalog.registry import config_class, configs, names, register
from agents.config import ActorCriticConfig

if TYPE_CHECKING:
    import pgrad
    from agents import callbacks, learning
    from agents.base import ActorCriticAgent
    from agents.base import ActorCriticAgent as A2C
    from agents.base import ActorCriticAgent as NPG
    from agents.base import ActorCriticAgent as PPO
    from agents.base import ActorCriticAgent as Reinforce
    from agents.base import agent_class as get
    from agents.learners.actor_learner import APPO, IMPALA
    from agents.population import Population

# The agents import TensorFlow; their declarations (above) do not. So ``import agents`` is data
# only and the classes load on first use: ``pgrad-train --help`` lists every agent's
# hyperparameters without TensorFlow's seconds of start-up. ``agents.PPO`` is
# ``agents.get("ppo")``: any declared algorithm's class name works.
_LAZY = {"ActorCriticAgent": "agents.base", "get": "agents.base",
         "Population": "agents.population"}
_SUBMODULES = ("callbacks", "learning")


def __getattr__(name: str) -> Any:
    if name == "CONFIGS":  # registered name -> config class (agents.configs(), read each time)
        return configs()
    by_class = _class_names().get(name)
    if by_class is None and name.endswith("Config") and name[:-6] in _class_names():
        return config_class(_class_names()[name[:-6]])  # agents.TRPOConfig: any declaration's
    if by_class is None and name not in _LAZY and name not in _SUBMODULES:
        raise AttributeError(f"module 'agents' has no attribute {name!r}")
    import pgrad  # noqa: F401  (first: TensorFlow loads there, without its start-up lines)

    if by_class is not None:
        from agents.base import agent_class

        return agent_class(by_class)  # not cached here: register() may replace it
    if name == "get":  # agents.get: the registered classes, built from their declarations
        value = importlib.import_module("agents.base").agent_class
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    else:
        value = importlib.import_module(f"agents.{name}")
    globals()[name] = value  # once loaded, a plain attribute
    return value


def _class_names() -> dict[str, str]:
    from agents.catalog.registry import class_names

    return class_names()


def load(path: Any, **kwargs: Any) -> ActorCriticAgent:
    """The agent saved in ``path`` (``agent.save`` or a run directory), restored exactly:
    :func:`agents.persistence.save_load.load` with the registered classes."""
    from agents.base import agent_class
    from agents.persistence import save_load

    return save_load.load(path, registry=agent_class, **kwargs)


def make(name: str, env_id: Any = "CartPole-v1", seed: int = 0,
         transform: pgrad.GradientTransform | Any = None, *,
         env_kwargs: dict | None = None, env_wrapper: Any = None,
         **hyperparameters: Any) -> ActorCriticAgent:
    """``get(name)`` built with its ``Config(**hyperparameters)`` (unknown keys: TypeError).

    ``tensorboard_log="runs/"``: every ``learn`` also writes TensorBoard scalars under
    Stable-Baselines3's names to ``runs/A2C_1``, ``runs/A2C_2``, ... (:mod:`agents.logger`).
    ``env_id``: a registered id, a factory, a ``gym.Env`` or a ``gym.vector.VectorEnv``
    (``num_envs`` then defaults to the instance's: 1, or the VectorEnv's). ``env_kwargs``: the
    id's ``gymnasium.make`` keywords; ``env_wrapper``: wrappers by class, callable, dotted name or
    ``{name: kwargs}``, one or a list (rl-zoo's ``env_wrapper``). Both are kept with the agent
    (an :class:`pgrad.rl.envs.vector.EnvRecipe`), so evaluation, ``EvalCallback`` and
    ``agents.load``
    rebuild the same env. Stable-Baselines3's names work too: ``n_envs``, ``batch_size``,
    ``n_epochs``, ``policy_kwargs=dict(net_arch=[64, 64], activation_fn=...)`` map onto pgrad's
    fields (``tensorboard_log`` too, above); ``verbose=0/1/2`` as SB3's (0 quiet, 1 progress, 2
    also a line of metrics per update); ``device`` and the like are refused with pgrad's way
    (:mod:`agents.catalog.sb3_names`, docs/migration.md). ``transform`` may also be a plain
    ``fn(grads, **context)`` (per-step gradients in; per-step results are averaged).
    """
    import dataclasses

    import gymnasium as gym

    from agents.catalog import sb3_names
    from pgrad.rl.envs.recipe import env_source

    if "tuned" in hyperparameters:  # pgrad-train's tables belong to the application layer
        raise TypeError(f"agents.make applies the hyperparameters it is given; the tuned ones: "
                        f"agents.make({name!r}, env, **pgrad_app.tuned({name!r}, env)).")
    tensorboard_log = hyperparameters.pop("tensorboard_log", None)
    verbose = hyperparameters.pop("verbose", None)  # SB3's 0/1/2: what learn shows
    from agents.base import agent_class

    cls = agent_class(name)
    hyperparameters = sb3_names.hyperparameters(
        hyperparameters, {f.name for f in dataclasses.fields(cls.Config)})
    if "num_envs" not in hyperparameters:
        if isinstance(env_id, gym.vector.VectorEnv):
            hyperparameters["num_envs"] = env_id.num_envs
        elif isinstance(env_id, gym.Env):
            hyperparameters["num_envs"] = 1
    env = env_source(env_id, env_kwargs, env_wrapper)
    agent = cls(cls.Config(**hyperparameters), env_id=env, seed=seed, transform=transform,
                verbose=verbose)
    if tensorboard_log is not None:
        agent.tensorboard_log = str(tensorboard_log)
    return agent


__all__ = [
    "A2C", "A2CConfig", "APPO", "APPOConfig", "ActorCriticAgent", "ActorCriticConfig",
    "Algorithm", "IMPALA", "IMPALAConfig", "NPG", "NPGConfig", "PPO", "PPOConfig", "Population",
    "Reinforce", "ReinforceConfig", "callbacks", "config_class", "configs", "get", "learning",
    "load", "make", "names", "register",
]
