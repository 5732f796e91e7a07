"""Image observations and encoders: layouts, CNN shapes and init, scaling, compiled acting."""

from __future__ import annotations

import gymnasium as gym
import keras
import numpy as np
import pytest
import tensorflow as tf

import pgrad
from pgrad.rl.acting.compiled_actor import CompiledActor
from pgrad.rl.acting.policy import make_actor, mode_numpy, sample_numpy
from pgrad.rl.models import encoders
from pgrad.rl.models.networks import actor_critic
from pgrad.rl.observations import spaces

FRAMES = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
PLANES = gym.spaces.Box(0, 1, (10, 10, 4), bool)


# -- detection and layouts ----------------------------------------------------------------------


def test_image_spaces_are_detected_as_sb3_does_plus_binary_planes():
    assert spaces.is_image_space(FRAMES) and spaces.is_image_space(PLANES)
    assert spaces.is_image_space(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8))
    assert not spaces.is_image_space(gym.spaces.Box(0, 1, (84, 84, 4), np.float32))
    assert not spaces.is_image_space(gym.spaces.Box(0, 10, (84, 84, 4), np.uint8))  # bounds
    assert not spaces.is_image_space(gym.spaces.Box(0, 255, (84, 84), np.uint8))  # rank 2
    assert spaces.obs_layout(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)).parts[0] \
        .channels_first
    assert not spaces.obs_layout(FRAMES).parts[0].channels_first
    assert not spaces.obs_layout(gym.spaces.Box(0, 255, (3, 3, 3), np.uint8)).parts[0] \
        .channels_first  # ties read as channel-last


def test_layout_keeps_images_in_their_dtype_and_flattens_the_rest():
    space = gym.spaces.Dict({"pixels": FRAMES, "speed": gym.spaces.Box(-1, 1, (2,), np.float32),
                             "mode": gym.spaces.Discrete(3)})
    layout = spaces.obs_layout(space)
    assert [(p.name, p.image, p.dtype.name) for p in layout.parts] == [
        ("pixels", True, "uint8"), ("vector", False, "float32")]
    assert layout.vector_dim == 5 and not layout.flat and not layout.single
    batch = {"pixels": np.full((2, 84, 84, 4), 7, np.uint8),
             "speed": np.array([[0.5, -0.5], [1.0, 0.0]], np.float32), "mode": np.array([2, 0])}
    pixels, vector = layout.preprocess(batch)
    assert pixels.dtype == np.uint8 and pixels.shape == (2, 84, 84, 4)
    np.testing.assert_array_equal(vector, [[0, 0, 1, 0.5, -0.5], [1, 0, 0, 1.0, 0.0]])
    one = layout.preprocess(spaces.batch_of_one(space.sample()))
    assert layout.concat([one, one])[0].shape == (2, 84, 84, 4)
    stacked = layout.stack([layout.preprocess(batch)] * 3)
    assert stacked[0].shape == (3, 2, 84, 84, 4) and stacked[0].dtype == np.uint8
    # A space without images is the flat float32 vector, as always.
    flat = spaces.obs_layout(gym.spaces.Dict({"a": gym.spaces.Discrete(2)}))
    assert flat.flat and flat.single and flat.vector_dim == 2
    planes = spaces.obs_layout(PLANES).preprocess(np.ones((3, 10, 10, 4), bool))
    assert planes.dtype == np.bool_


# -- encoders -------------------------------------------------------------------------------------


def _shapes(model):
    return [tuple(layer.output.shape[1:]) for layer in model.layers
            if isinstance(layer, (keras.layers.Conv2D, keras.layers.MaxPooling2D,
                                  keras.layers.Dense))]


def test_cnn_shapes_are_the_published_ones():
    assert _shapes(encoders.nature_cnn((84, 84, 4))) == [(20, 20, 32), (9, 9, 64), (7, 7, 64),
                                                         (512,)]
    assert _shapes(encoders.minatar_cnn((10, 10, 4))) == [(8, 8, 16), (128,)]
    impala = encoders.impala_cnn((64, 64, 3))
    shapes = _shapes(impala)
    assert shapes[-1] == (256,)
    pools = [layer.output.shape[1:] for layer in impala.layers
             if isinstance(layer, keras.layers.MaxPooling2D)]
    assert [tuple(s) for s in pools] == [(32, 32, 16), (16, 16, 32), (8, 8, 32)]
    convs = [layer for layer in impala.layers if isinstance(layer, keras.layers.Conv2D)]
    assert len(convs) == 15 and all(c.kernel_size == (3, 3) for c in convs)  # 3 x (1 + 2 x 2)
    # CleanRL's max-pool (3x3, stride 2, padding 1) on an odd size: ceil(H / 2)
    assert _shapes(encoders.impala_cnn((21, 21, 3)))[1] == (11, 11, 16)


@pytest.mark.parametrize("build, shape", [(encoders.nature_cnn, (84, 84, 4)),
                                          (encoders.minatar_cnn, (10, 10, 4)),
                                          (encoders.impala_cnn, (16, 16, 3))])
def test_conv_and_hidden_layers_are_orthogonal_with_gain_sqrt2_and_zero_bias(build, shape):
    model = build(shape, seed=1)
    for layer in model.layers:
        if not isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense)):
            continue
        k = layer.kernel.numpy().reshape(-1, layer.kernel.shape[-1])  # [fan_in, out]
        gram = k.T @ k if k.shape[0] >= k.shape[1] else k @ k.T
        np.testing.assert_allclose(gram, 2.0 * np.eye(gram.shape[0]), atol=1e-4)
        np.testing.assert_array_equal(layer.bias.numpy(), 0.0)
    torch_like = build(shape, seed=1, ortho_init=False)
    conv = next(x for x in torch_like.layers if isinstance(x, keras.layers.Conv2D))
    fan_in = int(np.prod(conv.kernel.shape[:-1]))
    assert np.abs(conv.kernel.numpy()).max() <= 1 / np.sqrt(fan_in) + 1e-7  # PyTorch's default


def test_heads_on_an_encoder_have_sb3_gains():
    layout = spaces.obs_layout(PLANES)
    net = actor_critic(layout, lambda latent: pgrad.make_head(gym.spaces.Discrete(3)),
                       "minatar_cnn", seed=0)
    for model, gain in ((net.actor, 0.01), (net.critic, 1.0)):
        k = model.layers[-1].kernel.numpy()  # [128, out]: orthonormal columns times the gain
        np.testing.assert_allclose(k.T @ k, gain**2 * np.eye(k.shape[1]), atol=1e-6)


def test_images_are_scaled_inside_the_network():
    """uint8 / 255, bool cast to 0/1, channel-first transposed: the CNN sees the same floats."""
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (3, 36, 36, 4)).astype(np.uint8)
    last = encoders.ObservationEncoder(spaces.obs_layout(
        gym.spaces.Box(0, 255, (36, 36, 4), np.uint8)), "nature_cnn", seed=0)
    np.testing.assert_array_equal(last(tf.constant(frames)).numpy(),
                                  last.cnns[0](tf.constant(frames, tf.float32) / 255.0).numpy())
    first = encoders.ObservationEncoder(spaces.obs_layout(
        gym.spaces.Box(0, 255, (4, 36, 36), np.uint8)), "nature_cnn", seed=0)
    np.testing.assert_allclose(first(tf.constant(frames.transpose(0, 3, 1, 2))).numpy(),
                               last(tf.constant(frames)).numpy(), atol=1e-6)
    planes = rng.random((2, 10, 10, 4)) < 0.3
    enc = encoders.ObservationEncoder(spaces.obs_layout(PLANES), "minatar_cnn", seed=0)
    np.testing.assert_array_equal(enc(tf.constant(planes)).numpy(),
                                  enc.cnns[0](tf.constant(planes, tf.float32)).numpy())


def test_dict_observation_gets_a_cnn_per_image_and_the_mlp_on_the_rest():
    space = gym.spaces.Dict({"a": PLANES, "b": PLANES, "v": gym.spaces.Box(-1, 1, (3,))})
    enc = encoders.ObservationEncoder(spaces.obs_layout(space), "minatar_cnn", hidden=(16,),
                                      seed=0)
    assert len(enc.cnns) == 2 and enc.feature_dim == 128 + 128 + 16
    assert enc.cnns[0] is not enc.cnns[1]


def test_auto_and_errors_name_the_encoder_and_the_images():
    assert encoders.resolve("auto", spaces.obs_layout(FRAMES)) == "nature_cnn"
    assert encoders.resolve("auto", spaces.obs_layout(PLANES)) == "minatar_cnn"
    assert encoders.resolve("auto", spaces.obs_layout(gym.spaces.Box(-1, 1, (4,)))) == "mlp"
    with pytest.raises(ValueError, match=r"encoder must be one of auto, mlp, nature_cnn, "
                                         r"impala_cnn, minatar_cnn .*got 'resnet'"):
        encoders.resolve("resnet", spaces.obs_layout(FRAMES))
    with pytest.raises(ValueError, match=r"got 'my_file.py:fn'"):
        encoders.check_name("my_file.py:fn")  # the app resolves such specs, never agents/
    with pytest.raises(ValueError) as err:
        encoders.resolve("nature_cnn", spaces.obs_layout(PLANES), "env 'MinAtar'")
    msg = str(err.value)
    assert "\n" not in msg and msg == (
        "encoder 'nature_cnn' needs images of at least 36x36; env 'MinAtar''s image 'image' is "
        "10x10x4; use encoder='minatar_cnn' (or 'auto')")
    with pytest.raises(ValueError, match="needs image observations"):
        encoders.resolve("impala_cnn", spaces.obs_layout(gym.spaces.Box(-1, 1, (4,))))


def test_own_encoder_function_or_model():
    def tiny(space):
        assert space is PLANES
        return keras.Sequential([keras.layers.Flatten(), keras.layers.Dense(7)])

    layout = spaces.obs_layout(PLANES)
    enc = encoders.ObservationEncoder(layout, tiny)
    assert enc.kind == "own" and enc.feature_dim == 7
    model = keras.Sequential([keras.layers.Flatten(), keras.layers.Dense(5)])
    assert encoders.ObservationEncoder(layout, model).own is model
    with pytest.raises(ValueError, match="share_encoder=False needs a second encoder"):
        encoders.encoder_copy(model, layout)
    with pytest.raises(ValueError, match="must return a keras.Model"):
        encoders.ObservationEncoder(layout, lambda space: "not a model")
    with pytest.raises(ValueError, match=r"must return \[N, features\]"):
        encoders.ObservationEncoder(layout, lambda space: keras.layers.Identity())


# -- acting -------------------------------------------------------------------------------------


@pytest.mark.parametrize("action_space", [gym.spaces.Discrete(4),
                                          gym.spaces.Box(-1.0, 1.0, (2,), np.float32)],
                         ids=["discrete", "box"])
@pytest.mark.parametrize("jit", [False, True], ids=["plain", "xla"])
def test_compiled_acting_gives_the_actions_of_the_keras_model(action_space, jit):
    """Parameters from the compiled call equal the Keras model's; deterministic actions are
    equal and sampled ones, with the same generator, are the numpy sampler's on those params."""
    layout = spaces.obs_layout(gym.spaces.Box(0, 255, (36, 36, 3), np.uint8))
    net = actor_critic(layout, lambda latent: pgrad.make_head(action_space, -0.5),
                       "nature_cnn", seed=2)
    actor = CompiledActor(net, layout, jit_compile=jit)
    assert isinstance(make_actor(net, layout), CompiledActor)
    obs = np.random.default_rng(1).integers(0, 256, (16, 36, 36, 3)).astype(np.uint8)
    params, _ = actor.forward(obs)
    reference = net.params(tf.constant(obs)).numpy()
    # The graph's fused kernels round differently from eager Keras calls (~1e-9 here).
    np.testing.assert_allclose(params, reference, rtol=1e-5, atol=1e-6)
    log_std = getattr(net.head, "log_std", None)
    log_std = None if log_std is None else log_std.numpy()
    got, got_lp = actor.sample(params, np.random.default_rng(7))
    want, want_lp = sample_numpy(net.head, reference, log_std, np.random.default_rng(7))
    if isinstance(action_space, gym.spaces.Discrete):  # the same actions
        np.testing.assert_array_equal(actor.mode(params), mode_numpy(net.head, reference))
        np.testing.assert_array_equal(got, want)
    else:  # the same actions up to that round-off
        np.testing.assert_allclose(actor.mode(params), mode_numpy(net.head, reference),
                                   atol=1e-6)
        np.testing.assert_allclose(got, want, atol=1e-6)
    np.testing.assert_allclose(got_lp, want_lp, atol=1e-4)
    # Another batch size reuses the one trace; a rollout worker's copy loads the weights.
    assert actor.forward(obs[:3])[0].shape == (3, net.head.param_size)
    other = actor_critic(layout, lambda latent: pgrad.make_head(action_space, -0.5),
                         "nature_cnn", seed=9)
    copy = CompiledActor(other, layout, jit_compile=jit)
    copy.load_flat(actor.flat_numpy())
    np.testing.assert_array_equal(copy.forward(obs)[0], params)
    if log_std is not None:
        np.testing.assert_array_equal(copy.log_std, log_std)


def test_update_output_is_a_finite_probe_and_the_log_std():
    layout = spaces.obs_layout(PLANES)
    net = actor_critic(layout, lambda latent: pgrad.make_head(
        gym.spaces.Box(-1, 1, (2,), np.float32), 0.3), "minatar_cnn", seed=0)
    actor = CompiledActor(net, layout)
    out = actor.update_output().numpy()
    np.testing.assert_array_equal(out, np.array([0.0, 0.3, 0.3], np.float32))
    net.head.log_std.assign([0.1, 0.2])
    actor.load_update_output(actor.update_output().numpy())
    np.testing.assert_allclose(actor.log_std, [0.1, 0.2])
    net.encoder.cnns[0].layers[0].bias.assign(np.full(16, np.nan, np.float32))
    assert np.isnan(actor.update_output().numpy()[0])


@pytest.mark.parametrize("encoder, shape, dtype", [("nature_cnn", (36, 36, 4), np.uint8),
                                                   ("impala_cnn", (8, 8, 3), np.uint8),
                                                   ("minatar_cnn", (10, 10, 4), np.bool_)])
def test_per_step_gradients_through_a_cnn_equal_the_jacobian(encoder, shape, dtype):
    """Conv variables take the generic vectorised path (no taps yet), the CNN's Dense layer its
    tap: rows and norms equal ``tape.jacobian`` on uint8 / bool inputs, with no fallback loop."""
    import warnings

    from policies import assert_all_close, jacobian_reference

    space = gym.spaces.Box(0, 1 if dtype == np.bool_ else 255, shape, dtype)
    space.seed(0)
    net = actor_critic(spaces.obs_layout(space),
                       lambda latent: pgrad.make_head(gym.spaces.Discrete(3)), encoder, seed=0)
    obs = tf.constant(np.stack([space.sample() for _ in range(5)]))
    act = tf.constant([0, 1, 2, 1, 0], tf.int32)

    def log_prob(o, a):
        return net.head.distribution(net.params(o)).log_prob(a)

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # pgrad warns before a sequential loop
        rows = pgrad.per_step_grads(log_prob, net.policy_variables, obs, act)
        norms = pgrad.per_step_norms(log_prob, net.policy_variables, obs, act)
    reference = jacobian_reference(log_prob, net.policy_variables, obs, act)
    assert_all_close(rows, reference, atol=1e-6, rtol=1e-4)
    squares = sum(np.square(r.numpy()).reshape(5, -1).sum(1) for r in reference)
    np.testing.assert_allclose(norms.numpy(), np.sqrt(squares), rtol=1e-4)
