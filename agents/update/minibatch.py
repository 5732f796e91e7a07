"""One gradient step of the actor-critic agent on a minibatch: the loss assembled around the
engine's policy gradient.

:class:`MinibatchStep` is called by :class:`agents.update.compiled.CompiledUpdate` inside its traced
update, once per minibatch (the epoch and minibatch loop lives there). A step runs the engine's
policy gradient through the chain on the current log-probabilities, adds the value and entropy
terms, clips by global norm, applies the Keras optimizer and reports the minibatch's metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

import pgrad
from agents import schedules
from agents.update import loss as loss_lib
from agents.update import targets
from pgrad.core.per_step import zeros_for_unconnected
from pgrad.transforms import standardized

#: What a chain may report about its own objective under these names (``clip_ratio`` does):
#: the update then uses them instead of computing them a second time.
REPORTED = ("clip_fraction", "approx_kl", "policy_loss")

#: Context key of ``log pi_prox(a_t | x_t)``, ``[M]``, for off-policy agents (IMPALA, APPO):
#: the learner's policy at the start of the update (V-trace's target policy, given by the
#: targets part, :mod:`agents.update.targets`) and fixed over the update's epochs. APPO's
#: decoupled clip (``clip_against="learner"``) clips ``pi / pi_prox``, each step weighted by
#: ``min(pg_rho_bar, pi_prox / mu)``.
PROXIMAL_KEY = targets.PROXIMAL_KEY

#: A token policy's steps of whole completions (the GRPO family) take their log-probs from one
#: causal pass per completion in a fused update (False: one pass per step's context; the
#: tests compare the two).
TOKEN_ROWS = True

#: Shared features (encoder or trunk): the value from the policy's own forward pass
#: (``net.params_and_value``), its loss in the engine's aux loss (False: a second pass for the
#: value; the tests compare the two).
ONE_PASS = True

#: With one pass and a chain that is its weighted sum alone (PPO's, A2C's): the policy
#: gradient and the value and entropy terms from one backward pass (``pgrad.engine.run``'s
#: ``fold_aux``); ``pg_grad_norm`` is then not reported (False: two backward passes; the tests
#: compare the two).
FOLD_AUX = True


def metric_name(key: str) -> str:
    """``'clip_per_step(1.0)/clip_fraction' -> 'clip_fraction'`` for the usual report keys."""
    last = key.rsplit("/", 1)[-1]
    return last if "/" in key and last in REPORTED else key


def firsts(rows: tf.Tensor, length: int) -> tf.Tensor:
    """``[B L, S]`` per-row copies -> ``[B, S]``: each env sequence's first row."""
    return tf.reshape(rows, [-1, length, rows.shape[-1]])[:, 0]


def values_of(net: Any, length: int, data: dict) -> tf.Tensor:
    """``[M]`` values of a batch of flat rows (recurrent: env-major sequences of ``length``
    steps, each from its first row's ``data["critic_state0"]``)."""
    if not net.recurrent:
        return net.value(data["obs"])
    return net.value_sequence(data["obs"], data["episode_starts"],
                              firsts(data["critic_state0"], length), length)[0]


class MinibatchStep:
    """``step(mb, scalars) -> (metrics, stop)``: one gradient step of the networks.

    Args:
      parts: the update's :class:`agents.update.parts.UpdateParts` (config, networks, chain and
        its state variable, optimizers).
    """

    def __init__(self, parts: Any):
        self.cfg, self.net, self.head = parts.cfg, parts.net, parts.net.head
        self.optimizer, self.critic_optimizer = parts.optimizer, parts.critic_optimizer
        self.transform, self.transform_state = parts.transform, parts.transform_state
        #: Keys the targets part added to the batch (trace time): they join the chain's context.
        self.extra_keys: tuple[str, ...] = ()
        #: Called after each applied policy step (TRPO's line search), or None.
        self.policy_step = parts.policy_step
        if self.policy_step is not None and parts.net.recurrent:
            raise ValueError("a line search (TRPO) needs a feed-forward policy: leave "
                             "recurrent unset.")
        # Terms a schedule can switch on: left out of the graph when constantly 0.
        self.clip_values = schedules.may_be_positive(parts.cfg.clip_range_vf, "clip_range_vf")
        #: :mod:`agents.inspection.update_hook`'s observer (sees each step's batch and results),
        #: or None: then nothing is added to the update.
        self.observer: Any = None
        self.entropy_bonus = schedules.may_be_positive(parts.cfg.ent_coef, "ent_coef")
        #: A token policy's log-probs by completion (:meth:`_token_rows`), built on first use.
        self.token_log_prob_fn: Callable[..., Any] | None = None

    @property
    def one_pass(self) -> bool:
        """A critic that shares the policy's features (an encoder or trunk) and its optimizer:
        its values come out of the policy's forward pass and its loss joins the entropy term as
        the engine's aux loss, differentiated from that same pass (the sum of the same terms;
        docs/performance.md, "PPO on MinAtar": the encoder's second forward and backward for
        the value were a third of a CNN update)."""
        net = self.net
        return (ONE_PASS and net.critic is not None and net.shares_features
                and self.critic_optimizer is None and not net.recurrent)

    @property
    def folded(self) -> bool:
        """One pass, and the engine folds the aux loss into the policy gradient's backward pass
        (see :data:`FOLD_AUX`)."""
        return FOLD_AUX and self.one_pass and pgrad.engine.folds_aux(self.transform,
                                                                     self.cfg.engine_path)

    def keys(self) -> list[str]:
        """The metric names one minibatch step reports (fixed: they are loop variables)."""
        form = self.transform.fused_form()
        fused = form is not None and self.cfg.engine_path != "full"
        keys = ["policy_loss", "value_loss", "entropy", "approx_kl"]
        if not self.folded:
            keys.append("pg_grad_norm")
        keys += ["grad_norm", "nonfinite_skipped", "path_fused"]
        if self.policy_step is not None:
            keys += list(self.policy_step.keys)
        if fused and form.needs_norms:
            keys.append("step_norm_mean")
        structure = tf.nest.pack_sequence_as(
            self.transform_state.template, [0.0] * len(self.transform_state.values))
        return keys + [metric_name(k) for k in self.transform.metrics(structure)]

    def _token_rows(self, mb: dict, one_pass: bool) -> bool:
        """The rows are a token policy's steps of whole completions (``sequence_ids`` from the
        GRPO family's targets) and the chain needs only their weighted sum: their log-probs
        then come from one causal pass per completion (:mod:`pgrad.rl.models.token_rows`;
        exact: a row whose context is not its completion's prefix is read on its own).
        A chain that asks for per-step gradients or norms keeps the row-by-row pass."""
        from pgrad.rl.models import token_rows

        form = self.transform.fused_form()
        if (not TOKEN_ROWS or "sequence_ids" not in mb or "action_mask" in mb or one_pass
                or form is None or form.needs_norms or self.cfg.engine_path == "full"
                or not token_rows.is_token_policy(self.net)):
            return False
        if self.token_log_prob_fn is None:
            self.token_log_prob_fn = token_rows.token_row_log_prob_fn(self.net, self.head)
        return True

    def log_prob_only(self, obs, actions):
        """``[N]`` log-probs; ``actions`` may be ``(actions, action masks)``."""
        actions, action_mask = actions if isinstance(actions, tuple) else (actions, None)
        return self.head.distribution(self.net.params(obs), action_mask).log_prob(actions)

    def _evaluator(self, mb: dict) -> Callable[[], tuple]:
        """``() -> (distribution, [M] log-probs)`` of the minibatch under the current weights."""
        mask = mb.get("action_mask")

        def evaluate():
            dist = self.head.distribution(self.net.params(mb["obs"]), mask)
            return dist, dist.log_prob(mb["actions"])

        return evaluate

    def __call__(self, mb: dict, scalars: dict) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
        """One gradient step on a minibatch of flat ``[M, ...]`` tensors.

        Returns ``(metrics, stop)``; ``stop`` is true when ``target_kl`` ended the update (the
        step was then not applied).
        """
        cfg, net, head = self.cfg, self.net, self.head
        policy_vars = net.policy_variables
        adv = mb["advantages"]
        if cfg.normalize_advantage:
            adv = standardized(adv)
        one_pass = self.one_pass

        def value_loss(values):  # [M] -> [] (PPO2's clipped form when clip_range_vf is on)
            return loss_lib.value_loss(values, mb["returns"], mb["values"],
                                       scalars["clip_range_vf"] if self.clip_values else 0.0)

        value_term = tf.constant(0.0)
        value_grads = []
        value_vars = net.variables if net.shares_features else net.value_only_variables
        if net.critic is not None and self.critic_optimizer is not None:
            value_term = loss_lib.value_loss(values_of(net, cfg.sequence_steps(), mb),
                                             mb["returns"])  # reported
        elif net.critic is not None and not one_pass:
            with tf.GradientTape() as tape:
                value_term = value_loss(values_of(net, cfg.sequence_steps(), mb))
                weighted = scalars["vf_coef"] * value_term
            value_grads = zeros_for_unconnected(tape.gradient(weighted, value_vars), value_vars)
        context = {"advantages": adv, "returns": mb["returns"], "values": mb["values"],
                   "old_values": mb["values"], "rewards": mb["rewards"],
                   "behaviour_log_probs": mb["behaviour_log_probs"], **scalars}
        context.update({k: mb[k] for k in self.extra_keys})  # the targets part's (V-trace's)
        if self.observer is not None:
            self.observer.batch(mb, context)

        # Recurrent: the rows are env-major sequences of L steps (whole env rollouts, or pieces
        # of them from their stored states: agents/update/compiled.py).
        length = cfg.sequence_steps() if net.recurrent else None

        def step_log_prob_fn(o, a, action_mask=None):  # masked: over the legal actions only
            if one_pass:
                params, values = net.params_and_value(o)
                extras = {"value": values}  # [M]
            else:
                params, extras = net.params(o), {}
            log_prob, entropy = head.log_prob_and_entropy(params, a, action_mask)  # [M], [M]
            return log_prob, {"entropy": entropy, **extras}

        log_prob_fn: Callable[..., tuple[tf.Tensor, dict[str, tf.Tensor]]] = step_log_prob_fn
        inputs: tuple[tf.Tensor, ...] = (mb["obs"], mb["actions"])
        if net.recurrent:  # row t through its sequence's prefix: d log pi(a_t | o_1..t)
            steps = cfg.sequence_steps()  # = length

            def sequence_log_prob_fn(o, starts, state0, a, action_mask=None):
                params = net.params_sequence(o, starts, firsts(state0, steps), steps)
                dist = head.distribution(params, action_mask)
                return dist.log_prob(a), {"entropy": dist.entropy()}

            log_prob_fn = sequence_log_prob_fn
            inputs = (mb["obs"], mb["episode_starts"], mb["state0"], mb["actions"])
        if self._token_rows(mb, one_pass):  # one causal pass per completion, not per token
            log_prob_fn = self.token_log_prob_fn or log_prob_fn  # set by _token_rows
            inputs = (mb["obs"], mb["actions"], mb["sequence_ids"])
        if "action_mask" in mb:
            inputs += (mb["action_mask"],)
        aux = None
        if self.entropy_bonus or one_pass:
            def aux(log_probs, extras):
                entropy = (extras["entropy"] if self.entropy_bonus
                           else tf.zeros_like(log_probs))
                value = value_loss(extras["value"]) if one_pass else 0.0
                return loss_lib.aux_loss(value, entropy, scalars["vf_coef"] if one_pass else 0.0,
                                         scalars["ent_coef"] if self.entropy_bonus else 0.0)

        aux_vars = net.variables if one_pass else policy_vars
        out = pgrad.run_engine(self.transform, self.transform_state.read(), log_prob_fn,
                               policy_vars, inputs, context, aux_loss=aux,
                               aux_variables=aux_vars, path=cfg.engine_path,
                               sequence_length=length, fold_aux=self.folded)
        if one_pass:
            value_term = value_loss(out.extras["value"])  # reported (the pass's own values)
        # Combine in the ascent direction, aligned with net.variables: policy gradient minus the
        # gradients of the losses (entropy term on the policy, value term on its variables).
        # Folded, out.grads already hold the aux term of the policy variables (their aux_grads
        # are zero).
        total = {id(v): g for v, g in zip(policy_vars, out.grads)}
        for v, g in zip(aux_vars, out.aux_grads or []):
            total[id(v)] = total[id(v)] - g if id(v) in total else -g
        for v, g in zip(value_vars, value_grads):
            total[id(v)] = total[id(v)] - g if id(v) in total else -g
        all_vars = net.variables
        grads = [total.get(id(v), tf.zeros(v.shape, v.dtype)) for v in all_vars]
        grad_norm = pgrad.global_norm(grads)
        if cfg.max_grad_norm > 0:
            grads, _ = tf.clip_by_global_norm(grads, cfg.max_grad_norm, use_norm=grad_norm)
        reported = {metric_name(k): tf.cast(v, tf.float32) for k, v in out.metrics.items()
                    if k not in ("grad_norm", "aux_folded")}
        kl = reported.pop("approx_kl", None)  # the chain's own, else the same estimate here
        if kl is None:
            kl = loss_lib.approx_kl(out.log_probs, mb["behaviour_log_probs"])
        policy_loss = reported.pop("policy_loss", None)
        if policy_loss is None:  # the plain policy loss -mean(A log pi), as SB3 reports it
            policy_loss = loss_lib.surrogate(out.log_probs, mb["behaviour_log_probs"], adv)
        stop = tf.constant(False)
        if cfg.target_kl > 0:
            stop = kl > 1.5 * cfg.target_kl
        finite = pgrad.all_finite(grads)  # computed once: apply_updates takes it as condition
        metrics = {
            "policy_loss": policy_loss,
            "value_loss": value_term,
            "entropy": tf.reduce_mean(out.extras["entropy"]),
            "approx_kl": kl,
            "grad_norm": grad_norm,
            "nonfinite_skipped": 1.0 - tf.cast(finite, tf.float32),
        }
        if "grad_norm" in out.metrics:  # the policy gradient's own (not when folded)
            metrics["pg_grad_norm"] = out.metrics["grad_norm"]
        metrics.update(reported)
        if self.policy_step is not None:  # the weights before the step, for its line search
            before = [tf.identity(v) for v in policy_vars]
            evaluate = self._evaluator(mb)
            old = evaluate()
        applied = pgrad.apply_updates(self.optimizer, grads, all_vars,
                                      condition=tf.logical_and(finite, tf.logical_not(stop)))
        if self.policy_step is not None:
            metrics.update(self.policy_step(policy_vars, before, evaluate, adv,
                                            mb["behaviour_log_probs"], old))
        if self.observer is not None:
            self.observer.result(out.grads, grad_norm, applied)
        # A skipped update leaves the transform state as it was, too.
        old = self.transform_state.read()
        self.transform_state.write(tf.nest.map_structure(
            lambda n, o: tf.where(applied, tf.cast(n, o.dtype), o), out.state, old))
        return metrics, stop
