"""The one actor-critic agent; REINFORCE, A2C, PPO, NPG and TRPO are presets of it.

An agent is a vector env and :class:`pgrad.rl.collection.rollout.Collector`, Keras actor/critic
networks
(:class:`pgrad.rl.models.networks.ActorCritic`, built by :mod:`agents.build`) with a numpy mirror
for acting (:mod:`agents.acting.policy`: the rollout's policy function, ``act``, ``predict``;
the agent's acting methods: :mod:`agents.acting.methods`; its saving methods:
:mod:`agents.persistence.methods`), a transform chain whose state lives in ``tf.Variable`` s, a
Keras optimizer, and one compiled update per rollout:

1. values ``V(o_t)``, ``V(o_{t+1})`` and GAE(lambda) advantages over the whole ``[T, B]`` rollout
   (bootstrapped at truncations, never at terminations; ``V(o_t)`` from the acting call where
   the critic shares the actor's encoder, :attr:`ActorCriticAgent.values_from_acting`);
2. ``epochs`` passes over it in shuffled minibatches of ``minibatch_size`` steps -- all inside the
   same graph, a ``tf.while_loop`` with no Python per minibatch -- each one step of:
   the policy gradient from the engine (per-step log-prob gradients through the chain; the chain
   sees ``advantages``, ``returns``, ``values``, ``rewards``, ``behaviour_log_probs``,
   ``old_values`` and the *current* ``log_probs``), plus the value and entropy terms
   (:mod:`agents.update.loss`), clipped to ``max_grad_norm`` and applied by the Keras optimizer;
   stopping early once the approximate KL to the behaviour policy passes ``1.5 * target_kl``.

The defaults (one epoch, the whole rollout as one minibatch) are plain A2C / REINFORCE: no
shuffle, one update per rollout. Sampling randomness is a pure function of (seed, update count),
so checkpointing the counter checkpoints the sampler. Same seed and config give identical
episodes on CPU.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pgrad._quiet_tf  # noqa: F401  (first: TensorFlow loads without its start-up lines)

# isort: split
import keras
import numpy as np
import tensorflow as tf

import pgrad
from agents import build
from agents.acting import adversarial
from agents.acting.methods import ActingMethods
from agents.build import make_optimizer
from agents.catalog import registry
from agents.config import MAX_OBS_DIM, ActorCriticConfig
from agents.learn_methods import LearningMethods
from agents.persistence.methods import PersistenceMethods
from agents.schedules import Schedules
from agents.step_methods import StepMethods
from agents.update.compiled import CompiledUpdate
from agents.update.parts import Counters, UpdateParts
from agents.update.targets import GAETargets
from pgrad.rl.acting.policy import make_actor
from pgrad.rl.collection import rollout
from pgrad.rl.envs import vector as envs_lib
from pgrad.rl.models import encoders
from pgrad.rl.observations import spaces
from pgrad.rl.observations.normalize import ObsNormalizer, RewardNormalizer
from pgrad.transforms import TransformState

#: Take ``V(o_t)`` from the acting call where it is exact (:attr:`ActorCriticAgent.
#: values_from_acting`); False: the update's own value pass, always (the tests compare the two).
VALUES_FROM_ACTING = True


class ActorCriticAgent(StepMethods, ActingMethods, PersistenceMethods, LearningMethods):
    """The actor-critic agent; see the module docstring and ``agents/__init__.py``.

    Its acting methods (``act``, ``predict``, ``policy``, ``acting_fn``, ``acting_state``) are
    those of :class:`agents.acting.methods.ActingMethods`, and ``step`` (a rollout, then an
    update) that of :class:`agents.step_methods.StepMethods`, which it inherits.

    Args:
      cfg: its hyperparameters (validated here).
      env_id: a registered Gymnasium id, a callable returning a ``gymnasium.Env`` (e.g. a
        :class:`pgrad.rl.envs.vector.EnvRecipe`: an id with options and wrappers), a
        ``gymnasium.Env``
        instance (``num_envs`` 1) or a ``gymnasium.vector.VectorEnv`` (SAME_STEP autoreset).
      seed: seeds networks, sampling and envs.
      transform: the policy-gradient chain; ``None`` uses :meth:`default_transform`.
    """

    Config: type = ActorCriticConfig
    name = "actor_critic"
    #: A folder: every ``learn`` also logs to TensorBoard in ``tensorboard_log/CLASS_k``
    #: (:class:`agents.logger.TensorBoardLog`; as Stable-Baselines3's ``tensorboard_log``).
    tensorboard_log: str | None = None

    def __init__(self, cfg: ActorCriticConfig | str | None = None, env_id: Any = "CartPole-v1",
                 seed: int = 0, transform: pgrad.GradientTransform | Any = None, *,
                 verbose: int | None = None, **sb3: Any):
        if not isinstance(cfg, self.Config) or sb3:  # SB3's form: Cls("MlpPolicy", env, ...)
            from agents.catalog import sb3_names

            cfg, env_id, rest = sb3_names.constructor(type(self), cfg, env_id, sb3)
            seed = rest.get("seed", seed)
            if rest.get("tensorboard_log") is not None:
                self.tensorboard_log = str(rest["tensorboard_log"])
        from agents.catalog.sb3_names import verbosity

        #: SB3's ``verbose``: None (not given: progress shown), 0 quiet, 1 progress, 2 progress
        #: and a line of metrics per update (what ``learn`` shows unless told).
        self.verbose = verbosity(verbose)
        if not isinstance(cfg, self.Config):
            raise TypeError(f"{type(self).__name__} needs a {self.Config.__qualname__}; "
                            f"got {type(cfg).__name__}.")
        assert isinstance(cfg, ActorCriticConfig)  # for the type checker: checked just above
        cfg.validate()
        self.cfg, self.seed = cfg, int(seed)
        self.env_name = rollout.env_name(env_id)
        # What evaluation, EvalCallback, save and Ray workers build the env from again: the id
        # or factory, or an instance's recipe; else the instance and why it cannot be rebuilt.
        source, self.env_unbuildable = envs_lib.recipe_of(env_id)
        self.env_id = env_id if source is None else source
        envs = rollout.make_vec_env(env_id, cfg.num_envs, cfg.vector_mode, MAX_OBS_DIM)
        try:
            self.observation_space = envs.single_observation_space
            self.action_space = envs.single_action_space
            # ValueError: an unsupported space, an unknown encoder, images too small for it
            self.layout = spaces.obs_layout(self.observation_space)
            self.encoder = encoders.resolve(cfg.encoder, self.layout, f"env {self.env_name!r}")
            build.check_encoder_options(cfg, self.layout, self.encoder, self.env_name)
            self.net = build.network(cfg, self.layout, self.encoder, self.action_space, self.seed)
            self.head = self.net.head
        except Exception:
            envs.close()
            raise
        vector_dim = self.layout.vector_dim  # the normaliser sees the vector part only
        self.obs_norm = ObsNormalizer(vector_dim, cfg.clip_obs) if cfg.normalize_obs else None
        self.reward_norm = (RewardNormalizer(cfg.num_envs, cfg.gamma, cfg.clip_reward)
                            if cfg.normalize_reward else None)
        self.collector = rollout.Collector(envs, self.env_name, self.obs_norm, self.reward_norm)
        # Dense-only policies act on the numpy mirror, encoded ones through one compiled call.
        # Any: recurrent actors add step / state_size, used where net.recurrent says so.
        self.mirror: Any = make_actor(self.net, self.layout)
        self.schedules = Schedules(cfg)
        #: The env-step count the current run trains to (set by the training loop; schedules
        #: run over it). ``None``: stepped by hand, schedules at their start values.
        self.budget: int | None = None
        self.optimizer = make_optimizer(cfg, self.schedules.start("learning_rate"))
        self.optimizer.build(self.net.variables)  # slots exist before any checkpoint restore
        self.critic_optimizer = None
        if cfg.critic_updates:  # NPG/TRPO style: the critic has its own optimizer and passes
            self.critic_optimizer = keras.optimizers.Adam(
                self.schedules.start("critic_learning_rate"), epsilon=1e-5)
            self.critic_optimizer.build(self.net.value_only_variables)
        self.custom_transform = transform is not None
        if callable(transform) and not isinstance(transform, pgrad.GradientTransform):
            # a plain fn(grads, **context), as pgrad-train --transform module:fn takes it
            name = str(getattr(transform, "__name__", "transform"))
            transform = pgrad.chain(pgrad.from_function(transform, name=name), name=name)
        self.transform = transform if transform is not None else self.default_transform()
        if not isinstance(self.transform, pgrad.GradientTransform):
            raise TypeError(f"transform must be a pgrad.GradientTransform or a function "
                            f"fn(grads, **context); got {type(self.transform).__name__}.")
        self.transform_state = TransformState(self.transform.init(self.net.policy_variables))
        self.env_steps_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="env_steps")
        self.updates_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")
        self.seed_var = tf.Variable(self.seed, dtype=tf.int64, trainable=False, name="seed")
        self._act_rng = np.random.default_rng([self.seed, 2**31])
        self._synced_updates = -1  # update count the numpy copies were taken at
        self._env_steps = 0  # Python copy of env_steps_var, refreshed with the others
        self._adversarial_acting: adversarial.AdversarialActing | None = None
        # A recurrent policy's rollout state, checkpointed: the actor's state [B, Sa] before the
        # next observation (numpy while acting) and whether it starts an episode; the critic's
        # [B, Sc] after the last rollout (the update computes and stores it).
        size, critic_size = self.net.state_sizes
        self.rollout_state = np.zeros((cfg.num_envs, size), np.float32)
        self.state_var = tf.Variable(tf.zeros([cfg.num_envs, size]), trainable=False,
                                     name="rollout_state")
        self.critic_state_var = tf.Variable(tf.zeros([cfg.num_envs, critic_size]),
                                            trainable=False, name="critic_state")
        self.update_targets = self.make_targets()
        if hasattr(self.update_targets, "bind"):  # a part with state of its own (a reference)
            self.update_targets.bind(self.net, lambda: build.network(
                cfg, self.layout, self.encoder, self.action_space, self.seed))
        self.updater = CompiledUpdate(self.update_parts())
        try:  # also decides where the env's action masks come from (pgrad.rl.collection.masks)
            self.collector.reset(seed=self.seed)
        except Exception:
            self.collector.close()
            raise

    # -- what presets change ---------------------------------------------------------------------

    def default_transform(self) -> pgrad.GradientTransform:
        """The policy-gradient chain used when none is given: the advantage-weighted mean."""
        return pgrad.chain(pgrad.weight_by("advantages"), pgrad.mean_steps(), name=self.name)

    def make_targets(self) -> Any:
        """The update's targets part (:mod:`agents.update.targets`): GAE(lambda) here."""
        return GAETargets(self.cfg.gamma, self.cfg.gae_lambda)

    def make_policy_step(self) -> Any:
        """A part called after each applied policy step (TRPO's line search), or None."""
        return None

    def update_parts(self) -> UpdateParts:
        """What the compiled update is given (:class:`agents.update.parts.UpdateParts`): the
        networks, optimizers, chain, counters, normalisers, schedules, config and targets."""
        return UpdateParts(
            cfg=self.cfg, net=self.net, mirror=self.mirror, layout=self.layout,
            optimizer=self.optimizer, critic_optimizer=self.critic_optimizer,
            transform=self.transform, transform_state=self.transform_state,
            counters=Counters(self.env_steps_var, self.updates_var, self.seed_var,
                              self.state_var, self.critic_state_var),
            normalizers=[n for n in (self.obs_norm, self.reward_norm) if n is not None],
            schedules=self.schedules, budget=lambda: self.budget, targets=self.update_targets,
            values_from_acting=self.values_from_acting, policy_step=self.make_policy_step())

    def steps_per_update(self) -> int:
        """Env steps per update (nominal for whole-episode rollouts)."""
        return self.cfg.steps_per_update()

    # -- learning --------------------------------------------------------------------------------

    @property
    def values_from_acting(self) -> bool:
        """Whether this agent's own rollouts (:meth:`step`) take ``V(o_t)`` from the acting
        call and the update uses them instead of its value pass over the observations.

        Only where they equal the update's pass to float round-off: a compiled actor whose
        critic shares its encoder
        (:attr:`pgrad.rl.acting.compiled_actor.CompiledActor.fused_values`;
        the numpy mirror's MLPs are cheaper in the update's batched pass), an on-policy update
        (the weights that acted are the weights that update; IMPALA/APPO learn from lagged
        actors and need V on the learner's weights). The stored observations are the ones the
        policy acted on (normalised by the statistics of that step), so normalisation changes
        nothing. Rollout workers (Ray) act without: the policy weights they receive leave out
        the critic's own layers, and their trajectories carry no values."""
        return (VALUES_FROM_ACTING and bool(getattr(self.mirror, "fused_values", False))
                and self.update_targets.on_policy)

    def targets(self, rewards: tf.Tensor, terminated: tf.Tensor, truncated: tf.Tensor,
                values: tf.Tensor, next_values: tf.Tensor, *log_probs: tf.Tensor
                ) -> tuple[tf.Tensor, tf.Tensor]:
        """``[T, B]`` rollout -> ``(advantages, returns)`` ``[T, B]`` by the agent's targets
        part (GAE(lambda) bootstrapped at truncations, never at terminations; IMPALA's V-trace
        also takes the behaviour and the learner's log-probs)."""
        return self.update_targets(rewards, terminated, truncated, values, next_values,
                                   *log_probs)[:2]

    def _adversarial(self) -> adversarial.AdversarialActing:
        """The FGSM acting wrapper (built once; see agents/acting/adversarial.py)."""
        if self._adversarial_acting is None:
            self._adversarial_acting = adversarial.AdversarialActing(
                self, self.cfg.adversarial_epsilon)
        return self._adversarial_acting

    # -- persistence: trackables, export_policy, save (agents.persistence.methods) ---------

    def close(self) -> None:
        self.collector.close()

    # -- the training loop -----------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | Path, **kwargs: Any) -> ActorCriticAgent:
        """``agents.PPO.load(path)``, as Stable-Baselines3's: :func:`agents.load` of an agent of
        this class (another kind is a ValueError naming it)."""
        from agents.persistence import save_load as persistence
        kind = persistence.read_description(path).get("agent")
        if cls.name != "actor_critic" and kind != cls.name:
            raise ValueError(f"{path} holds a {kind} agent, not {cls.name}; load it with "
                             "agents.load(path).")
        return persistence.load(path, registry=agent_class, **kwargs)

    # -- learn, learn_stats: agents.learn_methods.LearningMethods -------------------------------


#: name -> (the declaration, its agent class): built once per declaration.
_CLASSES: dict[str, tuple[Any, type]] = {}


def agent_class(name: str) -> type[ActorCriticAgent]:
    """``agents.get``: the agent class registered as ``name`` (case-insensitive), the same
    object on every call (a new one after ``agents.register`` replaces the declaration).

    An algorithm declared with ``agent="module:Class"`` (a step of its own) is that class;
    else :func:`declared_agent` of its declaration."""
    algorithm = registry.declaration(name)  # an unknown name: one line listing the known ones
    cached = _CLASSES.get(algorithm.name)
    if cached is not None and cached[0] is algorithm:
        return cached[1]
    if algorithm.agent is not None:
        module, attr = algorithm.agent.split(":")
        cls = getattr(importlib.import_module(module), attr)
    else:
        cls = declared_agent(algorithm)
    _CLASSES[algorithm.name] = (algorithm, cls)
    return cls


def declared_agent(algorithm: Any) -> type[ActorCriticAgent]:
    """The actor-critic agent specialised by a declaration (:class:`agents.catalog.declare.
    Algorithm`): its ``Config``, its name, its default chain and its optional parts."""
    body: dict[str, Any] = {"Config": algorithm.config, "name": algorithm.name,
                            "__module__": algorithm.config.__module__,
                            "__doc__": algorithm.summary or f"The {algorithm.name} agent."}
    chain, targets, policy_step = algorithm.chain, algorithm.targets, algorithm.policy_step
    if chain is not None:
        def default_transform(self: ActorCriticAgent) -> pgrad.GradientTransform:
            return chain(self.cfg)

        body["default_transform"] = default_transform
    if targets is not None:
        def make_targets(self: ActorCriticAgent) -> Any:
            return targets(self.cfg)

        body["make_targets"] = make_targets
    if policy_step is not None:
        def make_policy_step(self: ActorCriticAgent) -> Any:
            return policy_step(self.cfg)

        body["make_policy_step"] = make_policy_step
    cls = type(algorithm.class_name, (ActorCriticAgent,), body)
    cls.__qualname__ = algorithm.class_name
    return cls
