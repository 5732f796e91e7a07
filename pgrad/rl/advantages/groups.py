"""Group-relative advantages for sequence tasks (GRPO, Dr. GRPO, RLOO), as pure functions.

A batch holds ``N = num_groups * G`` completions, one reward each (``r`` ``[N]``); the ``G``
completions of one prompt are consecutive rows (TRL's ``num_generations`` layout):
completion ``n`` belongs to group ``n // G``. Every advantage is a function of the rewards of
its own group, except where a batch statistic is asked for (``scale_rewards="batch"``).

A reward that is NaN marks an unscorable completion (TRL's convention): it is left out of every
mean and std, and its advantage is 0.

The per-completion advantage reaches the tokens through :func:`broadcast_to_tokens`, and
:func:`token_context` lays ``[N, L]`` token tensors out as the flat ``[N * L]`` rows the engine's
context holds (see :mod:`pgrad.transforms.sequence`).
"""

from __future__ import annotations

import tensorflow as tf

#: TRL's additive constant under the std (``advantages / (std + 1e-4)``).
STD_EPS = 1e-4

_SCALES = {"group": "group", "batch": "batch", "none": "none", True: "group", False: "none"}


def _grouped(rewards: tf.Tensor, group_size: int, who: str) -> tf.Tensor:
    """``[N]`` rewards as ``[N / G, G]``, or a ValueError if ``G`` does not divide ``N``."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"{who}: group_size must be a positive int; got {group_size!r}.")
    r = tf.cast(tf.convert_to_tensor(rewards), tf.float32)
    if r.shape.rank != 1:
        raise ValueError(f"{who}: rewards must be [N] (one per completion); got shape {r.shape}.")
    n = r.shape[0]
    if n is not None and n % group_size:
        raise ValueError(f"{who}: group size G={group_size} does not divide the batch N={n}.")
    if n is None:
        tf.debugging.assert_equal(tf.shape(r)[0] % group_size, 0, message=(
            f"{who}: group size G={group_size} does not divide the batch N."))
    return tf.reshape(r, [-1, group_size])  # [N / G, G]


def _nan_moments(x: tf.Tensor, axis=None) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """``(count, mean, sample std)`` of the non-NaN entries along ``axis`` (keepdims).

    The std is the unbiased one (divides by ``count - 1``), NaN where ``count < 2``: TRL's
    ``nanstd``. The mean is NaN where ``count == 0``.
    """
    valid = tf.logical_not(tf.math.is_nan(x))
    x0 = tf.where(valid, x, 0.0)
    count = tf.reduce_sum(tf.cast(valid, tf.float32), axis=axis, keepdims=True)
    mean = tf.reduce_sum(x0, axis=axis, keepdims=True) / count  # NaN where no entry
    sq = tf.where(valid, tf.square(x - mean), 0.0)
    var = tf.reduce_sum(sq, axis=axis, keepdims=True) / (count - 1.0)
    var = tf.where(count > 1.0, var, tf.fill(tf.shape(var), float("nan")))
    return count, mean, tf.sqrt(var)


def _zero_nan(x: tf.Tensor) -> tf.Tensor:
    return tf.where(tf.math.is_nan(x), tf.zeros_like(x), x)


def group_advantages(rewards: tf.Tensor, group_size: int, scale_rewards: str | bool = "group",
                     eps: float = STD_EPS) -> tf.Tensor:
    """GRPO's group-relative advantages, ``A_n = (r_n - mean_g r) / (std + eps)``.

    ``mean_g`` is the mean reward of completion ``n``'s group. ``std`` is (TRL's
    ``scale_rewards``):

    * ``"group"`` / ``True`` -- the sample std (``ddof=1``, torch's ``.std()``) of the group's
      rewards (DeepSeekMath's GRPO);
    * ``"batch"`` -- the sample std of every reward in the batch (the mean stays the group's);
    * ``"none"`` / ``False`` -- no scaling, ``A_n = r_n - mean_g r`` (Dr. GRPO).

    Args:
      rewards: ``[N]`` one reward per completion, ``N = num_groups * G``, groups consecutive.
      group_size: ``G``, completions per prompt.
      scale_rewards: see above.
      eps: added to the std (TRL: ``1e-4``).

    Returns:
      ``[N]`` float32 advantages (0 for a NaN reward, and for a group whose std is undefined:
      one scorable member, or ``G = 1``).

    Raises:
      ValueError: ``G`` does not divide ``N``, or an unknown ``scale_rewards``.
    """
    who = "group_advantages"
    if not isinstance(scale_rewards, (str, bool)) or scale_rewards not in _SCALES:
        raise ValueError(f"{who}: scale_rewards must be 'group', 'batch', 'none', True or False; "
                         f"got {scale_rewards!r}.")
    mode = _SCALES[scale_rewards]
    grouped = _grouped(rewards, group_size, who)  # [N / G, G]
    _, mean, group_std = _nan_moments(grouped, axis=1)  # [N / G, 1]
    adv = grouped - mean  # [N / G, G]
    if mode == "group":
        adv = adv / (group_std + eps)
    elif mode == "batch":
        adv = adv / (_nan_moments(grouped)[2] + eps)  # one std over every reward
    return _zero_nan(tf.reshape(adv, [-1]))


#: ``baseline`` values of :func:`process_advantages`.
PROCESS_BASELINES = ("steps", "position")


def discounted_to_go(rewards: tf.Tensor, live: tf.Tensor, gamma: float) -> tf.Tensor:
    """``G_t = sum_{u >= t, live} gamma^(u - t) r_u`` down each column (``gamma = 0``: each live
    step's own reward; ``0^0 = 1``).

    Args:
      rewards: ``[T, B]``; live: ``[T, B]`` 1 on a completion's steps (rewards elsewhere are
        ignored); gamma: in ``[0, 1]``.

    Returns:
      ``[T, B]`` float32, 0 off the live steps.
    """
    on = tf.cast(tf.cast(live, tf.float32) > 0, tf.float32)
    r = tf.cast(rewards, tf.float32) * on
    t = tf.range(tf.shape(r)[0])
    gap = tf.cast(t[None, :] - t[:, None], tf.float32)  # [T(t), T(u)]: u - t
    discount = tf.where(gap >= 0, tf.pow(tf.constant(gamma, tf.float32), tf.maximum(gap, 0.0)),
                        0.0)  # [T, T]
    return tf.matmul(discount, r) * on  # [T, B]


def process_advantages(rewards: tf.Tensor, live: tf.Tensor, group_size: int,
                       scale_rewards: str | bool = "group", eps: float = STD_EPS,
                       gamma: float = 1.0, baseline: str = "steps") -> tf.Tensor:
    """Process-supervised GRPO: per-token advantages from per-step rewards.

    Two baselines:

    * ``"steps"`` (DeepSeekMath, section 4.1.3): each step's reward normalised by its group's
      step rewards, ``r~_{i,t} = (r_{i,t} - mean_g r) / (std_g r + eps)`` over every live step
      reward of the group (every token of its ``G`` completions), then
      ``A_{i,t} = sum_{t' >= t} gamma^(t' - t) r~_{i,t'}``;
    * ``"position"``: the rewards-to-go ``G_{i,t} = sum_{t' >= t} gamma^(t' - t) r_{i,t'}``
      minus the mean of ``G_{j,t}`` over the group's completions ``j`` still live at position
      ``t``, divided by their std (+ eps): outcome GRPO at every position (at ``t = 0`` with
      ``gamma = 1`` it is outcome GRPO exactly). It carries no bias toward short completions:
      a token is compared with the other completions' tokens at the same position.

    ``gamma`` discounts the rewards-to-go (1: the sum to the completion's end; 0: each token's
    own reward). ``scale_rewards`` as in :func:`group_advantages`: ``"group"`` the std above,
    ``"batch"`` one std over every live step of the batch (its rewards for ``"steps"``, its
    rewards-to-go for ``"position"``), ``"none"`` no division.

    Args:
      rewards: ``[T, B]`` each step's reward; completion ``b`` is column ``b``, groups
        consecutive columns.
      live: ``[T, B]`` 1 on completion ``b``'s steps, 0 after it ended.
      group_size: ``G``.
      gamma: the discount in ``[0, 1]``.
      baseline: ``"steps"`` or ``"position"``.

    Returns:
      ``[T, B]`` float32 advantages, 0 off the live steps (and where a std is undefined: one
      live member).

    Raises:
      ValueError: ``G`` does not divide ``B``, or an unknown ``scale_rewards``, ``gamma`` or
        ``baseline``.
    """
    who = "process_advantages"
    if not isinstance(scale_rewards, (str, bool)) or scale_rewards not in _SCALES:
        raise ValueError(f"{who}: scale_rewards must be 'group', 'batch', 'none', True or False; "
                         f"got {scale_rewards!r}.")
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0 <= gamma <= 1:
        raise ValueError(f"{who}: gamma must be a number in [0, 1]; got {gamma!r}.")
    if baseline not in PROCESS_BASELINES:
        raise ValueError(f"{who}: baseline must be one of {PROCESS_BASELINES}; got "
                         f"{baseline!r}.")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"{who}: group_size must be a positive int; got {group_size!r}.")
    mode = _SCALES[scale_rewards]
    r = tf.cast(rewards, tf.float32)
    on = tf.cast(live, tf.float32) > 0
    width = r.shape[1]
    if width is not None and width % group_size:
        raise ValueError(f"{who}: group size G={group_size} does not divide the batch's "
                         f"{width} completions.")
    if baseline == "position":
        to_go = tf.where(on, discounted_to_go(r, on, float(gamma)), float("nan"))  # [T, B]
        grouped = tf.reshape(to_go, [tf.shape(r)[0], -1, group_size])  # [T, B / G, G]
        _, mean, std = _nan_moments(grouped, axis=2)  # [T, B / G, 1] per position and group
        adv = grouped - mean
        if mode == "group":
            adv = adv / (std + eps)
        elif mode == "batch":
            adv = adv / (_nan_moments(grouped)[2] + eps)
        return _zero_nan(tf.reshape(adv, tf.shape(r))) * tf.cast(on, tf.float32)
    steps = tf.transpose(tf.where(on, r, float("nan")))  # [B, T], NaN off the live steps
    b, T = tf.shape(steps)[0], tf.shape(steps)[1]
    grouped = tf.reshape(steps, [-1, group_size * T])  # [B / G, G T]
    _, mean, std = _nan_moments(grouped, axis=1)
    norm = grouped - mean
    if mode == "group":
        norm = norm / (std + eps)
    elif mode == "batch":
        norm = norm / (_nan_moments(grouped)[2] + eps)
    norm = tf.transpose(_zero_nan(tf.reshape(norm, [b, T])))  # [T, B]
    return discounted_to_go(norm, on, float(gamma))


def rloo_advantages(rewards: tf.Tensor, group_size: int, normalize: bool = False,
                    eps: float = STD_EPS) -> tf.Tensor:
    """RLOO's leave-one-out advantages (Ahmadian et al. 2024), ``A_n = r_n - b_n``.

    ``b_n = (sum_{m in g, m != n} r_m) / (G - 1)``, the mean reward of the other members of
    completion ``n``'s group (of its other *scorable* members, with NaN rewards). Equivalently
    ``A_n = G / (G - 1) * (r_n - mean_g r)``. With ``normalize`` the advantages are then
    standardised over the batch, ``(A - mean A) / (std A + eps)`` (sample std; TRL's
    ``normalize_advantages``).

    Args:
      rewards: ``[N]`` one reward per completion, groups of ``G`` consecutive.
      group_size: ``G``; ``G = 1`` has no other member: every advantage is 0.
      normalize: standardise over the batch afterwards.
      eps: added to the std when normalising.

    Returns:
      ``[N]`` float32 advantages (0 for a NaN reward or a lone scorable member).
    """
    grouped = _grouped(rewards, group_size, "rloo_advantages")  # [N / G, G]
    if group_size == 1:
        return tf.zeros([tf.size(grouped)], tf.float32)
    count = tf.reduce_sum(tf.cast(tf.logical_not(tf.math.is_nan(grouped)), tf.float32), axis=1,
                          keepdims=True)  # [N / G, 1] scorable members
    total = tf.reduce_sum(_zero_nan(grouped), axis=1, keepdims=True)  # [N / G, 1]
    baseline = (total - grouped) / (count - 1.0)  # [N / G, G], NaN/inf for a lone member
    adv = tf.reshape(grouped - baseline, [-1])  # [N]
    adv = tf.where(tf.math.is_finite(adv), adv, float("nan"))
    if normalize:
        _, mean, std = _nan_moments(adv)
        adv = (adv - mean) / (std + eps)
    return _zero_nan(adv)


def broadcast_to_tokens(advantages: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """``[N, L]``: completion ``n``'s advantage on each of its tokens, 0 where ``mask`` is 0.

    Args:
      advantages: ``[N]`` per completion.
      mask: ``[N, L]`` 1 for a completion token, 0 for padding.
    """
    adv = tf.cast(tf.convert_to_tensor(advantages), tf.float32)
    m = tf.cast(tf.convert_to_tensor(mask), tf.float32)
    if adv.shape.rank != 1 or m.shape.rank != 2:
        raise ValueError(f"broadcast_to_tokens: advantages must be [N] and mask [N, L]; got "
                         f"{adv.shape} and {m.shape}.")
    if adv.shape[0] is not None and m.shape[0] is not None and adv.shape[0] != m.shape[0]:
        raise ValueError(f"broadcast_to_tokens: {adv.shape[0]} advantages for {m.shape[0]} "
                         "completions in the mask.")
    return adv[:, None] * m


def token_context(mask: tf.Tensor, advantages: tf.Tensor | None = None,
                  **per_token: tf.Tensor) -> dict[str, tf.Tensor]:
    """The engine's flat context for ``N`` completions padded to ``L`` tokens.

    Row ``n * L + l`` is token ``l`` of completion ``n`` (padding rows included, masked out),
    the layout of ``tf.reshape(x, [-1])`` of a ``[N, L]`` tensor.

    Args:
      mask: ``[N, L]`` 1 for a completion token, 0 for padding.
      advantages: optional ``[N]`` per-completion advantages (broadcast to their tokens).
      **per_token: ``[N, L]`` tensors to flatten (e.g. ``behaviour_log_probs``,
        ``ref_log_probs``).

    Returns:
      ``{"sequence_ids": [N*L] int32, "completion_mask": [N*L], "num_sequences": [] int32,
      "advantages": [N*L]?, **{key: [N*L]}}``.
    """
    m = tf.cast(tf.convert_to_tensor(mask), tf.float32)
    if m.shape.rank != 2:
        raise ValueError(f"token_context: mask must be [N, L]; got shape {m.shape}.")
    n, length = tf.shape(m)[0], tf.shape(m)[1]
    ctx = {
        "sequence_ids": tf.reshape(tf.repeat(tf.range(n), length), [-1]),  # [N*L]
        "completion_mask": tf.reshape(m, [-1]),  # [N*L]
        "num_sequences": n,
    }
    if advantages is not None:
        ctx["advantages"] = tf.reshape(broadcast_to_tokens(advantages, m), [-1])
    for key, value in per_token.items():
        v = tf.convert_to_tensor(value)
        if v.shape.rank != 2:
            raise ValueError(f"token_context: {key} must be [N, L] like the mask; got {v.shape}.")
        ctx[key] = tf.reshape(v, [-1])
    return ctx


__all__ = ["PROCESS_BASELINES", "STD_EPS", "broadcast_to_tokens", "discounted_to_go",
           "group_advantages", "process_advantages", "rloo_advantages", "token_context"]
