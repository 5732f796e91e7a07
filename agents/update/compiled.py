"""The compiled update of the actor-critic agent: one graph per rollout shape.

:class:`CompiledUpdate` turns a collected ``[T, B]`` rollout into one call of a traced
``tf.function`` that stores the counters and normaliser statistics, computes values and
GAE(lambda) targets, runs ``epochs`` passes of shuffled minibatch steps in a ``tf.while_loop``
(each a :class:`agents.update.minibatch.MinibatchStep`: the engine's policy gradient through the
chain,
the value and entropy terms, global-norm clipping, the Keras optimizer, early stop on approximate
KL; the loops are in :mod:`agents.update.epochs`) and returns the metrics and the actor's new flat
weights in one tensor, so a step costs one host fetch. How a rollout is packed into the call's
few tensors and unpacked in the graph: :mod:`agents.update.inputs`.
How the update is traced and called (concrete functions, autograph on demand, XLA):
:mod:`agents.update.call`.

Recurrent policies: the minibatches are whole env sequences, or with ``sequence_length`` pieces
of ``L`` steps of them (sb3-contrib's RecurrentPPO layout), each from the core's state at its
first step. Those states are recomputed here in one pass of the core over the rollout on the
weights that acted (:func:`piece_states`), equal to what acting carried (tested) and with
nothing extra recorded in the rollout or sent by remote collectors. The pieces sit at fixed
places, not at sb3-contrib's random offset per epoch: equal pieces keep one static shape (one
trace, no padding or masks); docs/agents.md, "Recurrent policies".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from agents.update import diagnostics, epochs
from agents.update.call import TracedUpdate
from agents.update.inputs import NextImages, UpdateInputs
from agents.update.minibatch import MinibatchStep
from agents.update.parts import UpdateParts
from agents.update.reference import RolloutLogProbs
from pgrad.core.per_step import map_chunks
from pgrad.rl.collection import rollout
from pgrad.rl.flat_call import flat_call_supported, flat_caller  # noqa: F401 (re-exported)

#: ``fn`` over every tensor of a nest (an observation's parts; a plain tensor is fn(tensor)).
_map = tf.nest.map_structure


def explained_variance(predicted: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
    """``1 - Var[target - predicted] / Var[target]`` (SB3's ``explained_variance``; NaN when
    the targets do not vary): 1 is a perfect critic, 0 no better than a constant."""
    target = tf.cast(target, tf.float32)
    var = tf.math.reduce_variance(target)
    residual = tf.math.reduce_variance(target - tf.cast(predicted, tf.float32))
    return tf.where(var > 0, 1.0 - residual / tf.maximum(var, 1e-30), float("nan"))


def piece_states(state0: tf.Tensor, states_after: tf.Tensor, length: int) -> tf.Tensor:
    """Each step's piece's first state, for minibatches of ``length``-step pieces.

    Args:
      state0: ``[B, S]`` the core's state before the rollout's first step.
      states_after: ``[T, B, S]`` its state after each step (time-major).
      length: ``L``, dividing ``T``.

    Returns:
      ``[T, B, S]``: row ``t`` the state before step ``(t // L) L``, before any reset there (the
      piece's ``episode_starts`` apply it, as they do for a whole sequence's first step).
    """
    before = tf.concat([state0[None], states_after[:-1]], 0)  # [T, B, S] state before step t
    steps = tf.range(tf.shape(before)[0])
    return tf.gather(before, (steps // length) * length)


#: Bytes of float32 observations per chunk of the update's value pass over a rollout with
#: images (16 MiB: 148 Atari observations of 84x84x4, a whole MinAtar rollout of 10x10x4). The
#: frames scaled to float32 and the first layers' activations of a chunk are the update's
#: largest transient: chunks of 512 Atari frames took the peak RSS of rl-zoo's Atari PPO ~90
#: MB higher (docs/performance.md, "Images").
VALUE_CHUNK_BYTES = 16 * 2**20

#: Encoded (image) policies: next observations that are the following row's observation take
#: their value from that row's (about half the value pass); False: a pass over all of them
#: (the tests compare the two).
REUSE_NEXT_VALUES = True

class CompiledUpdate:
    """An agent's update; ``updater(updater.inputs(traj, taken), fixed_shape)``.

    Args:
      parts: the :class:`agents.update.parts.UpdateParts` it updates (networks, optimizers, the
        chain and its state, counters, normalisers, schedules, the config) and the targets part
        it calls while tracing (GAE or V-trace: :mod:`agents.update.targets`). It never sees the
        agent.
    """

    def __init__(self, parts: UpdateParts):
        self.parts = parts
        self.cfg, self.net, self.head, self.mirror = parts.cfg, parts.net, parts.net.head, \
            parts.mirror
        self.optimizer, self.critic_optimizer = parts.optimizer, parts.critic_optimizer
        self.transform, self.transform_state = parts.transform, parts.transform_state
        counters = parts.counters
        self.env_steps_var, self.updates_var = counters.env_steps, counters.updates
        self.seed_var = counters.seed
        #: ``(advantages, returns, extra)`` of a rollout (:mod:`agents.update.targets`).
        self.targets = parts.targets
        self.io = UpdateInputs(parts)  # the rollout packed on the host, unpacked in the graph
        self.normalizers = self.io.normalizers
        self.layout = parts.layout
        obs_floats = sum(int(np.prod(p.shape)) for p in self.layout.parts)
        self.value_chunk = max(32, VALUE_CHUNK_BYTES // (4 * obs_floats))  # observations
        self.metric_keys: list[str] = []  # trace-time: names of the returned metric values
        # How it is traced and called (concrete functions, autograph on demand, jit_compile):
        # agents/update/call.py.
        self.traced = TracedUpdate(self._update, self.io.signature,
                                   bool(getattr(self.cfg, "jit_compile", False)))
        self.step = MinibatchStep(parts)  # the loss of one minibatch step
        # Reported each update besides learning_rate: PPO's clip range (as SB3's train/clip_range)
        # and every value that changes over the run.
        self.reported_schedules = [
            n for n in parts.schedules.names if n != "learning_rate" and (
                n == "clip_range" or not parts.schedules.constant(n))]

    @property
    def jit_compiled(self) -> bool:
        """Whether fixed-shape updates run as one XLA computation (``jit_compile`` set and not
        fallen back)."""
        return self.traced.jit

    def tracing_count(self) -> int:
        """How many times the update has been traced (a retrace per call would be a bug)."""
        return self.traced.tracing_count()

    def inputs(self, traj: rollout.Trajectory, taken: int, scheduled: list[float] | None = None,
               recurrent: tuple | None = None, host: bool = False) -> tuple:
        """The update's inputs for ``traj`` (:meth:`agents.update.inputs.UpdateInputs.inputs`)."""
        return self.io.inputs(traj, taken, scheduled, recurrent, host)

    def unpack(self, *args: tf.Tensor) -> tuple:
        """:meth:`inputs` unpacked in the graph (:meth:`.UpdateInputs.unpack`)."""
        return self.io.unpack(*args)

    def _chunked_values(self, rows: Any, n: tf.Tensor | int) -> tf.Tensor:
        """``[n]`` values of ``n`` observations, :data:`VALUE_CHUNK_BYTES` of float32
        observations at a time (the float32 frames and first-layer activations of a whole
        rollout at once would dominate memory)."""
        return map_chunks(lambda r: [self.net.value(r)], rows, n, self.value_chunk,
                          [tf.TensorSpec([None], tf.float32)])[0]

    def _encoded_values(self, obs: Any, next_obs: Any, T, B, acted: tf.Tensor | None = None
                        ) -> tuple[tf.Tensor, tf.Tensor]:
        """``(V(o_t), V(o_{t+1}))`` ``[T, B]`` with one value pass over the rollout's
        observations (none if ``acted``, ``[T, B]`` ``V(o_t)`` from the acting call, gives
        them) plus one over only the next observations that are not the following row's.

        Within an episode ``next_obs[t]`` is ``obs[t + 1]`` (the same observation), so its value
        is already there; only the last step's, the episode ends' final observations and any
        row whose parts differ in any element (compared, never assumed: attacked
        observations, episode batches) take a pass of their own. Equal to the value of every
        next observation to float32 round-off (a row's value does not depend on its batch).
        ``next_obs`` in compact form (:class:`agents.update.inputs.NextImages`: observations
        with images) has its differing frames listed already; the rows are the same."""
        flat = lambda x: _map(  # noqa: E731  [T, B, ...] -> [T B, ...]
            lambda y: tf.reshape(y, tf.concat([[T * B], tf.shape(y)[2:]], 0)), x)
        values = (self._chunked_values(flat(obs), T * B) if acted is None  # [T B]
                  else tf.reshape(acted, [T * B]))

        def same_rows(a, b):  # [T - 1, B]: next_obs[t] == obs[t + 1] in every element
            eq = tf.equal(a[:-1], b[1:])
            return tf.reduce_all(tf.reshape(eq, tf.concat([tf.shape(eq)[:2], [-1]], 0)), -1)

        if isinstance(next_obs, NextImages):
            # 1 + k at the rows whose next frames are final k, else 0   [T B]
            final_rows = next_obs.index[:, 0] * B + next_obs.index[:, 1]  # [K]
            final_at = tf.scatter_nd(final_rows[:, None], tf.range(1, tf.size(final_rows) + 1),
                                     [T * B])
            same = tf.equal(tf.reshape(final_at, [T, B])[:-1], 0)  # [T - 1, B]
            if next_obs.vector is not None:
                vec = self.layout.vector(obs)
                same = tf.logical_and(same, same_rows(next_obs.vector, vec))
        else:
            same = tf.reduce_all(tf.stack(tf.nest.flatten(_map(same_rows, next_obs, obs))), 0)
        same = tf.concat([same, tf.zeros([1, B], tf.bool)], 0)  # [T, B]
        shifted = tf.concat([tf.reshape(values, [T, B])[1:], tf.zeros([1, B])], 0)  # V(o[t+1])
        own = tf.where(tf.logical_not(tf.reshape(same, [-1])))  # [K, 1] rows needing a pass
        if isinstance(next_obs, NextImages):
            rows = self._next_rows(next_obs, tf.cast(own[:, 0], tf.int32), final_at, T, B)
        else:
            rows = _map(lambda x: tf.gather_nd(x, own), flat(next_obs))
        own_values = self._chunked_values(rows, tf.shape(own)[0])  # [K]
        next_values = tf.tensor_scatter_nd_update(tf.reshape(shifted, [-1]), own, own_values)
        return tf.reshape(values, [T, B]), tf.reshape(next_values, [T, B])

    def _next_rows(self, nxt: NextImages, rows: tf.Tensor, final_at: tf.Tensor, T, B) -> Any:
        """The next observations at flat rows ``rows`` ``[M]`` (``t B + b``), in the layout's
        form: each image part's row ``t + 1`` of its frames, or its final frame where
        ``final_at`` ``[T B]`` (``1 + k`` at final ``k``, else 0) says so."""
        which = tf.gather(final_at, rows)  # [M]
        kept = tf.where(which > 0)  # [M', 1] positions in rows with a final frame
        finals = tf.gather_nd(which, kept) - 1  # [M']
        images = []
        for frames, fin in zip(nxt.frames, nxt.finals):
            shape = tf.shape(frames)
            rows_of = tf.reshape(frames, tf.concat([[(T + 1) * B], shape[2:]], 0))
            got = tf.gather(rows_of, rows + B)  # [M, ...] row t + 1 of the frames
            images.append(tf.tensor_scatter_nd_update(got, kept, tf.gather(fin, finals)))
        vector = None if nxt.vector is None else tf.gather(
            tf.reshape(nxt.vector, [T * B, -1]), rows)
        return self.io._join(images, vector)

    def __call__(self, args: tuple, fixed_shape: bool):
        """Runs the update on :meth:`inputs` (:class:`agents.update.call.TracedUpdate`)."""
        return self.traced(args, fixed_shape)

    def _update(self, floats, actions, mask, stats, *rest):
        """One update from a ``[T, B, ...]`` rollout (traced once per shape by tf.function);
        the arguments are :meth:`inputs`.

        Also stores the counters and normaliser statistics (assignments in the same graph cost
        nothing extra; eager assignments cost a TensorFlow call each). Returns
        ``([K + P]`` the metric values named by self.metric_keys then the flat actor weights,
        fetched together``[, [N] norms])``.
        """
        cfg, net = self.cfg, self.net
        images, action_mask, acted = self.io.split_images(rest)  # acted: [T, B] V(o_t) or None
        if net.recurrent:
            floats, (state0, start0, state_end) = self.io.split_recurrent(floats, cfg.num_envs)
            self.parts.counters.rollout_state.assign(state_end)
        (obs, next_obs, rewards, terminated, truncated, log_probs, env_steps_taken,
         norm_stats, scalars) = self.io.unpack(floats, actions, stats, *images)
        self.env_steps_var.assign_add(env_steps_taken)
        for n, (mean, var, count) in zip(self.normalizers, norm_stats):
            n.mean.assign(mean)
            n.var.assign(var)
            n.count.assign(count)
        # The scheduled values of this update (agents/schedules.py): the learning rates into the
        # optimizers, every value into the chain's context by its field name.
        self.optimizer.learning_rate.assign(scalars["learning_rate"])
        if self.critic_optimizer is not None:
            self.critic_optimizer.learning_rate.assign(scalars["critic_learning_rate"])
        T, B = tf.shape(rewards)[0], tf.shape(rewards)[1]

        def flat(x):  # [T, B, ...] -> [T B, ...], every part of an observation
            return _map(lambda y: tf.reshape(y, tf.concat([[T * B], tf.shape(y)[2:]], 0)), x)

        if net.recurrent:  # env-major sequences [B T, ...]: row b T + t is step t of env b
            def flat(x):  # noqa: F811  [T, B, ...] -> [B T, ...]
                return _map(lambda y: tf.reshape(
                    tf.transpose(y, tf.concat([[1, 0], tf.range(2, tf.rank(y))], 0)),
                    tf.concat([[T * B], tf.shape(y)[2:]], 0)), x)

            done = tf.maximum(terminated, truncated)
            starts = tf.concat([start0[None], done[:-1]], 0)  # [T, B] 1: reset before o_t
        # Recurrent pieces (sequence_length set): each starts from the state the core had at
        # its first step.
        length = cfg.sequence_steps()
        pieces = net.recurrent and int(cfg.sequence_length) > 0

        def time_major(rows):  # [B T, S] env-major -> [T, B, S]
            return tf.transpose(tf.reshape(rows, [B, T, -1]), [1, 0, 2])

        if net.recurrent and net.critic is not None:  # the critic's sequences, then V(o_{t+1})
            critic0 = tf.convert_to_tensor(self.parts.counters.critic_state)  # [B, Sc]
            seq_values, states = net.value_sequence(flat(obs), flat(starts), critic0, T)
            seq_next = net.value_after(flat(self.io.next_observations(next_obs)), states)
            self.parts.counters.critic_state.assign(
                tf.reshape(states, [B, T, -1])[:, -1])  # after the rollout: the next one's start
            values, next_values = (tf.transpose(tf.reshape(v, [B, T])) for v in (seq_values,
                                                                                  seq_next))
        elif net.critic is not None and net.encoder is not None and REUSE_NEXT_VALUES:
            values, next_values = self._encoded_values(obs, next_obs, T, B, acted)
        elif net.critic is not None and acted is not None:  # V(o_t) from acting: o_{t+1} only
            values = acted
            next_values = tf.reshape(self._chunked_values(
                flat(self.io.next_observations(next_obs)), T * B), [T, B])
        elif net.critic is not None:  # one critic pass over o_t and the o_{t+1} that followed
            next_obs = self.io.next_observations(next_obs)
            both = _map(lambda a, b: tf.concat([a, b], 0), flat(obs), flat(next_obs))
            if net.encoder is None:
                both = net.value(both)  # [2TB]
            else:  # images: in chunks, so that their float32 activations stay bounded
                both = self._chunked_values(both, 2 * T * B)
            values = tf.reshape(both[: T * B], [T, B])
            next_values = tf.reshape(both[T * B:], [T, B])
        else:
            values = next_values = tf.zeros_like(rewards)
        # [T, B] log pi(a_t | o_t) now, called by V-trace's targets only; .of(net): under the
        # reference policy (agents/update/reference.py)
        learner_log_probs = RolloutLogProbs(
            self.step.log_prob_only, net.head, flat(obs), flat(actions),
            None if action_mask is None else flat(action_mask), T, B)

        # The targets part (agents/update/targets.py): GAE, or V-trace with the learner's policy;
        # what it adds (V-trace's pi_prox) is fixed over the epochs and joins the chain's context.
        advantages, returns, extra = self.targets(rewards, terminated, truncated, values,
                                                  next_values, log_probs, learner_log_probs)
        data = {"obs": obs, "actions": actions, "advantages": advantages, "returns": returns,
                "values": values, "rewards": rewards, "behaviour_log_probs": log_probs, **extra}
        self.step.extra_keys = tuple(extra)
        if action_mask is not None:  # [T, B, n] the env's legal actions at each o_t
            data["action_mask"] = action_mask
        if net.recurrent:  # each row carries its sequence's first state (only those are read)
            data["episode_starts"] = starts
            if pieces:  # the actor's states as acting carried them (same weights: the rollout's)
                data["state0"] = piece_states(state0, time_major(net.actor_states(
                    flat(obs), flat(starts), state0, T)), length)  # [T, B, Sa]
            else:
                data["state0"] = tf.repeat(state0[None], T, axis=0)  # [T, B, Sa]
            if net.critic is not None:
                data["critic_state0"] = (piece_states(critic0, time_major(states), length)
                                         if pieces else tf.repeat(critic0[None], T, axis=0))
        data = {k: flat(v) for k, v in data.items()}  # [N, ...]
        if mask is not None:  # whole-episode batches: keep only the steps in the batch
            keep = flat(mask) > 0
            data = {k: _map(lambda x: tf.boolean_mask(x, keep), v) for k, v in data.items()}
        data = {k: _map(tf.stop_gradient, v) for k, v in data.items()}
        extra_out: tuple[tf.Tensor, ...] = ()
        diag: dict[str, tf.Tensor] = {}
        if cfg.diagnostics:  # the rollout's per-step gradients, before this update changes them
            acts = (data["actions"] if action_mask is None  # the masks ride with the actions
                    else (data["actions"], data["action_mask"]))
            diag, step_norms = diagnostics.update_diagnostics(
                self.step.log_prob_only, net.policy_variables, data["obs"], acts,
                data["advantages"], cfg.diagnostics_max_norm)
            extra_out = (step_norms,)
        sums, count = self._epochs(data, scalars)
        metrics = {k: v / tf.maximum(count, 1.0) for k, v in sums.items()}
        if self.critic_optimizer is not None:
            metrics["value_loss"] = self._critic_epochs(data)
        metrics.update(
            learning_rate=tf.cast(self.optimizer.learning_rate, tf.float32),
            **{name: scalars[name] for name in self.reported_schedules},
            batch_steps=tf.cast(tf.shape(data["advantages"])[0], tf.float32),
            advantage_mean=tf.reduce_mean(data["advantages"]),
            minibatch_updates=count,
            **diag,
        )
        if net.critic is not None:  # of the critic before this update, as SB3's
            metrics["explained_variance"] = explained_variance(data["values"], data["returns"])
        self.updates_var.assign_add(1)
        self.metric_keys = list(metrics)  # trace-time: the order of the stacked values
        values_out = tf.stack([tf.cast(tf.reshape(v, []), tf.float32) for v in metrics.values()])
        return (tf.concat([values_out, self.mirror.update_output()], 0), *extra_out)

    def _epochs(self, data: dict, scalars: dict) -> tuple[dict, tf.Tensor]:
        """Every minibatch step of the update (:func:`agents.update.epochs.policy_epochs`)."""
        return epochs.policy_epochs(self, data, scalars)

    def _critic_epochs(self, data: dict) -> tf.Tensor:
        """The critic's own passes (:func:`agents.update.epochs.critic_epochs`)."""
        return epochs.critic_epochs(self, data)

    # Kept for callers that drive one minibatch step by hand (tests/agents/test_ppo.py).
    def _minibatch(self, mb: dict, scalars: dict) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
        return self.step(mb, scalars)

    def _log_prob_only(self, obs, actions):
        return self.step.log_prob_only(obs, actions)
