"""Keras networks: MLPs and the actor-critic pair the agents train.

Layout of :class:`ActorCritic`, ``params = actor(trunk(encoder(obs)))`` and
``value = critic(trunk(critic_encoder(obs)))``:

* MLP policies on vector observations have no encoder (``obs`` is the flat float32 vector):
  separate (default): ``trunk`` is empty; ``actor`` and ``critic`` are full MLPs.
  shared: ``trunk`` holds the hidden layers; ``actor`` / ``critic`` are single output layers.
  The critic's gradient into the trunk is scaled by ``trunk_grad_scale`` (a custom-gradient
  identity) so the value loss cannot swamp the policy gradient in the shared features.
* Encoded policies (images, or the user's own encoder; :mod:`pgrad.rl.models.encoders`): the encoder
  maps the observation parts to features, ``trunk`` is empty and ``actor`` / ``critic`` are
  single output layers on the features. The critic uses the actor's encoder (shared, SB3's
  default) or its own copy (``critic_encoder``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import keras
import tensorflow as tf

from pgrad.rl import distributions as dist_lib
from pgrad.rl.models.dense import mlp  # noqa: F401 (pgrad.mlp; re-exported)
from pgrad.tools.ops import scale_gradient

if TYPE_CHECKING:
    from pgrad.rl.models.recurrent import RecurrentCore
    from pgrad.rl.observations.spaces import ObsLayout

ACTIVATIONS = ("tanh", "relu")


class ActorCritic:
    """Policy (and optionally value) networks over flat float32 observations, or over the
    features of an encoder.

    Args:
      obs_dim: observation width (with an encoder: its feature width).
      head: the action head (``pgrad.make_head``); its variables (Gaussian log-std) are policy
        variables.
      hidden: hidden layer widths (the actor's, and the critic's unless ``critic_hidden``).
      activation: ``"tanh"`` or ``"relu"``.
      shared: one trunk for actor and critic.
      critic: build a value network at all (REINFORCE without baseline does not).
      trunk_grad_scale: factor on the critic's gradient into a shared trunk.
      seed: initialiser seed.
      ortho_init: orthogonal initialisation (else PyTorch's default; see :func:`mlp`).
      encoder: a Keras layer ``observation -> [N, obs_dim]`` in front of everything (e.g.
        :class:`pgrad.rl.models.encoders.ObservationEncoder`), or None.
      critic_encoder: the critic's own encoder; None: the critic shares ``encoder``.
      recurrent: ``"lstm"`` / ``"gru"``: a recurrent core (:mod:`pgrad.rl.models.recurrent`) of
        ``core_units`` after the features, one for the actor and one for the critic
        (sb3-contrib's ``enable_critic_lstm``); the MLPs then read the core's output. None: none.
      critic_hidden: the critic's own hidden widths (separate networks only; SB3's
        ``net_arch=dict(pi=..., vf=...)``); None: ``hidden``.
    """

    def __init__(self, obs_dim: int, head: dist_lib.ActionHead, hidden: Sequence[int] = (64, 64),
                 activation: str = "tanh", shared: bool = False, critic: bool = True,
                 trunk_grad_scale: float = 1.0, seed: int = 0, ortho_init: bool = True,
                 encoder: keras.layers.Layer | None = None,
                 critic_encoder: keras.layers.Layer | None = None,
                 recurrent: str | None = None, core_units: int = 64,
                 critic_hidden: Sequence[int] | None = None):
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}; got {activation!r}.")
        self.encoder = encoder
        self.critic_encoder = critic_encoder if critic else None
        hidden = tuple(int(h) for h in hidden)
        if critic_hidden is not None and shared:
            raise ValueError("critic_hidden gives the critic its own layers; a shared trunk "
                             "gives it the actor's")
        self.head, self.activation, self.shared = head, activation, shared and bool(hidden)
        self.trunk_grad_scale = float(trunk_grad_scale)
        self.obs_dim = int(obs_dim)
        self.core = self.critic_core = None
        if recurrent:
            from pgrad.rl.models.recurrent import RecurrentCore

            if shared:
                raise ValueError("a recurrent policy has its own core for actor and critic; "
                                 "shared_trunk does not apply")
            self.core = RecurrentCore(recurrent, core_units, obs_dim, seed=seed + 5000,
                                      ortho_init=ortho_init, name="core")
            if critic:
                self.critic_core = RecurrentCore(recurrent, core_units, obs_dim, seed=seed + 6000,
                                                 ortho_init=ortho_init, name="critic_core")
            obs_dim = int(core_units)
        widths: tuple[int, ...]
        if self.shared:
            self.trunk = mlp(obs_dim, hidden, None, activation, 1.0, "trunk", seed=seed,
                             ortho_init=ortho_init)
            feat, widths = hidden[-1], ()
        else:
            self.trunk, feat, widths = None, obs_dim, hidden
        critic_widths = widths if critic_hidden is None else tuple(int(h) for h in critic_hidden)
        self.actor = mlp(feat, widths, head.output_size, activation, 0.01, "actor",
                         seed=seed + 1000, ortho_init=ortho_init)
        self.critic = (mlp(feat, critic_widths, 1, activation, 1.0, "critic", seed=seed + 2000,
                            ortho_init=ortho_init)
                       if critic else None)
        if not head.built:
            head.build((None, head.param_size))

    @property
    def recurrent(self) -> bool:
        """Whether a recurrent core carries state between steps."""
        return self.core is not None

    @property
    def state_sizes(self) -> tuple[int, int]:
        """``(S_actor, S_critic)``: state widths of the cores (0 without one)."""
        return (self.core.state_size if self.core is not None else 0,
                self.critic_core.state_size if self.critic_core is not None else 0)

    def _encoded(self, obs, critic: bool = False):
        if self.encoder is None:
            return obs
        own = critic and self.critic_encoder is not None
        encoder = self.critic_encoder if own else self.encoder
        assert encoder is not None
        return encoder(obs)

    def params_sequence(self, obs: Any, episode_starts: tf.Tensor, state0: tf.Tensor,
                        length: int | tf.Tensor) -> tf.Tensor:
        """Recurrent: ``[B L]`` env-major rows (see :mod:`pgrad.rl.models.recurrent`) ->
        ``[B L, param_size]``, each row through its sequence's prefix from ``state0 [B, S]``."""
        h, _ = self._recurrent(self.core).sequence(self._encoded(obs), episode_starts, state0,
                                                   length)
        return self._actor_params(h)

    def actor_states(self, obs: Any, episode_starts: tf.Tensor, state0: tf.Tensor,
                     length: int | tf.Tensor) -> tf.Tensor:
        """Recurrent: ``[B L, S]`` the actor core's state after each step of ``[B L]`` env-major
        rows from ``state0 [B, S]`` (the states acting carried, on the weights that acted)."""
        return self._recurrent(self.core).sequence(self._encoded(obs), episode_starts, state0,
                                                   length)[1]

    def actor_step(self, obs: Any, state: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Recurrent: one acting step, encoder (if any) -> core -> actor layers. ``(obs [N, ...]
        as the network reads it, state [N, S])`` -> ``(params [N, param_size], state after the
        step [N, S])``; no reset (zero the rows that start an episode first)."""
        h, state = self._recurrent(self.core).step(self._encoded(obs), state)
        return self._actor_params(h), state

    def value_sequence(self, obs: Any, episode_starts: tf.Tensor, state0: tf.Tensor,
                       length: int | tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Recurrent: ``([B L] values, [B L, S] critic states after each step)``."""
        h, states = self._recurrent(self.critic_core).sequence(
            self._encoded(obs, True), episode_starts, state0, length)
        return self._critic_net(h)[:, 0], states

    def value_after(self, obs: Any, states: tf.Tensor) -> tf.Tensor:
        """Recurrent: ``[N]`` values of observations that follow the ``[N, S]`` critic states
        (no reset: the final observation of an episode, ``V(o_{t+1})``)."""
        h, _ = self._recurrent(self.critic_core).step(self._encoded(obs, True), states)
        return self._critic_net(h)[:, 0]

    @staticmethod
    def _recurrent(core: RecurrentCore | None) -> RecurrentCore:
        if core is None:
            raise ValueError("not a recurrent network: it has no core")
        return core

    def _critic_net(self, x) -> tf.Tensor:
        if self.critic is None:
            raise ValueError("this network has no critic")
        return self.critic(x)

    def _actor_params(self, x) -> tf.Tensor:
        if not self.head.uses_latent:
            return self.actor(x)
        for layer in self.actor.layers[:-1]:
            x = layer(x)
        return tf.concat([self.actor.layers[-1](x), x], axis=1)

    def _features(self, obs, critic: bool = False) -> tf.Tensor:
        if self.encoder is not None:
            obs = self._encoded(obs, critic)
        return obs if self.trunk is None else self.trunk(obs)

    @property
    def shares_features(self) -> bool:
        """Whether the value depends on policy variables (a shared trunk or encoder)."""
        if self.critic is None:
            return False
        return self.trunk is not None or (self.encoder is not None
                                          and self.critic_encoder is None)

    def params(self, obs: Any) -> tf.Tensor:
        """``[N, obs_dim] -> [N, param_size]`` distribution parameters (for a head that uses the
        latent, the actor's outputs and then its last hidden features). With an encoder ``obs``
        is the observation as the encoder takes it
        (:class:`pgrad.rl.observations.spaces.ObsLayout`)."""
        if self.core is not None:
            raise ValueError("a recurrent policy's parameters depend on its state: use "
                             "params_sequence")
        return self._actor_params(self._features(obs))

    def value(self, obs: Any) -> tf.Tensor:
        """``[N, obs_dim] -> [N]`` state values (trunk gradient scaled when shared)."""
        if self.core is not None:
            raise ValueError("a recurrent critic's values depend on its state: use "
                             "value_sequence")
        feat = self._features(obs, critic=True)
        if self.trunk is not None and self.trunk_grad_scale != 1.0:
            feat = scale_gradient(feat, self.trunk_grad_scale)
        return self._critic_net(feat)[:, 0]

    def params_and_value(self, obs: Any) -> tuple[tf.Tensor, tf.Tensor]:
        """``(params(obs) [N, param_size], value(obs) [N])`` with the features the actor and
        critic share (:attr:`shares_features`) computed once: one forward pass, and so one
        backward pass through them for a loss of both (the critic's gradient into a shared
        trunk scaled by ``trunk_grad_scale`` as in :meth:`value`)."""
        if not self.shares_features or self.critic_encoder is not None:  # features differ
            return self.params(obs), self.value(obs)
        if self.core is not None:
            raise ValueError("a recurrent policy's parameters depend on its state: use "
                             "params_sequence")
        feat = self._features(obs)
        critic_in = feat
        if self.trunk is not None and self.trunk_grad_scale != 1.0:
            critic_in = scale_gradient(feat, self.trunk_grad_scale)
        return self._actor_params(feat), self._critic_net(critic_in)[:, 0]

    @property
    def policy_variables(self) -> list[tf.Variable]:
        """Everything the policy's log-probabilities depend on (encoder, trunk, actor, head)."""
        enc = list(self.encoder.trainable_variables) if self.encoder is not None else []
        trunk = list(self.trunk.trainable_variables) if self.trunk is not None else []
        core = list(self.core.trainable_variables) if self.core is not None else []
        return (enc + trunk + core + list(self.actor.trainable_variables)
                + list(self.head.trainable_variables))

    @property
    def value_only_variables(self) -> list[tf.Variable]:
        """Critic variables the policy does not use (its own encoder, if any, then the critic)."""
        if self.critic is None:
            return []
        enc = (list(self.critic_encoder.trainable_variables)
               if self.critic_encoder is not None else [])
        core = (list(self.critic_core.trainable_variables)
                if self.critic_core is not None else [])
        return enc + core + list(self.critic.trainable_variables)

    @property
    def variables(self) -> list[tf.Variable]:
        """All trainable variables: policy variables first, then value-only ones."""
        return self.policy_variables + self.value_only_variables

    def modules(self) -> dict[str, object]:
        """Trackable pieces for checkpoints."""
        out = {"actor": self.actor, "head": self.head}
        if self.trunk is not None:
            out["trunk"] = self.trunk
        if self.critic is not None:
            out["critic"] = self.critic
        if self.encoder is not None:
            out["encoder"] = self.encoder
        if self.critic_encoder is not None:
            out["critic_encoder"] = self.critic_encoder
        if self.core is not None:
            out["core"] = self.core
        if self.critic_core is not None:
            out["critic_core"] = self.critic_core
        return out


def actor_critic(layout: ObsLayout, head_fn: Callable[[int], dist_lib.ActionHead],
                 encoder: Any = "mlp", hidden: Sequence[int] = (64, 64),
                 activation: str = "tanh", shared_trunk: bool = False, share_encoder: bool = True,
                 critic: bool = True, trunk_grad_scale: float = 1.0, seed: int = 0,
                 ortho_init: bool = True, recurrent: str | None = None,
                 core_units: int = 64, critic_hidden: Sequence[int] | None = None,
                 transformer: dict[str, Any] | None = None) -> ActorCritic:
    """The :class:`ActorCritic` for an observation layout and a (resolved) encoder.

    Vector observations with the ``"mlp"`` encoder give the plain MLP networks (no encoder;
    ``shared_trunk`` decides the sharing). Otherwise an
    :class:`pgrad.rl.models.encoders.ObservationEncoder` feeds single-layer heads and
    ``share_encoder`` decides whether the critic has its own copy.

    Args:
      layout: :func:`pgrad.rl.observations.spaces.obs_layout` of the observation space.
      head_fn: ``fn(latent_dim) -> ActionHead``: the head, given the width of the actor's last
        features (what gSDE reads).
      encoder: as :func:`pgrad.rl.models.encoders.resolve` returns it.
      critic_hidden: the critic's own MLP widths (vector observations, separate networks);
        None: ``hidden``.
      transformer: the ``"transformer"`` encoder's sizes (``d_model``, ``num_heads``,
        ``num_layers``, ``ffn_dim``; :class:`pgrad.rl.models.encoders.ObservationEncoder`).
    """
    from pgrad.rl.models import encoders
    hidden = tuple(int(h) for h in hidden)
    if layout.flat and encoder == "mlp":
        head = head_fn(hidden[-1] if hidden else (core_units if recurrent
                                                  else layout.vector_dim))
        return ActorCritic(layout.vector_dim, head, hidden, activation, shared_trunk, critic,
                           trunk_grad_scale, seed, ortho_init, recurrent=recurrent,
                           core_units=core_units, critic_hidden=critic_hidden)
    if critic_hidden is not None:
        raise ValueError("critic_hidden applies to MLP policies on vector observations; with an "
                         "encoder actor and critic read its features through one output layer "
                         "each")
    opts: dict[str, Any] = {"hidden": hidden, "activation": activation, "ortho_init": ortho_init,
                            "transformer": transformer}
    enc = encoders.ObservationEncoder(layout, encoder, seed=seed + 3000, name="encoder", **opts)
    critic_enc = None
    if critic and not share_encoder:
        critic_enc = encoders.encoder_copy(encoder, layout, seed=seed + 4000,
                                           name="critic_encoder", **opts)
    return ActorCritic(enc.feature_dim, head_fn(core_units if recurrent else enc.feature_dim),
                       (), activation, False, critic, trunk_grad_scale, seed, ortho_init,
                       encoder=enc, critic_encoder=critic_enc, recurrent=recurrent,
                       core_units=core_units)


