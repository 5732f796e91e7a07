"""Credit assignment among many agents as a per-step scale: COMA's counterfactual advantage.

For agent ``a`` acting ``u_a`` beside the other agents' actions ``u_-a``, COMA (Foerster et al.
2018) weights ``grad log pi_a(u_a | tau_a)`` by

    ``A_a = Q(s, (u_-a, u_a)) - sum_{u'} pi_a(u' | tau_a) Q(s, (u_-a, u'))``

where ``Q`` is a centralised critic that answers, for the state and the other agents' actions,
one value per action of agent ``a``. The baseline marginalises agent ``a``'s own action only,
so it does not change the expected gradient, and the difference says how much better the team
did because ``a`` chose ``u_a`` rather than its policy's average: the agent's share of the team's
return.

The transform reads, per step (one row per agent and step):

* ``context["q_values"]`` ``[T, k]`` -- ``Q(s, (u_-a, u'))`` for every action ``u'`` of the
  acting agent;
* ``context["action_probs"]`` ``[T, k]`` -- ``pi_a(u' | tau_a)``;
* ``context["taken_actions"]`` ``[T]`` int -- ``u_a``.

The learner that owns the critic puts them there (``ippo``/``mappo`` with ``credit="coma"``:
:mod:`pgrad.rl.multiagent.counterfactual`); the key names are arguments.
"""

from __future__ import annotations

import tensorflow as tf

from pgrad.transforms.base import StepScale, TransformError, empty_init, per_step_scale
from pgrad.transforms.builtins import clip_ratio, standardized

#: The context keys the transform reads by default.
Q_KEY, PROBS_KEY, ACTIONS_KEY = "q_values", "action_probs", "taken_actions"

_ADVANTAGE = "_counterfactual_advantages"  # the key clip_ratio reads inside the transform


def _per_action(ctx: dict, key: str, who: str) -> tf.Tensor:
    """``ctx[key]`` as ``[T, k]`` float32, or one line naming ``who`` and what is wrong."""
    if key not in ctx or ctx[key] is None:
        have = sorted(k for k, v in ctx.items() if v is not None and not k.startswith("_"))
        raise TransformError(f"{who}: the context has no {key!r} ([T, k], one value per action "
                             f"of the acting agent); it has {have}.")
    x = tf.cast(ctx[key], tf.float32)
    if x.shape.rank is not None and x.shape.rank != 2:
        raise TransformError(f"{who}: context[{key!r}] must be [T, k] (one value per action); "
                             f"got shape {x.shape.as_list()}.")
    return x


def counterfactual_advantages(q_values: tf.Tensor, action_probs: tf.Tensor, actions: tf.Tensor,
                              who: str = "counterfactual_advantages") -> tf.Tensor:
    """``[T]`` COMA advantages ``Q[t, u_t] - sum_u probs[t, u] Q[t, u]``.

    Args:
      q_values: ``[T, k]`` the critic's value of each action of the acting agent (the other
        agents' actions held at theirs).
      action_probs: ``[T, k]`` the acting agent's policy over its actions.
      actions: ``[T]`` int, the action it took.
      who: the name errors give.

    Raises:
      TransformError: the shapes disagree (the action counts, or the steps).
    """
    q, p = tf.convert_to_tensor(q_values), tf.convert_to_tensor(action_probs)
    k_q, k_p = q.shape[-1], p.shape[-1]
    if k_q is not None and k_p is not None and k_q != k_p:
        raise TransformError(f"{who}: q_values has {k_q} actions per step but action_probs "
                             f"has {k_p}; both count the acting agent's actions.")
    actions = tf.convert_to_tensor(actions)
    if not actions.dtype.is_integer:
        raise TransformError(f"{who}: the taken actions must be integers (a discrete action "
                             f"space); got {actions.dtype.name}.")
    if actions.shape.rank is not None and actions.shape.rank != 1:
        raise TransformError(f"{who}: the taken actions must be [T]; got shape "
                             f"{actions.shape.as_list()}.")
    for name, x in (("action_probs", p), ("taken_actions", actions)):
        if q.shape[0] is not None and x.shape[0] is not None and q.shape[0] != x.shape[0]:
            raise TransformError(f"{who}: q_values has {q.shape[0]} steps but {name} has "
                                 f"{x.shape[0]}.")
    taken = tf.gather(q, tf.cast(actions, tf.int32), axis=1, batch_dims=1)  # [T] Q(s, u)
    baseline = tf.reduce_sum(p * q, axis=1)  # [T] sum_u' pi(u') Q(s, (u_-a, u'))
    return taken - baseline


def counterfactual_advantage(
    epsilon: float | str | None = None,
    *,
    standardize: bool = False,
    q_key: str = Q_KEY,
    probs_key: str = PROBS_KEY,
    actions_key: str = ACTIONS_KEY,
    behaviour_key: str = "behaviour_log_probs",
) -> StepScale:
    """Weights step ``t`` by its COMA advantage (module docstring), optionally through PPO's clip.

    Args:
      epsilon: None: the weight is ``A_t`` (COMA's actor-critic gradient). A clip range (or the
        name of a context key holding one, e.g. ``"clip_range"``): the weight is PPO's clipped
        surrogate on ``A_t``, ``A_t r_t 1[not clipped]`` (:func:`~pgrad.transforms.builtins.
        clip_ratio`, with its ``clip_fraction``/``approx_kl``/``policy_loss`` reports).
      standardize: standardise ``A_t`` over the batch first (as PPO's ``normalize_advantage``).
      q_key, probs_key, actions_key: the context keys of ``Q`` ``[T, k]``, the policy's
        probabilities ``[T, k]`` and the taken actions ``[T]``.
      behaviour_key: with ``epsilon``, the key of the acting policy's log-probabilities.

    Follow it with ``mean_steps()``; the engine runs it on the fused path (one scalar per step).
    """
    who = "counterfactual_advantage"
    ppo = None if epsilon is None else clip_ratio(epsilon, key=_ADVANTAGE,
                                                  behaviour_key=behaviour_key)

    def scale(norms, state, *, num_steps, **ctx):
        if actions_key not in ctx or ctx[actions_key] is None:
            raise TransformError(f"{who}: the context has no {actions_key!r} ([T] int, the "
                                 f"acting agent's action at each step).")
        adv = counterfactual_advantages(_per_action(ctx, q_key, who),
                                        _per_action(ctx, probs_key, who), ctx[actions_key], who)
        if standardize:
            adv = standardized(adv)
        if ppo is None:
            return adv, state
        return ppo.scale(norms, state, num_steps=num_steps, **{**ctx, _ADVANTAGE: adv})

    return per_step_scale(scale, empty_init if ppo is None else ppo.init, name=who)
