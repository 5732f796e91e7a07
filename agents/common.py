"""What REINFORCE and A2C share: config fields, acting, the update step, checkpoints, export.

An agent is: a vector env + :class:`pgrad.rollout.Collector`, Keras actor/critic networks
(:class:`pgrad.policy.ActorCritic`) with a numpy mirror for acting, a transform chain whose state
lives in ``tf.Variable`` s, and one ``tf.function`` update. Subclasses say how to collect
(``_collect``), how to turn a batch into advantages and returns (``_targets``) and what the
default chain is (``default_transform``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import keras
import numpy as np
import tensorflow as tf

import pgrad
from agents import extras
from pgrad import rollout, spaces
from pgrad.normalize import ObsNormalizer, RewardNormalizer
from pgrad.policy import ActorCritic, NumpyPolicy, export_policy

OPTIMIZERS = ("rmsprop", "adam", "sgd")


def _help(text: str) -> dict:
    return {"help": text}


@dataclass
class CommonConfig:
    """Hyperparameters every agent has (each agent's ``Config`` extends this)."""

    num_envs: int = field(default=8, metadata=_help("parallel environments in the vector env"))
    vector_mode: str = field(default="sync", metadata=_help(
        "'sync' (all envs in this process) or 'async' (one subprocess per env)"))
    gamma: float = field(default=0.99, metadata=_help("discount factor in [0, 1]"))
    hidden: tuple[int, ...] = field(default=(64, 64), metadata=_help("hidden layer widths"))
    activation: str = field(default="tanh", metadata=_help("'tanh' or 'relu'"))
    shared_trunk: bool = field(default=False, metadata=_help(
        "actor and critic share the hidden layers (else two separate networks)"))
    trunk_grad_scale: float = field(default=0.5, metadata=_help(
        "with shared_trunk: factor on the critic's gradient flowing into the shared trunk"))
    optimizer: str = field(default="rmsprop", metadata=_help("'rmsprop', 'adam' or 'sgd'"))
    learning_rate: float = field(default=7e-4, metadata=_help("optimizer learning rate"))
    optimizer_eps: float = field(default=1e-10, metadata=_help(
        "epsilon of RMSprop/Adam; Keras adds it inside RMSprop's square root, so 1e-10 here is "
        "about PyTorch's (SB3's) 1e-5 outside it"))
    rmsprop_rho: float = field(default=0.99, metadata=_help("RMSprop decay of the squared mean"))
    lr_decay_steps: int = field(default=0, metadata=_help(
        "decay the learning rate linearly to 0 over this many env steps (rl-zoo's 'lin_'); "
        "0 = constant"))
    max_grad_norm: float = field(default=0.5, metadata=_help(
        "clip the combined (policy + value + entropy) gradient to this global norm; 0 = off"))
    vf_coef: float = field(default=0.5, metadata=_help("weight of the value loss"))
    ent_coef: float = field(default=0.0, metadata=_help("weight of the entropy bonus"))
    log_std_init: float = field(default=0.0, metadata=_help(
        "initial log standard deviation of Gaussian (Box) actions"))
    normalize_obs: bool = field(default=False, metadata=_help(
        "normalise observations with running mean/std (saved in checkpoints and the export)"))
    normalize_reward: bool = field(default=False, metadata=_help(
        "scale rewards by the running std of the discounted return"))
    clip_obs: float = field(default=10.0, metadata=_help("clip normalised observations to +-this"))
    clip_reward: float = field(default=10.0, metadata=_help("clip normalised rewards to +-this"))
    engine_path: str = field(default="auto", metadata=_help(
        "policy-gradient engine path: 'auto' (cheapest exact), 'fused' or 'full'"))
    diagnostics: bool = field(default=False, metadata=_help(
        "log per-step gradient diagnostics (diag_* in updates.csv) each update"))
    diagnostics_max_norm: float = field(default=1.0, metadata=_help(
        "with diagnostics: per-step norm threshold of diag_clip_fraction; 0 = leave it out"))
    adversarial_epsilon: float = field(default=0.0, metadata=_help(
        "act on FGSM-perturbed observations (L-inf radius in raw observation units); 0 = off"))

    def validate(self) -> None:
        """Raises ValueError naming the first field out of range."""
        def need(ok: bool, msg: str):
            if not ok:
                raise ValueError(msg)

        need(int(self.num_envs) >= 1, f"num_envs must be >= 1; got {self.num_envs}")
        need(self.vector_mode in rollout.VECTOR_MODES,
             f"vector_mode must be one of {rollout.VECTOR_MODES}; got {self.vector_mode!r}")
        need(0.0 <= self.gamma <= 1.0, f"gamma must be in [0, 1]; got {self.gamma}")
        need(all(int(h) > 0 for h in self.hidden),
             f"hidden widths must be positive; got {self.hidden}")
        need(self.activation in ("tanh", "relu"),
             f"activation must be 'tanh' or 'relu'; got {self.activation!r}")
        need(self.optimizer in OPTIMIZERS,
             f"optimizer must be one of {OPTIMIZERS}; got {self.optimizer!r}")
        need(self.learning_rate > 0, f"learning_rate must be > 0; got {self.learning_rate}")
        need(self.optimizer_eps > 0, f"optimizer_eps must be > 0; got {self.optimizer_eps}")
        need(0.0 < self.rmsprop_rho < 1.0, f"rmsprop_rho must be in (0, 1); got {self.rmsprop_rho}")
        need(int(self.lr_decay_steps) >= 0,
             f"lr_decay_steps must be >= 0; got {self.lr_decay_steps}")
        need(self.max_grad_norm >= 0, f"max_grad_norm must be >= 0; got {self.max_grad_norm}")
        need(self.vf_coef >= 0, f"vf_coef must be >= 0; got {self.vf_coef}")
        need(self.ent_coef >= 0, f"ent_coef must be >= 0; got {self.ent_coef}")
        need(self.trunk_grad_scale >= 0,
             f"trunk_grad_scale must be >= 0; got {self.trunk_grad_scale}")
        need(self.clip_obs > 0 and self.clip_reward > 0, "clip_obs and clip_reward must be > 0")
        need(self.engine_path in pgrad.engine.PATHS,
             f"engine_path must be one of {pgrad.engine.PATHS}; got {self.engine_path!r}")
        need(self.adversarial_epsilon >= 0,
             f"adversarial_epsilon must be >= 0; got {self.adversarial_epsilon}")


def make_optimizer(cfg: CommonConfig, steps_per_update: int) -> keras.optimizers.Optimizer:
    """The Keras optimizer the config names (with a linear decay if ``lr_decay_steps``).

    The schedule counts optimizer iterations, so the decay length in env steps is converted with
    ``steps_per_update`` (exact for A2C, a lower bound for REINFORCE's variable batches).
    """
    lr = cfg.learning_rate
    if cfg.lr_decay_steps:
        updates = max(1, int(cfg.lr_decay_steps) // max(1, steps_per_update))
        lr = keras.optimizers.schedules.PolynomialDecay(cfg.learning_rate, updates, 0.0)
    if cfg.optimizer == "rmsprop":
        return keras.optimizers.RMSprop(lr, rho=cfg.rmsprop_rho, epsilon=cfg.optimizer_eps)
    if cfg.optimizer == "adam":
        return keras.optimizers.Adam(lr, epsilon=cfg.optimizer_eps)
    return keras.optimizers.SGD(lr)


class StateVariables(tf.Module):
    """A transform's state (a nest of tensors) held in ``tf.Variable`` s so it checkpoints."""

    def __init__(self, state: Any):
        super().__init__(name="transform_state")
        self._structure = state
        self.leaves = [tf.Variable(x, trainable=False) for x in tf.nest.flatten(state)]

    def read(self) -> Any:
        return tf.nest.pack_sequence_as(self._structure, [v.read_value() for v in self.leaves])

    def write(self, state: Any) -> None:
        for v, x in zip(self.leaves, tf.nest.flatten(state)):
            v.assign(tf.cast(x, v.dtype))


def _metric_name(key: str) -> str:
    """``'clip_per_step(1.0)/clip_fraction' -> 'clip_fraction'`` for the usual report keys."""
    return key.rsplit("/", 1)[-1] if key.endswith("/clip_fraction") else key


def _needs_autograph(err: BaseException | None) -> bool:
    """Whether ``err`` (or an exception behind it) is a graph tensor used as a Python bool."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, tf.errors.OperatorNotAllowedInGraphError):
            return True
        err = err.__cause__ or err.__context__
    return False


class Agent:
    """Base class; see ``agents/__init__.py`` for the public interface."""

    Config: type = CommonConfig
    name = "agent"
    uses_critic = True

    def __init__(self, cfg: CommonConfig, env_id: Any = "CartPole-v1", seed: int = 0,
                 transform: pgrad.GradientTransform | None = None):
        if not isinstance(cfg, self.Config):
            raise TypeError(f"{type(self).__name__} needs a {self.Config.__qualname__}; "
                            f"got {type(cfg).__name__}.")
        cfg.validate()
        self.cfg, self.env_id, self.seed = cfg, env_id, int(seed)
        self.env_name = rollout.env_name(env_id)
        envs = rollout.make_vec_env(env_id, cfg.num_envs, cfg.vector_mode)
        self.observation_space = envs.single_observation_space
        self.action_space = envs.single_action_space
        obs_dim = spaces.flat_dim(self.observation_space)  # ValueError for unsupported spaces
        self.head = pgrad.make_head(self.action_space, cfg.log_std_init)
        self.obs_norm = ObsNormalizer(obs_dim, cfg.clip_obs) if cfg.normalize_obs else None
        self.reward_norm = (RewardNormalizer(cfg.num_envs, cfg.gamma, cfg.clip_reward)
                            if cfg.normalize_reward else None)
        self.collector = rollout.Collector(envs, self.env_name, self.obs_norm, self.reward_norm)
        self.net = ActorCritic(obs_dim, self.head, cfg.hidden, cfg.activation, cfg.shared_trunk,
                               critic=self.uses_critic, trunk_grad_scale=cfg.trunk_grad_scale,
                               seed=self.seed)
        self.mirror = NumpyPolicy(self.net)
        self.optimizer = make_optimizer(cfg, self.steps_per_update())
        self.optimizer.build(self.net.variables)  # slots exist before any checkpoint restore
        self.transform = transform if transform is not None else self.default_transform()
        if not isinstance(self.transform, pgrad.GradientTransform):
            raise TypeError(f"transform must be a pgrad.GradientTransform; got "
                            f"{type(self.transform).__name__}.")
        self.transform_state = StateVariables(self.transform.init(self.net.policy_variables))
        self.env_steps_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="env_steps")
        self.updates_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")
        # Sampling randomness is a pure function of (seed, update count): checkpointing the
        # counter checkpoints the sampler, and a resumed run samples what it would have.
        self.seed_var = tf.Variable(self.seed, dtype=tf.int64, trainable=False, name="seed")
        self._act_rng = np.random.default_rng([self.seed, 2**31])
        # No autograph: converting the update's Python source into graph code cost ~2.4 s per
        # process (CartPole A2C: a third of the whole run), and pgrad's own code has no
        # tensor-dependent Python control flow. A transform that needs it (``if tensor:``)
        # raises OperatorNotAllowedInGraphError while tracing; _call_update then retraces
        # with autograph on, as before.
        self._autograph = False
        self._update_fn = tf.function(self._update, reduce_retracing=True, autograph=False)
        self._metric_keys: list[str] = []
        self._concrete: dict[tuple, Any] = {}
        self._synced_updates = -1  # update count the numpy copies were taken at
        self._env_steps = 0  # Python copy of env_steps_var, refreshed with the others
        self.collector.reset(seed=self.seed)

    # -- subclass hooks ------------------------------------------------------------------------

    def default_transform(self) -> pgrad.GradientTransform:
        raise NotImplementedError

    def steps_per_update(self) -> int:
        """Env steps per update (nominal), for learning-rate schedules."""
        raise NotImplementedError

    def _collect(self, policy_fn) -> tuple[rollout.Trajectory, list]:
        raise NotImplementedError

    def _targets(self, rewards, terminated, truncated, values, next_values):
        """``[T, B]`` tensors -> ``(advantages, returns)`` ``[T, B]``."""
        raise NotImplementedError

    # -- acting ----------------------------------------------------------------------------------

    @property
    def env_steps(self) -> int:
        """Total env steps (the checkpointed counter)."""
        if self._synced_updates < 0:  # possibly restored since the last step: read the variable
            return int(self.env_steps_var.numpy())
        return self._env_steps

    def _sync(self) -> int:
        """Refreshes the numpy copies if the variables changed outside ``step`` (a restore).

        Returns the update count. ``step`` keeps the copies current itself (the update returns
        the new weights), so the usual cost is one variable read.
        """
        updates = int(self.updates_var.numpy())
        if updates != self._synced_updates:
            self.mirror.sync()
            for norm in (self.obs_norm, self.reward_norm):
                if norm is not None:
                    norm.pull()
            self.seed = int(self.seed_var.numpy())
            self._env_steps = int(self.env_steps_var.numpy())
            self._synced_updates = updates
        return updates

    def act(self, obs_batch: Any, deterministic: bool = False) -> np.ndarray:
        """Env-ready actions ``[N, ...]`` for a batch of raw observations (as vector envs give)."""
        self._sync()
        obs = self.collector.preprocess(obs_batch)
        if self.obs_norm is not None:
            obs = self.obs_norm(obs)
        params, _ = self.mirror.forward(obs)
        actions = (self.mirror.mode(params) if deterministic
                   else self.mirror.sample(params, self._act_rng)[0])
        return self.head.to_env(actions)

    def _policy_fn(self, rng: np.random.Generator):
        mirror, head = self.mirror, self.head

        # No critic here: the update recomputes V on the same weights, so storing it would
        # only add a forward pass per env step.
        def policy_fn(obs):
            params, _ = mirror.forward(obs)
            actions, log_probs = mirror.sample(params, rng)
            return actions, head.to_env(actions), log_probs, None

        return policy_fn

    # -- learning --------------------------------------------------------------------------------

    def step(self) -> dict[str, Any]:
        """Collects one batch and makes one update. See ``agents/__init__.py``."""
        updates = self._sync()
        rng = np.random.default_rng([self.seed, updates])
        before = self.collector.env_steps
        policy_fn = self._policy_fn(rng)
        if self.cfg.adversarial_epsilon > 0:  # act on (and store) attacked observations
            policy_fn, perturbed = self._adversarial().wrap(policy_fn)
        traj, episodes = self._collect(policy_fn)
        if self.cfg.adversarial_epsilon > 0:
            traj = extras.replace_observations(traj, perturbed)
        taken = self.collector.env_steps - before
        base = self._env_steps  # == env_steps_var, without a TensorFlow call
        # Episode end steps are counted from this collector's start; rebase on the total.
        episodes = [(base + s - before, r, n) for s, r, n in episodes]
        mask = None if traj.mask is None else tf.constant(traj.mask)
        # Tensors, never Python numbers: a Python float argument would retrace every call.
        norm_stats = tuple(tuple(tf.constant(x, tf.float64) for x in (n.rms.mean, n.rms.var,
                                                                      n.rms.count))
                           for n in (self.obs_norm, self.reward_norm) if n is not None)
        args = (tf.constant(traj.observations), tf.constant(traj.actions),
                tf.constant(traj.rewards), tf.constant(traj.terminated),
                tf.constant(traj.truncated), tf.constant(traj.next_observations),
                tf.constant(traj.log_probs), mask, tf.constant(taken, tf.int64), norm_stats)
        values, flat, *step_norms = self._call_update(args, fixed_shape=traj.mask is None)
        self.mirror.load_flat(flat.numpy())
        self._synced_updates = updates + 1
        self._env_steps = base + taken
        metrics = dict(zip(self._metric_keys, values.numpy().tolist()))
        if step_norms:  # cfg.diagnostics: [N] per-step norms, a histogram in TensorBoard
            metrics[extras.STEP_NORMS_KEY] = step_norms[0].numpy()
        return {"env_steps": base + taken, "episodes": episodes, "metrics": metrics}

    def _call_update(self, args: tuple, fixed_shape: bool):
        """Runs the update; fixed-shape batches call the traced concrete function directly.

        ``tf.function``'s per-call signature matching cost about as much as running the small
        update graph itself (profiled: ~1 ms of ~3 ms); a concrete function skips it.
        """
        try:
            return self._run_update(args, fixed_shape)
        except Exception as err:  # re-raised unless autograph is the fix
            # Only the first, autograph-free trace can fail this way (pgrad wraps a transform's
            # error in a TransformError, so look through the causes).
            if self._autograph or not _needs_autograph(err):
                raise
            self._autograph = True
            self._update_fn = tf.function(self._update, reduce_retracing=True)
            self._concrete.clear()
            return self._run_update(args, fixed_shape)

    def _run_update(self, args: tuple, fixed_shape: bool):
        if not fixed_shape:
            return self._update_fn(*args)
        key = tuple(tuple(a.shape) for a in args[:7]) + (len(args[9]),)
        fn = self._concrete.get(key)
        if fn is None:
            fn = self._concrete[key] = self._update_fn.get_concrete_function(*args)
        return fn(*args)

    def _update(self, obs, actions, rewards, terminated, truncated, next_obs, log_probs, mask,
                env_steps_taken, norm_stats):
        """One update from a ``[T, B, ...]`` batch (traced once per shape by tf.function).

        Also stores the counters and normaliser statistics (assignments in the same graph cost
        nothing extra; eager assignments cost a TensorFlow call each). Returns
        ``([K] metric values named by self._metric_keys, [P] flat policy weights)``.
        """
        cfg, net, head = self.cfg, self.net, self.head
        self.env_steps_var.assign_add(env_steps_taken)
        norms = [n for n in (self.obs_norm, self.reward_norm) if n is not None]
        for n, (mean, var, count) in zip(norms, norm_stats):
            n.mean.assign(mean)
            n.var.assign(var)
            n.count.assign(count)
        T, B = tf.shape(rewards)[0], tf.shape(rewards)[1]
        flat = lambda x: tf.reshape(x, tf.concat([[T * B], tf.shape(x)[2:]], 0))  # noqa: E731
        policy_vars = net.policy_variables
        # Value and entropy terms: an ordinary tape, added after the chain's aggregation. (In a
        # tf.function a tape only shapes the traced graph: ops run only for what is asked.)
        with tf.GradientTape() as tape:
            if self.uses_critic:  # one critic pass over o_t and the o_{t+1} that followed
                both = net.value(tf.concat([flat(obs), flat(next_obs)], 0))  # [2TB]
                values_g = tf.reshape(both[: T * B], [T, B])  # [T, B], carries the gradient
                values = tf.stop_gradient(values_g)
                next_values = tf.stop_gradient(tf.reshape(both[T * B:], [T, B]))
            else:
                values_g = values = next_values = tf.zeros_like(rewards)
            advantages, returns = self._targets(rewards, terminated, truncated, values,
                                                next_values)
            advantages, returns = tf.stop_gradient(advantages), tf.stop_gradient(returns)
            pieces = [flat(x) for x in (obs, actions, advantages, returns, values_g, rewards,
                                        log_probs)]
            if mask is not None:  # whole-episode batches: keep only the steps in the batch
                keep = flat(mask) > 0
                pieces = [tf.boolean_mask(x, keep) for x in pieces]
            obs_f, act_f, adv_f, ret_f, val_g, rew_f, logp_f = pieces  # [N, ...]
            dist = head.distribution(net.params(obs_f))
            entropy = tf.reduce_mean(dist.entropy())
            logp_now = dist.log_prob(act_f)  # [N], for the reported surrogate loss only
            value_loss = tf.reduce_mean(tf.square(ret_f - val_g))
            aux_loss = cfg.vf_coef * value_loss
            if cfg.ent_coef > 0:
                aux_loss -= cfg.ent_coef * entropy
        # Only differentiate what the auxiliary loss reaches: with separate networks and no
        # entropy bonus that is the critic alone.
        aux_policy = cfg.ent_coef > 0 or net.trunk is not None
        aux_vars = (net.variables if aux_policy else net.value_only_variables)
        aux = pgrad.per_step.zeros_for_unconnected(tape.gradient(aux_loss, aux_vars), aux_vars)
        val_f = tf.stop_gradient(val_g)
        context = {"advantages": adv_f, "returns": ret_f, "log_probs": logp_f, "values": val_f,
                   "rewards": rew_f}

        def log_prob_fn(o, a):
            return head.distribution(net.params(o)).log_prob(a)  # [N]

        pg, new_state, info = pgrad.policy_gradients(
            self.transform, self.transform_state.read(), log_prob_fn, policy_vars,
            (obs_f, act_f), context, path=cfg.engine_path)
        n_pol = len(policy_vars)
        if aux_policy:
            grads = [g - a for g, a in zip(pg, aux[:n_pol])] + [-a for a in aux[n_pol:]]
        else:
            grads = list(pg) + [-a for a in aux]  # ascent direction, aligned with net.variables
        all_vars = net.variables
        total_norm = pgrad.global_norm(grads)
        if cfg.max_grad_norm > 0:
            grads, _ = tf.clip_by_global_norm(grads, cfg.max_grad_norm, use_norm=total_norm)
        applied = pgrad.apply_updates(self.optimizer, grads, all_vars, skip_nonfinite=True)
        # A skipped (non-finite) update leaves the transform state as it was, too.
        old = self.transform_state.read()
        self.transform_state.write(tf.nest.map_structure(
            lambda n, o: tf.where(applied, tf.cast(n, o.dtype), o), new_state, old))
        self.updates_var.assign_add(1)
        metrics = {
            "policy_loss": -tf.reduce_mean(adv_f * logp_now),
            "value_loss": value_loss,
            "entropy": entropy,
            "pg_grad_norm": info["grad_norm"],
            "grad_norm": total_norm,
            "learning_rate": tf.cast(self.optimizer.learning_rate, tf.float32),
            "nonfinite_skipped": 1.0 - tf.cast(applied, tf.float32),
            "batch_steps": tf.cast(tf.shape(adv_f)[0], tf.float32),
            "advantage_mean": tf.reduce_mean(adv_f),
        }
        for k, v in info.items():
            if k not in ("grad_norm",):
                metrics[_metric_name(k)] = v
        step_norms = ()
        if cfg.diagnostics:
            diag, norms = extras.update_diagnostics(log_prob_fn, policy_vars, obs_f, act_f, adv_f,
                                                    cfg.diagnostics_max_norm)
            metrics.update(diag)
            step_norms = (norms,)
        self._metric_keys = list(metrics)  # trace-time: the order of the stacked values
        values = tf.stack([tf.cast(tf.reshape(v, []), tf.float32) for v in metrics.values()])
        return (values, self.mirror.flat_weights(), *step_norms)

    def _adversarial(self) -> extras.AdversarialActing:
        """The FGSM acting wrapper (built once; see agents/extras.py)."""
        if getattr(self, "_adversarial_acting", None) is None:
            self._adversarial_acting = extras.AdversarialActing(self, self.cfg.adversarial_epsilon)
        return self._adversarial_acting

    # -- persistence -----------------------------------------------------------------------------

    def trackables(self) -> dict[str, Any]:
        """Everything a ``tf.train.Checkpoint`` needs to resume this agent exactly.

        The caller may restore into these objects, so the numpy copies are marked stale here and
        re-read from the variables on next use (``step`` also re-reads them whenever the update
        counter differs from the one it last saw).
        """
        self._synced_updates = -1
        out: dict[str, Any] = dict(self.net.modules())
        out.update(optimizer=self.optimizer, transform_state=self.transform_state,
                   env_steps=self.env_steps_var, updates=self.updates_var, seed=self.seed_var)
        if self.obs_norm is not None:
            out["obs_normalizer"] = self.obs_norm
        if self.reward_norm is not None:
            out["reward_normalizer"] = self.reward_norm
        return out

    def export_policy(self, path: str) -> None:
        """Saves a deterministic ``action(observation)`` SavedModel (see pgrad.policy)."""
        export_policy(self.net, self.obs_norm, self.observation_space, path)

    def config_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self.cfg)

    def close(self) -> None:
        self.collector.close()
