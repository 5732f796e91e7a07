"""What an agent builds from its config for its env: the actor-critic network and the optimizer.

:class:`agents.base.ActorCriticAgent` calls these once, in its constructor, after it has the
env's spaces, their layout (:func:`pgrad.rl.observations.spaces.obs_layout`) and the resolved
encoder
(:func:`pgrad.rl.models.encoders.resolve`): :func:`check_encoder_options` refuses settings that do
not
fit the env's observations, :func:`network` builds the :class:`pgrad.rl.models.networks.ActorCritic`
with the action head the action space needs, and :func:`make_optimizer` the Keras optimizer the
config names.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

import pgrad._quiet_tf  # noqa: F401  (first: TensorFlow loads without its start-up lines)

# isort: split
import keras

import pgrad
from agents.config import ActorCriticConfig
from pgrad.rl.models import encoders
from pgrad.rl.models.networks import ActorCritic, actor_critic
from pgrad.rl.observations.spaces import ObsLayout


def make_optimizer(cfg: ActorCriticConfig, learning_rate: float) -> keras.optimizers.Optimizer:
    """The Keras optimizer the config names. Its learning rate is a variable each update sets
    from the schedule (:mod:`agents.schedules`); ``learning_rate`` is its start value."""
    if cfg.optimizer == "rmsprop":
        return keras.optimizers.RMSprop(learning_rate, rho=cfg.rmsprop_rho,
                                        epsilon=cfg.optimizer_eps)
    if cfg.optimizer == "adam":
        return keras.optimizers.Adam(learning_rate, epsilon=cfg.optimizer_eps)
    return keras.optimizers.SGD(learning_rate)


def check_encoder_options(cfg: ActorCriticConfig, layout: ObsLayout, encoder: Any,
                          env_name: str) -> None:
    """Raises ValueError for settings that do not fit this env's observations."""
    encoded = not (layout.flat and encoder == "mlp")
    where = f"env {env_name!r}"
    if cfg.normalize_obs and layout.vector_dim == 0:
        raise ValueError(f"normalize_obs normalises vector observations only; {where} "
                         "observes images alone (the network scales them); turn it off")
    if encoders.is_token_space(layout.space):
        check_token_options(cfg, encoder, where)
    if cfg.adversarial_epsilon > 0 and not layout.flat:
        raise ValueError(f"adversarial_epsilon attacks vector observations only; {where} "
                         "observes images")
    if encoded and cfg.shared_trunk:
        raise ValueError("shared_trunk applies to MLP policies on vector observations; with "
                         "an encoder actor and critic share it unless share_encoder is off")
    if encoded and cfg.critic_updates and cfg.share_encoder and cfg.baseline:
        raise ValueError("critic_updates needs a separate critic: set share_encoder=False "
                         "(the critic then has its own encoder)")


def check_token_options(cfg: ActorCriticConfig, encoder: Any, where: str) -> None:
    """Raises ValueError for settings that do not fit token observations (ids, not numbers)."""
    if cfg.normalize_obs:
        raise ValueError(f"normalize_obs: {where} observes token ids, which are names, not "
                         "quantities, and are not to be normalised; turn it off")
    if cfg.adversarial_epsilon > 0:
        raise ValueError(f"adversarial_epsilon perturbs observations by small amounts; {where} "
                         "observes token ids, which have no small changes; set it to 0")
    if encoder == "transformer" and cfg.recurrent:
        raise ValueError(f"recurrent={cfg.recurrent!r}: the transformer reads the whole context "
                         f"{where} observes, so it needs no recurrent core; set recurrent=''")


def network(cfg: ActorCriticConfig, layout: ObsLayout, encoder: Any, action_space: gym.Space,
            seed: int) -> ActorCritic:
    """The actor-critic network the config describes, for observations of ``layout`` (through
    the resolved ``encoder``) and an action head for ``action_space``."""

    def head_fn(latent: int) -> pgrad.ActionHead:
        return pgrad.make_head(action_space, cfg.log_std_init,
                               cfg.state_dependent_std, cfg.squash,
                               latent if cfg.use_sde else 0)

    return actor_critic(layout, head_fn, encoder, cfg.hidden,
                        cfg.activation, cfg.shared_trunk, cfg.share_encoder,
                        critic=cfg.baseline, trunk_grad_scale=cfg.trunk_grad_scale,
                        seed=seed, ortho_init=cfg.ortho_init,
                        recurrent=cfg.recurrent or None,
                        core_units=cfg.lstm_units,
                        critic_hidden=tuple(cfg.critic_hidden) or None,
                        transformer={"d_model": cfg.d_model, "num_heads": cfg.num_heads,
                                     "num_layers": cfg.num_layers,
                                     "ffn_dim": cfg.ffn_dim or None})
