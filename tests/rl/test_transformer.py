"""The causal Transformer token policy: causality, the KV cache, the encoder, log-probs, grads."""

from __future__ import annotations

import functools
import warnings

import gymnasium as gym
import keras
import numpy as np
import pytest
import tensorflow as tf

import pgrad
from pgrad.core import taps
from pgrad.rl.acting.compiled_actor import CompiledActor
from pgrad.rl.acting.transformer_actor import CachedTransformerActor
from pgrad.rl.models.networks import actor_critic
from pgrad.rl.models.token_encoder import (
    CausalLM,
    TokenEncoder,
    completion_mask,
    context_lengths,
    last_position_features,
    per_token_log_probs,
    policy_logits_fn,
    token_space_sizes,
    transformer_encoder,
)
from pgrad.rl.models.transformer import CausalTransformer
from pgrad.rl.observations import spaces

V, L = 7, 8  # vocabulary (0 pads), context length
SPACE = gym.spaces.Box(0, V - 1, (L,), np.int64)


def tiny(seed: int = 0, **kw) -> CausalTransformer:
    return CausalTransformer(V, L, **{"d_model": 16, "num_heads": 2, "num_layers": 2,
                                      "seed": seed, **kw})


def contexts(lengths, seed: int = 0) -> np.ndarray:
    """``[N, L]`` int64 random contexts of the given lengths, padded with 0."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, V, (len(lengths), L))
    return np.where(np.arange(L)[None] < np.asarray(lengths)[:, None], ids, 0).astype(np.int64)


# -- the full forward pass ----------------------------------------------------------------------


def test_padding_after_the_context_does_not_reach_its_positions():
    model = tiny()
    ids = contexts([3, 5, 8])
    other = ids.copy()
    other[0, 3:] = [4, 1, 2, 6, 5]  # row 0's positions past its end hold other tokens
    other[1, 5:] = 3
    a, b = model(ids).numpy(), model(other).numpy()
    assert a.shape == (3, L, 16)
    np.testing.assert_array_equal(a[0, :3], b[0, :3])
    np.testing.assert_array_equal(a[1, :5], b[1, :5])
    assert not np.allclose(a[0, 3:], b[0, 3:])  # the later positions did read them
    # A context alone (no padding at all) has the same features as padded.
    np.testing.assert_allclose(model(ids[:1, :3]).numpy()[0], a[0, :3], atol=1e-6)


def test_sizes_come_from_the_config_and_bad_ones_are_refused():
    model = tiny(d_model=24, num_heads=3, num_layers=3, ffn_dim=40)
    assert len(model.blocks) == 3 and model.blocks[0].fc1.units == 40
    assert model.position_embedding.input_dim == L and model.token_embedding.input_dim == V
    assert model.cache_shape == (3, 2, None, 3, L, 8)
    with pytest.raises(ValueError, match=r"d_model \(10\) must be divisible by num_heads \(4\)"):
        CausalTransformer(V, L, d_model=10, num_heads=4)
    with pytest.raises(ValueError, match="num_layers must be a positive integer"):
        CausalTransformer(V, L, num_layers=0)
    with pytest.raises(ValueError, match="9 positions exceed context_length 8"):
        model(np.ones((1, 9), np.int32))


# -- the key/value cache ------------------------------------------------------------------------


def test_cached_steps_equal_the_full_forward_at_every_position():
    """Rows with prompts of 1, 3 and 5 tokens, prefilled together, then stepped one token at a
    time at their own positions in one traced step: the logits at every position equal the full
    forward pass's; row 1 starts again midway (prefilled alone) and still matches."""
    model = tiny(seed=3)
    head = keras.layers.Dense(V)
    full_ids = contexts([L, L, L], seed=1)
    full = head(model(full_ids)).numpy()  # [N, L, V]
    prompts = np.array([1, 3, 5])
    _, cache = model.prefill(np.where(np.arange(L) < prompts[:, None], full_ids, 0)[:, :5])
    assert cache.shape == (2, 2, 3, 2, L, 8)
    step = tf.function(model.step, input_signature=[
        tf.TensorSpec([None], tf.int32), tf.TensorSpec(model.cache_shape, tf.float32),
        tf.TensorSpec([None], tf.int32)])
    restart = np.array([1, 2, 6])  # row 1 starts again on this prompt at its position 5
    pos, errors, restarted = prompts.copy(), [], False
    while pos.min() < L:
        p = np.minimum(pos, L - 1)
        feat, cache = step(full_ids[np.arange(3), p].astype(np.int32), cache, p.astype(np.int32))
        live = pos < L
        errors.append(np.abs(head(feat).numpy() - full[np.arange(3), p])[live].max())
        pos += 1
        if pos[1] == 5 and not restarted:  # row 1's env resets: its cache starts again
            restarted = True
            _, one = model.prefill(np.pad(restart, (0, L - 3))[None])
            cache = tf.concat([cache[:, :, :1], one, cache[:, :, 2:]], axis=2)
            row1 = full_ids[1].copy()
            row1[:3] = restart
            full[1] = head(model(row1[None])).numpy()[0]
            full_ids[1] = row1
            pos[1] = 3
    assert max(errors) < 1e-5, max(errors)
    assert step.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("positions", [None, 11], ids=["L", "longer"])
def test_cached_actor_acts_as_the_full_forward_through_resets_and_batch_changes(positions):
    """The actor's parameters and values equal the network's on every observation of a run of
    contexts that grow, restart and change batch size; weights changed -> the cache is dropped.
    A model of more positions than the observations (``context_length``) acts the same way."""
    layout = spaces.obs_layout(SPACE)
    net = actor_critic(layout, lambda latent: pgrad.make_head(gym.spaces.Discrete(V)),
                       functools.partial(transformer_encoder, d_model=16, num_heads=2,
                                         context_length=positions), seed=1)
    actor = CachedTransformerActor(net, layout)
    rng = np.random.default_rng(0)
    final = contexts([L] * 4, seed=2)
    lengths = np.array([1, 2, 4, 1])
    stepped, restarts = [], 0
    for _ in range(14):
        obs = np.where(np.arange(L) < lengths[:, None], final, 0).astype(np.float32)
        params, values = actor.forward(obs, with_value=True)
        stepped.append(actor.last_stepped)
        np.testing.assert_allclose(params, net.params(tf.constant(obs)).numpy(), atol=2e-5)
        np.testing.assert_allclose(values, net.value(tf.constant(obs)).numpy(), atol=2e-5)
        lengths += 1
        done = lengths > L
        restarts += int(done.sum())
        final[done] = contexts([L] * int(done.sum()), seed=int(rng.integers(99)))
        lengths[done] = rng.integers(1, 3, int(done.sum()))
    stepped = np.array(stepped)  # [14, 4]: the first call prefills, each restart prefills
    assert not stepped[0].any() and stepped.sum() == 14 * 4 - 4 - restarts
    small = np.where(np.arange(L) < 2, final[:2], 0).astype(np.float32)
    np.testing.assert_allclose(actor.forward(small)[0], net.params(small).numpy(), atol=2e-5)
    net.actor.layers[-1].bias.assign(np.ones(V, np.float32))
    actor.load_update_output(actor.update_output().numpy())
    small[:, 2] = 3  # one token on: stepped only if the stale cache were kept
    np.testing.assert_allclose(actor.forward(small)[0], net.params(small).numpy(), atol=2e-5)
    assert not actor.last_stepped.any()
    small[:, 3] = 1
    np.testing.assert_allclose(actor.forward(small)[0], net.params(small).numpy(), atol=2e-5)
    assert actor.last_stepped.all()
    small[:, 0] = small[:, 0] % (V - 1) + 1  # one token longer, but another prefix
    small[:, 4] = 2
    np.testing.assert_allclose(actor.forward(small)[0], net.params(small).numpy(), atol=2e-5)
    assert not actor.last_stepped.any()
    with pytest.raises(ValueError, match="TokenEncoder around a CausalTransformer"):
        CachedTransformerActor(actor_critic(
            spaces.obs_layout(gym.spaces.Box(-1, 1, (3, 3, 3), np.float32)),
            lambda latent: pgrad.make_head(gym.spaces.Discrete(2)),
            lambda space: keras.Sequential([keras.layers.Flatten(), keras.layers.Dense(4)])),
            spaces.obs_layout(gym.spaces.Box(-1, 1, (3, 3, 3), np.float32)))


# -- the encoder: last position, user models ----------------------------------------------------


def test_last_position_features_read_each_context_at_its_end():
    tokens = np.array([[5, 2, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    np.testing.assert_array_equal(context_lengths(tokens).numpy(), [2, 4, 0])
    features = np.arange(3 * 4 * 2, dtype=np.float32).reshape(3, 4, 2)
    np.testing.assert_array_equal(last_position_features(features, tokens).numpy(),
                                  [features[0, 1], features[1, 3], features[2, 0]])
    assert token_space_sizes(SPACE) == (V, L)
    with pytest.raises(ValueError, match=r"1-D integer Box\(0, V-1, \(L,\)\)"):
        token_space_sizes(gym.spaces.Box(0.0, 1.0, (L,), np.float32))
    with pytest.raises(ValueError, match="context_length 6 is shorter than the observations' 8"):
        transformer_encoder(SPACE, context_length=6)


def test_gpt2_backbone_from_a_config_is_a_token_encoder():
    """keras-hub's GPT2Backbone, built from a config (no weights), through CausalLM: its dict
    input is detected, the features pgrad reads are its features at each context's last
    position, equal to running it on the unpadded context alone."""
    keras_hub = pytest.importorskip("keras_hub")
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=V, num_layers=2, num_heads=2, hidden_dim=32, intermediate_dim=64,
        max_sequence_length=L)
    encoder = TokenEncoder(backbone, V, L)
    assert isinstance(encoder.sequence_model, CausalLM) and encoder.feature_dim == 32
    ids = contexts([2, 5, 8], seed=4)
    got = encoder(ids.astype(np.float32)).numpy()
    for i, n in enumerate([2, 5, 8]):
        alone = backbone({"token_ids": ids[i:i + 1, :n], "padding_mask": np.ones((1, n), "int32")})
        np.testing.assert_allclose(got[i], alone.numpy()[0, n - 1], atol=1e-5)
    # As the user's own encoder of a whole policy.
    net = actor_critic(spaces.obs_layout(SPACE),
                       lambda latent: pgrad.make_head(gym.spaces.Discrete(V)),
                       lambda space: TokenEncoder(backbone, *token_space_sizes(space)))
    assert net.params(ids.astype(np.float32)).shape == (3, V)


def test_a_model_that_is_not_causal_is_refused():
    leaky = keras.Sequential([keras.layers.Embedding(V, 4), keras.layers.Flatten(),
                              keras.layers.Dense(L * 4), keras.layers.Reshape((L, 4))])
    with pytest.raises(ValueError, match="is not causal: its features at position 0 changed"):
        TokenEncoder(leaky, V, L)
    with pytest.raises(ValueError, match=r"must map ids \[N, 8\] to \[N, 8, d\]"):
        TokenEncoder(keras.Sequential([keras.layers.Embedding(V, 4), keras.layers.Flatten()]),
                     V, L)


# -- per-token log-probs, per-step gradients ----------------------------------------------------


def test_per_token_log_probs_in_one_pass_equal_each_prefix_separately():
    """One pass over the final contexts gives each generated token's log-prob as the policy
    acted on that token's observation (its prefix, padded), and the same gradient."""
    net = actor_critic(spaces.obs_layout(SPACE),
                       lambda latent: pgrad.make_head(gym.spaces.Discrete(V)),
                       functools.partial(transformer_encoder, d_model=16, num_heads=2), seed=5)
    tokens = contexts([8, 6, 5, 4], seed=6)
    prompt, completion = np.array([2, 1, 3, 0]), np.array([6, 5, 2, 4])  # row 3: empty prompt
    variables = net.policy_variables
    with tf.GradientTape(persistent=True) as tape:
        got = per_token_log_probs(policy_logits_fn(net), tokens, prompt, completion)
        want = []
        for i in range(4):
            for p in range(prompt[i], prompt[i] + completion[i]):  # acting's observation at p
                obs = np.where(np.arange(L) < p, tokens[i], 0)[None].astype(np.float32)
                want.append(net.head.distribution(net.params(obs)).log_prob([tokens[i, p]])[0])
        total_got, total_want = tf.reduce_sum(got), tf.add_n(want)
    mask = completion_mask(prompt, completion, L).numpy()
    assert mask.sum() == completion.sum() and not got.numpy()[~mask].any()
    np.testing.assert_allclose(got.numpy()[mask], np.array(want), atol=1e-5)
    for g, w in zip(tape.gradient(total_got, variables), tape.gradient(total_want, variables)):
        np.testing.assert_allclose(tf.convert_to_tensor(g).numpy(),
                                   tf.convert_to_tensor(w).numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="lengths must be >= 0"):
        per_token_log_probs(policy_logits_fn(net), tokens, [-1, 1, 1, 1], [1, 1, 1, 1])
    with pytest.raises(ValueError, match="lengths exceed the 8 positions"):
        per_token_log_probs(policy_logits_fn(net), tokens, [2, 1, 3, 0], [7, 5, 2, 4])
    with pytest.raises(ValueError, match="encoder is a TokenEncoder"):
        policy_logits_fn(actor_critic(spaces.obs_layout(SPACE), lambda latent: pgrad.make_head(
            gym.spaces.Discrete(V)), "mlp"))


def test_per_step_gradients_through_the_transformer_equal_the_jacobian():
    """Every variable (embeddings, LayerNorms, Dense) is tapped: rows from one batched pass,
    equal to ``tape.jacobian``, with no fallback to the generic path."""
    from policies import assert_all_close, jacobian_reference

    net = actor_critic(spaces.obs_layout(SPACE),
                       lambda latent: pgrad.make_head(gym.spaces.Discrete(V)),
                       functools.partial(transformer_encoder, d_model=8, num_heads=2), seed=0)
    obs = tf.constant(contexts([1, 3, 8, 5, 2], seed=7).astype(np.float32))
    act = tf.constant([1, 4, 6, 2, 3], tf.int32)

    def log_prob(o, a):
        return net.head.distribution(net.params(o)).log_prob(a)

    variables = net.policy_variables
    _, cap = taps.capture(log_prob, variables, (obs, act), 5)
    assert cap.all_covered and cap.rows_ok is True
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        rows = pgrad.per_step_grads(log_prob, variables, obs, act)
    assert_all_close(rows, jacobian_reference(log_prob, variables, obs, act), atol=1e-6,
                     rtol=1e-4)


# -- a few PPO updates on a token env -----------------------------------------------------------


class RepeatFirst(gym.Env):
    """Prompt of 1-2 tokens; generate 3; reward 1/3 per generated token equal to the prompt's
    first. Token 0 ends the episode early (end of sequence)."""

    observation_space = SPACE
    action_space = gym.spaces.Discrete(V)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        n = int(self.np_random.integers(1, 3))
        self.ctx = np.zeros(L, np.int64)
        self.ctx[:n] = self.np_random.integers(1, V, n)
        self.n, self.made = n, 0
        return self.ctx.copy(), {}

    def step(self, action):
        action = int(action)
        self.made += 1
        reward = float(action == self.ctx[0]) / 3
        if action != 0:
            self.ctx[self.n] = action
            self.n += 1
        return self.ctx.copy(), reward, action == 0 or self.made == 3, False, {}


def test_ppo_updates_a_transformer_policy_on_a_token_env():
    """``agents.make("ppo", ...)`` with the transformer as the user's own encoder: updates run
    and change the weights; acting through the KV-cached actor gives the compiled actor's
    parameters on the rollout's observations."""
    import agents

    encoder = functools.partial(transformer_encoder, d_model=16, num_heads=2, num_layers=1)
    agent = agents.make("ppo", RepeatFirst, seed=0, encoder=encoder, num_envs=4, n_steps=8,
                        epochs=2, minibatch_size=16, learning_rate=1e-3)
    assert isinstance(agent.mirror, CompiledActor)
    before = [v.numpy().copy() for v in agent.net.policy_variables]
    agent.learn(64)
    cached = CachedTransformerActor(agent.net, agent.layout)
    agent.mirror = cached  # acting with the cache from here on
    agent.learn(64)
    assert cached.last_stepped.any()  # rows went on one token from the cache
    moved = [not np.allclose(b, v.numpy()) for b, v in zip(before, agent.net.policy_variables)]
    assert all(moved)
    obs = np.stack([RepeatFirst().reset(seed=s)[0] for s in range(6)]).astype(np.float32)
    plain = CompiledActor(agent.net, agent.layout)
    np.testing.assert_allclose(cached.forward(obs)[0], plain.forward(obs)[0], atol=2e-5)
    action, _ = agent.predict(obs[0], deterministic=True)
    assert 0 <= int(action) < V
