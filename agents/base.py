"""The one actor-critic agent. REINFORCE, A2C, PPO and NPG are presets of it: a config and a chain.

An agent is a vector env and :class:`pgrad.rl.rollout.Collector`, Keras actor/critic networks
(:class:`pgrad.rl.networks.ActorCritic`) with a numpy mirror for acting, a transform chain whose
state lives in ``tf.Variable`` s, a Keras optimizer, and one compiled update per rollout:

1. values ``V(o_t)``, ``V(o_{t+1})`` and GAE(lambda) advantages over the whole ``[T, B]`` rollout
   (bootstrapped at truncations, never at terminations);
2. ``epochs`` passes over it in shuffled minibatches of ``minibatch_size`` steps -- all inside the
   same graph, a ``tf.while_loop`` with no Python per minibatch -- each one step of:
   the policy gradient from the engine (per-step log-prob gradients through the chain; the chain
   sees ``advantages``, ``returns``, ``values``, ``rewards``, ``behaviour_log_probs``,
   ``old_values`` and the *current* ``log_probs``), plus the value and entropy terms
   (:mod:`agents.loss`), clipped to ``max_grad_norm`` and applied by the Keras optimizer;
   stopping early once the approximate KL to the behaviour policy passes ``1.5 * target_kl``.

The defaults (one epoch, the whole rollout as one minibatch) are plain A2C / REINFORCE: no
shuffle, one update per rollout. Sampling randomness is a pure function of (seed, update count),
so checkpointing the counter checkpoints the sampler. Same seed and config give identical
episodes on CPU.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

import pgrad
from agents import hooks
from agents import loss as loss_lib
from agents.config import MAX_OBS_DIM, ActorCriticConfig
from pgrad.core.per_step import zeros_for_unconnected
from pgrad.rl import rollout, spaces
from pgrad.rl.export import export_policy
from pgrad.rl.networks import ActorCritic
from pgrad.rl.normalize import ObsNormalizer, RewardNormalizer
from pgrad.rl.policy import NetworkPolicy, NumpyPolicy
from pgrad.transforms import TransformState, standardized


def make_optimizer(cfg: ActorCriticConfig) -> keras.optimizers.Optimizer:
    """The Keras optimizer the config names. Its learning rate is a variable the update sets
    (the linear decay of ``lr_decay_steps`` is computed from the env-step counter)."""
    if cfg.optimizer == "rmsprop":
        return keras.optimizers.RMSprop(cfg.learning_rate, rho=cfg.rmsprop_rho,
                                        epsilon=cfg.optimizer_eps)
    if cfg.optimizer == "adam":
        return keras.optimizers.Adam(cfg.learning_rate, epsilon=cfg.optimizer_eps)
    return keras.optimizers.SGD(cfg.learning_rate)


def linear_decay(start: float, decay_steps: int, env_steps: tf.Tensor) -> tf.Tensor:
    """``start * max(0, 1 - env_steps / decay_steps)``; ``start`` if ``decay_steps`` is 0."""
    if not decay_steps:
        return tf.constant(start, tf.float32)
    progress = tf.cast(env_steps, tf.float32) / float(decay_steps)
    return start * tf.maximum(0.0, 1.0 - progress)


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


class ActorCriticAgent:
    """The actor-critic agent; see the module docstring and ``agents/__init__.py``.

    Args:
      cfg: its hyperparameters (validated here).
      env_id: a registered Gymnasium id or a callable returning a ``gymnasium.Env``.
      seed: seeds networks, sampling and envs.
      transform: the policy-gradient chain; ``None`` uses :meth:`default_transform`.
    """

    Config: type = ActorCriticConfig
    name = "actor_critic"

    def __init__(self, cfg: ActorCriticConfig, env_id: Any = "CartPole-v1", seed: int = 0,
                 transform: pgrad.GradientTransform | None = None):
        if not isinstance(cfg, self.Config):
            raise TypeError(f"{type(self).__name__} needs a {self.Config.__qualname__}; "
                            f"got {type(cfg).__name__}.")
        cfg.validate()
        self.cfg, self.env_id, self.seed = cfg, env_id, int(seed)
        self.env_name = rollout.env_name(env_id)
        envs = rollout.make_vec_env(env_id, cfg.num_envs, cfg.vector_mode, MAX_OBS_DIM)
        try:
            self.observation_space = envs.single_observation_space
            self.action_space = envs.single_action_space
            obs_dim = spaces.flat_dim(self.observation_space)  # ValueError: unsupported space
            latent = int(cfg.hidden[-1]) if cfg.hidden else obs_dim
            self.head = pgrad.make_head(self.action_space, cfg.log_std_init,
                                        cfg.state_dependent_std, cfg.squash,
                                        latent if cfg.use_sde else 0)
        except Exception:
            envs.close()
            raise
        self.obs_norm = ObsNormalizer(obs_dim, cfg.clip_obs) if cfg.normalize_obs else None
        self.reward_norm = (RewardNormalizer(cfg.num_envs, cfg.gamma, cfg.clip_reward)
                            if cfg.normalize_reward else None)
        self.collector = rollout.Collector(envs, self.env_name, self.obs_norm, self.reward_norm)
        self.net = ActorCritic(obs_dim, self.head, cfg.hidden, cfg.activation, cfg.shared_trunk,
                               critic=cfg.baseline, trunk_grad_scale=cfg.trunk_grad_scale,
                               seed=self.seed, ortho_init=cfg.ortho_init)
        self.mirror = NumpyPolicy(self.net)
        self.optimizer = make_optimizer(cfg)
        self.optimizer.build(self.net.variables)  # slots exist before any checkpoint restore
        self.critic_optimizer = None
        if cfg.critic_updates:  # NPG/TRPO style: the critic has its own optimizer and passes
            self.critic_optimizer = keras.optimizers.Adam(cfg.critic_learning_rate, epsilon=1e-5)
            self.critic_optimizer.build(self.net.value_only_variables)
        self.custom_transform = transform is not None
        self.transform = transform if transform is not None else self.default_transform()
        if not isinstance(self.transform, pgrad.GradientTransform):
            raise TypeError(f"transform must be a pgrad.GradientTransform; got "
                            f"{type(self.transform).__name__}.")
        self.transform_state = TransformState(self.transform.init(self.net.policy_variables))
        self.env_steps_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="env_steps")
        self.updates_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="updates")
        self.seed_var = tf.Variable(self.seed, dtype=tf.int64, trainable=False, name="seed")
        self._act_rng = np.random.default_rng([self.seed, 2**31])
        # No autograph: converting the update's Python source into graph code cost ~2.4 s per
        # process, and pgrad's own code has no tensor-dependent Python control flow. A transform
        # that needs it (``if tensor:``) raises OperatorNotAllowedInGraphError while tracing;
        # _call_update then retraces with autograph on.
        self._autograph = False
        self._update_fn = tf.function(self._update, reduce_retracing=True, autograph=False)
        self._metric_keys: list[str] = []
        self._concrete: dict[tuple, Any] = {}
        self._synced_updates = -1  # update count the numpy copies were taken at
        self._env_steps = 0  # Python copy of env_steps_var, refreshed with the others
        self._adversarial_acting: hooks.AdversarialActing | None = None
        self.collector.reset(seed=self.seed)

    # -- what presets change ---------------------------------------------------------------------

    def default_transform(self) -> pgrad.GradientTransform:
        """The policy-gradient chain used when none is given: the advantage-weighted mean."""
        return pgrad.chain(pgrad.weight_by("advantages"), pgrad.mean_steps(), name=self.name)

    def context_scalars(self, env_steps: tf.Tensor) -> dict[str, tf.Tensor]:
        """Scalars added to the chain's context each update (schedules, e.g. PPO's clip range)."""
        del env_steps
        return {}

    def report_clip_range(self, scalars: dict[str, tf.Tensor]) -> tf.Tensor | None:
        """The clip range of the reported surrogate loss (``None``: the plain policy loss)."""
        del scalars
        return None

    def steps_per_update(self) -> int:
        """Env steps per update (nominal for whole-episode rollouts)."""
        return self.cfg.steps_per_update()

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

    def predict(self, obs: Any, deterministic: bool = True) -> np.ndarray:
        """Env-ready action(s) for one raw observation or a batch of them.

        Deterministic (the mode) by default, as Stable-Baselines3's ``predict`` for evaluation.
        """
        single = not spaces.is_batch(obs, self.observation_space)
        actions = self.act(spaces.batch_of_one(obs) if single else obs, deterministic)
        return actions[0] if single else actions

    @property
    def policy(self) -> NetworkPolicy:
        """The current policy as a :class:`pgrad.rl.policy.Policy` (for ``pgrad.evaluate``)."""
        self._sync()
        return NetworkPolicy(self.net, self.mirror, self.obs_norm, self.observation_space,
                             self.action_space)

    def acting_fn(self, rng: np.random.Generator):
        """The rollout's ``policy_fn`` (see :class:`pgrad.rl.rollout.Collector`): samples from
        the numpy mirror with ``rng``; returns stored actions, env actions, log-probs."""
        mirror, head = self.mirror, self.head
        sde = {"noise": None, "steps": 0}
        freq = int(self.cfg.sde_sample_freq)

        # No critic here: the update computes V on the same weights, so storing it would only
        # add a forward pass per env step.
        def policy_fn(obs):
            params, _ = mirror.forward(obs)
            if head.uses_latent:  # gSDE: exploration matrices held per env, resampled on time
                if sde["noise"] is None or (freq > 0 and sde["steps"] % freq == 0):
                    sde["noise"] = mirror.sde_noise(obs.shape[0], rng)
                sde["steps"] += 1
            actions, log_probs = mirror.sample(params, rng, sde["noise"])
            return actions, head.to_env(actions), log_probs, None

        return policy_fn

    def acting_state(self) -> dict[str, Any]:
        """What a copy of this agent elsewhere (a rollout worker) needs to act exactly as the
        next :meth:`step` will, in numpy: ``weights`` ``[P]`` (the mirror's, for
        ``NumpyPolicy.load_flat``), ``sampler_key`` (the seed of that step's sampling
        generator) and ``obs_norm`` / ``reward_norm``: ``(mean, var, count)`` or None.

        A collector that runs elsewhere replaces ``agent.collector`` (same interface as
        :class:`pgrad.rl.rollout.Collector`) and reads this at each collect; it leaves the
        merged normaliser statistics in ``obs_norm.rms`` / ``reward_norm.rms``, which the
        update then stores.
        """
        updates = self._sync()
        stats = {}
        for key, norm in (("obs_norm", self.obs_norm), ("reward_norm", self.reward_norm)):
            stats[key] = None if norm is None else (norm.rms.mean, norm.rms.var, norm.rms.count)
        return {"weights": self.mirror.flat_numpy(), "sampler_key": [self.seed, updates],
                **stats}

    def _collect(self, policy_fn) -> tuple[rollout.Trajectory, list]:
        if self.cfg.rollout == "episodes":
            return self.collector.collect_episodes(policy_fn, self.cfg.batch_steps)
        return self.collector.collect(policy_fn, self.cfg.n_steps)

    # -- learning --------------------------------------------------------------------------------

    def step(self) -> dict[str, Any]:
        """Collects one rollout and updates on it. See ``agents/__init__.py``."""
        updates = self._sync()
        rng = np.random.default_rng([self.seed, updates])
        base = self._env_steps  # == env_steps_var, without a TensorFlow call
        self.collector.env_steps = before = base  # so env errors name the run's env step
        policy_fn = self.acting_fn(rng)
        if self.cfg.adversarial_epsilon > 0:  # act on (and store) attacked observations
            policy_fn, perturbed = self._adversarial().wrap(policy_fn)
        traj, episodes = self._collect(policy_fn)
        if self.cfg.adversarial_epsilon > 0:
            traj = hooks.replace_observations(traj, perturbed)
        taken = self.collector.env_steps - before
        args = self._update_args(traj, taken)
        out, *step_norms = self._call_update(args, fixed_shape=traj.mask is None)
        out = out.numpy()  # [K + P]: the metrics, then the actor's flat weights (one fetch)
        k = len(self._metric_keys)
        flat = out[k:]
        if not np.isfinite(flat).all():  # finite gradients, but the step overflowed the weights
            raise FloatingPointError(
                f"update {updates + 1} (env step {base + taken}) made the policy's weights "
                "non-finite (NaN/Inf); lower learning_rate or keep max_grad_norm > 0.")
        self.mirror.load_flat(flat)
        self._synced_updates = updates + 1
        self._env_steps = base + taken
        metrics = dict(zip(self._metric_keys, out[:k].tolist()))
        if step_norms:  # cfg.diagnostics: [N] per-step norms, a histogram in TensorBoard
            metrics[hooks.STEP_NORMS_KEY] = step_norms[0].numpy()
        return {"env_steps": base + taken, "episodes": episodes, "metrics": metrics}

    def _normalizers(self) -> list:
        return [n for n in (self.obs_norm, self.reward_norm) if n is not None]

    def _update_args(self, traj: rollout.Trajectory, taken: int) -> tuple:
        """The update's inputs as four tensors (each tensor argument of a call costs a
        conversion and signature matching, ~10 us apiece):

        ``[2 T B obs_dim + 4 T B]`` float32: observations, next observations, rewards,
        terminated, truncated and log-probs end to end (:meth:`_unpack` splits them);
        the actions; the mask (``None`` for fixed-length rollouts); ``[1 + S]`` float64: the
        env steps taken, then each normaliser's mean, var and count.
        """
        floats = np.concatenate([traj.observations.ravel(), traj.next_observations.ravel(),
                                 traj.rewards.ravel(), traj.terminated.ravel(),
                                 traj.truncated.ravel(), traj.log_probs.ravel()],
                                dtype=np.float32, casting="same_kind")
        stats = np.concatenate([[float(taken)]] + [
            np.ravel(x) for n in self._normalizers() for x in (n.rms.mean, n.rms.var,
                                                               n.rms.count)],
            dtype=np.float64, casting="same_kind")
        mask = None if traj.mask is None else tf.constant(traj.mask)
        return tf.constant(floats), tf.constant(traj.actions), mask, tf.constant(stats)

    def _unpack(self, floats: tf.Tensor, actions: tf.Tensor, stats: tf.Tensor):
        """Inverse of :meth:`_update_args` in the graph (static shapes where the actions'
        are): ``(obs, next_obs [T, B, d], rewards, terminated, truncated, log_probs [T, B],
        env steps taken, [(mean, var, count) per normaliser])``."""
        T, B = (actions.shape[i] if actions.shape[i] is not None else tf.shape(actions)[i]
                for i in (0, 1))
        d = self.collector.obs_dim
        n = T * B
        obs, next_obs, *rest = tf.split(floats, [n * d, n * d, n, n, n, n])
        obs, next_obs = (tf.reshape(x, [T, B, d]) for x in (obs, next_obs))
        rest = [tf.reshape(x, [T, B]) for x in rest]
        taken = tf.cast(stats[0], tf.int64)
        norm_stats, at = [], 1
        for norm in self._normalizers():
            size = int(np.prod(norm.mean.shape))
            mean = tf.reshape(stats[at: at + size], norm.mean.shape)
            var = tf.reshape(stats[at + size: at + 2 * size], norm.var.shape)
            norm_stats.append((mean, var, stats[at + 2 * size]))
            at += 2 * size + 1
        return (obs, next_obs, *rest, taken, norm_stats)

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
        key = (tuple(args[0].shape), tuple(args[1].shape), tuple(args[3].shape))
        fn = self._concrete.get(key)
        if fn is None:
            fn = self._concrete[key] = self._update_fn.get_concrete_function(*args)
        return fn(*args)

    def _update(self, floats, actions, mask, stats):
        """One update from a ``[T, B, ...]`` rollout (traced once per shape by tf.function);
        the arguments are :meth:`_update_args`.

        Also stores the counters and normaliser statistics (assignments in the same graph cost
        nothing extra; eager assignments cost a TensorFlow call each). Returns
        ``([K + P]`` the metric values named by self._metric_keys then the flat actor weights,
        fetched together``[, [N] norms])``.
        """
        cfg, net = self.cfg, self.net
        (obs, next_obs, rewards, terminated, truncated, log_probs, env_steps_taken,
         norm_stats) = self._unpack(floats, actions, stats)
        self.env_steps_var.assign_add(env_steps_taken)
        for n, (mean, var, count) in zip(self._normalizers(), norm_stats):
            n.mean.assign(mean)
            n.var.assign(var)
            n.count.assign(count)
        env_steps = self.env_steps_var.read_value()
        if cfg.lr_decay_steps:
            self.optimizer.learning_rate.assign(
                linear_decay(cfg.learning_rate, cfg.lr_decay_steps, env_steps))
            if self.critic_optimizer is not None:
                self.critic_optimizer.learning_rate.assign(
                    linear_decay(cfg.critic_learning_rate, cfg.lr_decay_steps, env_steps))
        scalars = self.context_scalars(env_steps)
        T, B = tf.shape(rewards)[0], tf.shape(rewards)[1]
        flat = lambda x: tf.reshape(x, tf.concat([[T * B], tf.shape(x)[2:]], 0))  # noqa: E731
        if net.critic is not None:  # one critic pass over o_t and the o_{t+1} that followed
            both = net.value(tf.concat([flat(obs), flat(next_obs)], 0))  # [2TB]
            values = tf.reshape(both[: T * B], [T, B])
            next_values = tf.reshape(both[T * B:], [T, B])
        else:
            values = next_values = tf.zeros_like(rewards)
        advantages, returns = self.targets(rewards, terminated, truncated, values, next_values)
        data = {"obs": obs, "actions": actions, "advantages": advantages, "returns": returns,
                "values": values, "rewards": rewards, "behaviour_log_probs": log_probs}
        data = {k: flat(v) for k, v in data.items()}  # [N, ...]
        if mask is not None:  # whole-episode batches: keep only the steps in the batch
            keep = flat(mask) > 0
            data = {k: tf.boolean_mask(v, keep) for k, v in data.items()}
        data = {k: tf.stop_gradient(v) for k, v in data.items()}
        extra_out = ()
        diag = {}
        if cfg.diagnostics:  # the rollout's per-step gradients, before this update changes them
            diag, step_norms = hooks.update_diagnostics(
                self._log_prob_only, net.policy_variables, data["obs"], data["actions"],
                data["advantages"], cfg.diagnostics_max_norm)
            extra_out = (step_norms,)
        sums, count = self._epochs(data, scalars)
        metrics = {k: v / tf.maximum(count, 1.0) for k, v in sums.items()}
        if self.critic_optimizer is not None:
            metrics["value_loss"] = self._critic_epochs(data)
        metrics.update(
            learning_rate=tf.cast(self.optimizer.learning_rate, tf.float32),
            batch_steps=tf.cast(tf.shape(data["advantages"])[0], tf.float32),
            advantage_mean=tf.reduce_mean(data["advantages"]),
            minibatch_updates=count,
            **diag,
        )
        self.updates_var.assign_add(1)
        self._metric_keys = list(metrics)  # trace-time: the order of the stacked values
        values_out = tf.stack([tf.cast(tf.reshape(v, []), tf.float32) for v in metrics.values()])
        return (tf.concat([values_out, self.mirror.flat_weights()], 0), *extra_out)

    def targets(self, rewards, terminated, truncated, values, next_values):
        """``[T, B]`` rollout -> ``(advantages, returns)`` ``[T, B]``: GAE(lambda) and
        ``advantages + values``, bootstrapped at truncations, never at terminations."""
        advantages = pgrad.gae(rewards, values, next_values, terminated, truncated,
                               self.cfg.gamma, self.cfg.gae_lambda)
        return advantages, advantages + tf.cast(values, advantages.dtype)

    def _epochs(self, data: dict, scalars: dict) -> tuple[dict, tf.Tensor]:
        """Runs every minibatch step of the update; returns (metric sums, minibatches counted)."""
        cfg = self.cfg
        n_static = data["advantages"].shape[0]
        mb = int(cfg.minibatch_size)
        whole = mb == 0 or (n_static is not None and mb >= n_static)
        if cfg.epochs == 1 and whole:  # plain A2C / REINFORCE: one step on the rollout as it is
            metrics, _ = self._minibatch(data, scalars)
            return metrics, tf.constant(1.0)
        n = tf.shape(data["advantages"])[0]
        size = n if whole else tf.minimum(tf.constant(mb), n)
        per_epoch = n // size  # episode batches: a remainder of n % size steps sits out an epoch
        seed = tf.cast(self.seed_var, tf.int32) * 7919
        update = tf.cast(self.updates_var, tf.int32)
        orders = tf.stack([  # [epochs, N] one shuffle per epoch, from (seed, update, epoch)
            tf.argsort(tf.random.stateless_uniform([n], tf.stack([seed + e, update])))
            for e in range(int(cfg.epochs))])
        total = per_epoch * int(cfg.epochs)
        keys = self._minibatch_keys()

        def body(i, stopped, count, sums):
            start = (i % per_epoch) * size
            idx = orders[i // per_epoch, start: start + size]
            batch = {k: tf.gather(v, idx) for k, v in data.items()}
            if not whole and n_static is not None:  # static minibatch shapes: taps, no retrace
                batch = {k: tf.ensure_shape(v, [mb, *v.shape[1:]]) for k, v in batch.items()}
            metrics, stop = self._minibatch(batch, scalars)
            if set(metrics) != set(keys):
                raise RuntimeError(f"minibatch metrics {sorted(metrics)} differ from the "
                                   f"expected {sorted(keys)}")
            sums = [s + metrics[k] for s, k in zip(sums, keys)]
            return i + 1, stop, count + 1.0, sums

        zeros = [tf.constant(0.0) for _ in keys]
        _, _, count, sums = tf.while_loop(
            lambda i, stopped, count, sums: tf.logical_and(i < total, tf.logical_not(stopped)),
            body, (tf.constant(0), tf.constant(False), tf.constant(0.0), zeros))
        return dict(zip(keys, sums)), count

    def _critic_epochs(self, data: dict) -> tf.Tensor:
        """``critic_updates`` passes of the critic alone over the rollout (after the policy
        step, targets fixed at collection); returns the mean value loss over the steps."""
        cfg, net = self.cfg, self.net
        variables = net.value_only_variables
        n = tf.shape(data["returns"])[0]
        mb = int(cfg.critic_minibatch_size)
        n_static = data["returns"].shape[0]
        whole = mb == 0 or (n_static is not None and mb >= n_static)
        size = n if whole else tf.minimum(tf.constant(mb), n)
        per_pass = n // size
        seed = tf.cast(self.seed_var, tf.int32) * 7919 + 104729
        update = tf.cast(self.updates_var, tf.int32)

        def body(i, total):
            p = i // per_pass
            start = (i % per_pass) * size
            order = tf.argsort(tf.random.stateless_uniform([n], tf.stack([seed + p, update])))
            idx = order[start: start + size]
            obs, ret = tf.gather(data["obs"], idx), tf.gather(data["returns"], idx)
            with tf.GradientTape() as tape:
                loss = loss_lib.value_loss(net.value(obs), ret)
            grads = zeros_for_unconnected(tape.gradient(loss, variables), variables)
            if cfg.max_grad_norm > 0:
                grads, _ = tf.clip_by_global_norm(grads, cfg.max_grad_norm)
            self.critic_optimizer.apply(grads, variables)
            return i + 1, total + loss

        steps = per_pass * int(cfg.critic_updates)
        _, total = tf.while_loop(lambda i, total: i < steps, body,
                                 (tf.constant(0), tf.constant(0.0)))
        return total / tf.cast(tf.maximum(steps, 1), tf.float32)

    def _minibatch_keys(self) -> list[str]:
        """The metric names one minibatch step reports (fixed: they are loop variables)."""
        form = self.transform.fused_form()
        fused = form is not None and self.cfg.engine_path != "full"
        keys = ["policy_loss", "value_loss", "entropy", "approx_kl", "pg_grad_norm", "grad_norm",
                "nonfinite_skipped", "path_fused"]
        if fused and form.needs_norms:
            keys.append("step_norm_mean")
        structure = tf.nest.pack_sequence_as(
            self.transform_state.template, [0.0] * len(self.transform_state.values))
        return keys + [_metric_name(k) for k in self.transform.metrics(structure)]

    def _log_prob_only(self, obs, actions):
        return self.head.distribution(self.net.params(obs)).log_prob(actions)  # [N]

    def _minibatch(self, mb: dict, scalars: dict) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
        """One gradient step on a minibatch of flat ``[M, ...]`` tensors.

        Returns ``(metrics, stop)``; ``stop`` is true when ``target_kl`` ended the update (the
        step was then not applied).
        """
        cfg, net, head = self.cfg, self.net, self.head
        policy_vars = net.policy_variables
        adv = mb["advantages"]
        if cfg.normalize_advantage:
            adv = standardized(adv)
        value_term = tf.constant(0.0)
        value_grads = []
        value_vars = net.variables if net.trunk is not None else net.value_only_variables
        if net.critic is not None and self.critic_optimizer is not None:
            value_term = loss_lib.value_loss(net.value(mb["obs"]), mb["returns"])  # reported
        elif net.critic is not None:
            with tf.GradientTape() as tape:
                value_term = loss_lib.value_loss(net.value(mb["obs"]), mb["returns"],
                                                 mb["values"], cfg.clip_range_vf)
                weighted = cfg.vf_coef * value_term
            value_grads = zeros_for_unconnected(tape.gradient(weighted, value_vars), value_vars)
        context = {"advantages": adv, "returns": mb["returns"], "values": mb["values"],
                   "old_values": mb["values"], "rewards": mb["rewards"],
                   "behaviour_log_probs": mb["behaviour_log_probs"], **scalars}

        def log_prob_fn(o, a):
            dist = head.distribution(net.params(o))
            return dist.log_prob(a), {"entropy": dist.entropy()}  # [M], [M]

        aux = None
        if cfg.ent_coef > 0:
            def aux(log_probs, extras):
                return loss_lib.aux_loss(0.0, extras["entropy"], 0.0, cfg.ent_coef)

        out = pgrad.run_engine(self.transform, self.transform_state.read(), log_prob_fn,
                               policy_vars, (mb["obs"], mb["actions"]), context, aux_loss=aux,
                               path=cfg.engine_path)
        # Combine in the ascent direction, aligned with net.variables: policy gradient minus the
        # gradients of the losses (entropy term on the policy, value term on its variables).
        total = {id(v): g for v, g in zip(policy_vars, out.grads)}
        for v, g in zip(policy_vars, out.aux_grads or []):
            total[id(v)] = total[id(v)] - g
        for v, g in zip(value_vars, value_grads):
            total[id(v)] = total[id(v)] - g if id(v) in total else -g
        all_vars = net.variables
        grads = [total.get(id(v), tf.zeros(v.shape, v.dtype)) for v in all_vars]
        grad_norm = pgrad.global_norm(grads)
        if cfg.max_grad_norm > 0:
            grads, _ = tf.clip_by_global_norm(grads, cfg.max_grad_norm, use_norm=grad_norm)
        kl = loss_lib.approx_kl(out.log_probs, mb["behaviour_log_probs"])
        stop = tf.constant(False)
        if cfg.target_kl > 0:
            stop = kl > 1.5 * cfg.target_kl
        finite = pgrad.all_finite(grads)
        metrics = {
            "policy_loss": loss_lib.surrogate(out.log_probs, mb["behaviour_log_probs"], adv,
                                              self.report_clip_range(scalars)),
            "value_loss": value_term,
            "entropy": tf.reduce_mean(out.extras["entropy"]),
            "approx_kl": kl,
            "pg_grad_norm": out.metrics["grad_norm"],
            "grad_norm": grad_norm,
            "nonfinite_skipped": 1.0 - tf.cast(finite, tf.float32),
        }
        for k, v in out.metrics.items():
            if k != "grad_norm":
                metrics[_metric_name(k)] = tf.cast(v, tf.float32)
        applied = pgrad.apply_updates(self.optimizer, grads, all_vars, skip_nonfinite=True,
                                      condition=tf.logical_not(stop))
        # A skipped update leaves the transform state as it was, too.
        old = self.transform_state.read()
        self.transform_state.write(tf.nest.map_structure(
            lambda n, o: tf.where(applied, tf.cast(n, o.dtype), o), out.state, old))
        return metrics, stop

    def _adversarial(self) -> hooks.AdversarialActing:
        """The FGSM acting wrapper (built once; see agents/hooks.py)."""
        if self._adversarial_acting is None:
            self._adversarial_acting = hooks.AdversarialActing(self, self.cfg.adversarial_epsilon)
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
        if self.critic_optimizer is not None:
            out["critic_optimizer"] = self.critic_optimizer
        out.update(optimizer=self.optimizer, transform_state=self.transform_state,
                   env_steps=self.env_steps_var, updates=self.updates_var, seed=self.seed_var)
        if self.obs_norm is not None:
            out["obs_normalizer"] = self.obs_norm
        if self.reward_norm is not None:
            out["reward_normalizer"] = self.reward_norm
        return out

    def export_policy(self, path: str) -> None:
        """Saves a deterministic ``action(observation)`` SavedModel (see pgrad.rl.export)."""
        self._sync()
        meta = {"env_id": self.env_id if isinstance(self.env_id, str) else None,
                "agent": self.name}
        export_policy(self.net, self.obs_norm, self.observation_space, path, meta)

    def save(self, path) -> Any:
        """Saves the agent into directory ``path``: ``agent.json``, a checkpoint, the exported
        policy (see :mod:`agents.persistence`; ``agents.load(path)`` restores it exactly)."""
        from agents import persistence

        return persistence.save(self, path)

    def close(self) -> None:
        self.collector.close()

    # -- the training loop -----------------------------------------------------------------------

    def learn(self, total_steps: int, callbacks: Any = None, progress: bool = True):
        """Trains for ``total_steps`` more env steps (the counters continue, as
        Stable-Baselines3's ``learn(..., reset_num_timesteps=False)``); returns the agent.

        Args:
          total_steps: env steps to add (rounded up to whole updates).
          callbacks: a :class:`agents.learning.Callback`, a plain ``fn(loop) -> bool | None``
            called after every update (``False`` stops), or a list of them
            (:mod:`agents.callbacks`: evaluation, checkpoints, stop at a return).
          progress: a progress bar on stderr.
        """
        from agents.learning import Loop

        if int(total_steps) < 0:
            raise ValueError(f"total_steps must be >= 0; got {total_steps}.")
        Loop(self, self.env_steps + int(total_steps), callbacks, progress).run()
        return self

    @property
    def learn_stats(self):
        """Episodes, wall time and recent returns over every ``learn`` (saved with the agent):
        an :class:`agents.learning.LearnStats`."""
        stats = self.__dict__.get("_learn_stats")
        if stats is None:
            from agents.learning import LearnStats

            stats = self._learn_stats = LearnStats()
        return stats
