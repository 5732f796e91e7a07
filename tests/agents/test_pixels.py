"""Agents on image observations: dtypes kept, CNN updates exact, save/load/evaluate/export."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gymnasium as gym
import keras
import numpy as np
import pytest
import tensorflow as tf

import agents
import pgrad
from pgrad.rl.acting.compiled_actor import CompiledActor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from policies import ImageEnv  # noqa: E402

FRAMES = "pgrad-test/Frames-v0"  # 36 x 36 x 4 uint8 (the smallest NatureCNN takes)
PLANES = "pgrad-test/Planes-v0"  # 10 x 10 x 4 bool, as MinAtar
MIXED = "pgrad-test/FramesAndVector-v0"  # Dict of a 12 x 12 x 3 uint8 image and a 3-vector
for _id, _kw in ((FRAMES, {"shape": (36, 36, 4)}),
                 (PLANES, {"shape": (10, 10, 4), "dtype": np.bool_}),
                 (MIXED, {"shape": (12, 12, 3), "vector": 3})):
    if _id not in gym.registry:
        gym.register(_id, entry_point=ImageEnv, kwargs=_kw)


def small(name, **kw):
    base = {"num_envs": 2, "n_steps": 4}
    if name == "ppo":
        base.update(minibatch_size=4, epochs=2)
    return {**base, **kw}


def test_images_stay_in_their_dtype_through_rollout_and_update():
    agent = agents.make("a2c", FRAMES, **small("a2c"))
    assert isinstance(agent.mirror, CompiledActor) and agent.net.encoder.kind == "nature_cnn"
    traj, _ = agent.collector.collect(agent.acting_fn(np.random.default_rng(0)), 4)
    assert traj.observations.dtype == np.uint8 and traj.observations.shape == (4, 2, 36, 36, 4)
    assert traj.next_observations.dtype == np.uint8 and not traj.observations.flags.writeable
    args = agent.updater.inputs(traj, 8)
    floats, actions, mask, stats, frames, finals, index = args  # each frame once: see frames.py
    assert frames.dtype == tf.uint8 and frames.shape == (5, 2, 36, 36, 4)
    assert finals.dtype == tf.uint8 and finals.shape[1:] == (36, 36, 4) and index.shape[1] == 2
    assert floats.shape == (4 * 4 * 2,)  # rewards, flags, log-probs only: no pixels in float32
    unpacked = agent.updater.unpack(floats, actions, stats, frames, finals, index)
    np.testing.assert_array_equal(unpacked[0].numpy(), traj.observations)
    np.testing.assert_array_equal(agent.updater.io.next_observations(unpacked[1]).numpy(),
                                  traj.next_observations)
    np.testing.assert_array_equal(unpacked[2].numpy(), traj.rewards)
    out, = agent.updater(args, fixed_shape=True)
    assert np.isfinite(out.numpy()).all()
    agent.close()


def test_dict_observation_with_an_image_and_a_vector():
    agent = agents.make("a2c", MIXED, normalize_obs=True, **small("a2c", hidden=(16,)))
    assert agent.obs_norm.mean.shape == (3,)  # the vector part only
    assert agent.net.encoder.feature_dim == 128 + 16  # minatar_cnn (12x12 < 36) + MLP(16)
    traj, _ = agent.collector.collect(agent.acting_fn(np.random.default_rng(0)), 4)
    image, vector = traj.observations
    assert image.dtype == np.uint8 and image.shape == (4, 2, 12, 12, 3)
    assert vector.dtype == np.float32 and vector.shape == (4, 2, 3)
    info = agent.step()
    assert np.isfinite(list(info["metrics"].values())).all()
    one = agent.observation_space.sample()
    assert agent.predict(one)[0] in agent.action_space
    agent.close()


@pytest.mark.parametrize("chain", ["default", "clip_per_step"])
def test_cnn_update_on_the_fused_path_equals_the_per_step_path(chain):
    """Conv variables have no taps yet: the fused update (one backward pass) and the full one
    (per-step gradients: Dense taps + the generic vectorised path for the convolutions) agree."""
    def run(path):
        transform = None
        if chain == "clip_per_step":  # needs per-step norms on the fused path too
            transform = pgrad.chain(pgrad.weight_by("advantages"), pgrad.clip_per_step(0.05),
                                    pgrad.mean_steps())
        agent = agents.make("a2c", PLANES, seed=3, transform=transform, engine_path=path,
                            optimizer="sgd", learning_rate=0.5, max_grad_norm=0.0,
                            ent_coef=0.01, **small("a2c"))
        metrics = agent.step()["metrics"]
        weights = [v.numpy() for v in agent.net.variables]
        agent.close()
        return metrics, weights

    (m_fused, w_fused), (m_full, w_full) = run("fused"), run("full")
    assert m_fused["path_fused"] == 1.0 and m_full["path_fused"] == 0.0
    if chain == "clip_per_step":
        assert 0.0 < m_fused["clip_fraction"] == m_full["clip_fraction"]
    moved = 0
    for f, g, v in zip(w_fused, w_full, agents.make("a2c", PLANES, seed=3,
                                                    **small("a2c")).net.variables):
        np.testing.assert_allclose(f, g, atol=2e-6, rtol=1e-5)
        moved += not np.allclose(f, v.numpy())
    assert moved >= 4  # the update really changed the convolution and the layers after it


@pytest.mark.parametrize("name", ["a2c", "ppo"])
def test_cnn_agent_trains_saves_loads_and_evaluates_the_same(name, tmp_path):
    agent = agents.make(name, FRAMES, seed=1, **small(name))
    for _ in range(3):
        info = agent.step()
    assert np.isfinite(list(info["metrics"].values())).all()
    obs = np.stack([agent.observation_space.sample() for _ in range(6)])
    det = agent.act(obs, deterministic=True)
    before = pgrad.evaluate(agent, episodes=2, seed=5)
    sampled = pgrad.evaluate(agent, episodes=2, seed=5, deterministic=False)
    agent.save(tmp_path / "saved")
    agent.close()
    assert json.loads((tmp_path / "saved" / "agent.json").read_text())["hyperparameters"][
        "encoder"] == "auto"
    loaded = agents.load(tmp_path / "saved")
    np.testing.assert_array_equal(loaded.act(obs, deterministic=True), det)
    assert pgrad.evaluate(loaded, episodes=2, seed=5)["returns"] == before["returns"]
    assert pgrad.evaluate(loaded, episodes=2, seed=5, deterministic=False)["returns"] == \
        sampled["returns"]
    # The export alone: uint8 frames in, the same greedy actions out.
    exported = tf.saved_model.load(str(tmp_path / "saved" / "policy"))
    np.testing.assert_array_equal(exported.action(tf.constant(obs)).numpy(), det)
    sig = exported.signatures["action"](observation=tf.constant(obs))
    np.testing.assert_array_equal(next(iter(sig.values())).numpy(), det)
    assert pgrad.evaluate(tmp_path / "saved", episodes=2, seed=5)["returns"] == before["returns"]
    loaded.close()


def test_export_of_a_dict_observation_takes_its_parts(tmp_path):
    agent = agents.make("a2c", MIXED, normalize_obs=True, **small("a2c"))
    agent.step()
    agent.export_policy(str(tmp_path / "p"))
    raw = [agent.observation_space.sample() for _ in range(5)]
    batch = {k: np.stack([o[k] for o in raw]) for k in ("image", "vector")}
    image, vector = agent.collector.preprocess(batch)
    loaded = tf.saved_model.load(str(tmp_path / "p"))
    sig = loaded.signatures["action"](image=tf.constant(image), vector=tf.constant(vector))
    np.testing.assert_array_equal(next(iter(sig.values())).numpy(),
                                  agent.act(batch, deterministic=True))
    meta = json.loads((tmp_path / "p" / "pgrad_policy.json").read_text())
    assert [p["name"] for p in meta["observation_parts"]] == ["image", "vector"]
    result = pgrad.evaluate(tmp_path / "p", env_id=MIXED, episodes=2)
    assert result["returns"] == pgrad.evaluate(agent, episodes=2)["returns"]
    agent.close()


def tiny_encoder(space):
    """A user's own encoder: a function of the observation space returning a Keras model."""
    return keras.Sequential([keras.layers.Conv2D(4, 3, activation="relu"),
                             keras.layers.Flatten(), keras.layers.Dense(8, activation="relu")])


def test_own_encoder_from_python_trains_saves_and_must_be_passed_again(tmp_path):
    agent = agents.make("ppo", PLANES, encoder=tiny_encoder, share_encoder=False,
                        **small("ppo"))
    assert agent.net.encoder.kind == "own" and agent.net.critic_encoder is not None
    critic_encoder = {id(v) for v in agent.net.critic_encoder.trainable_variables}
    assert critic_encoder <= {id(v) for v in agent.net.value_only_variables}
    assert not critic_encoder & {id(v) for v in agent.net.policy_variables}
    agent.step()
    obs = np.stack([agent.observation_space.sample() for _ in range(4)])
    det = agent.act(obs, deterministic=True)
    agent.save(tmp_path / "own")
    agent.close()
    record = json.loads((tmp_path / "own" / "agent.json").read_text())
    assert record["encoder"].endswith("tiny_encoder")
    with pytest.raises(ValueError, match="own encoder .*tiny_encoder.*pass it again as encoder="):
        agents.load(tmp_path / "own")
    loaded = agents.load(tmp_path / "own", encoder=tiny_encoder)
    np.testing.assert_array_equal(loaded.act(obs, deterministic=True), det)
    loaded.close()
    model = tiny_encoder(None)  # a model instance works too (shared)
    agent = agents.make("a2c", PLANES, encoder=model, **small("a2c"))
    assert agent.net.encoder.own is model
    agent.step()
    agent.close()


def test_bad_encoder_settings_are_one_clear_error():
    with pytest.raises(ValueError, match=r"^encoder must be one of auto, mlp, nature_cnn, "
                                         r"impala_cnn, minatar_cnn .*got 'vit'$"):
        agents.make("ppo", FRAMES, encoder="vit")
    with pytest.raises(ValueError) as err:
        agents.make("ppo", PLANES, encoder="nature_cnn")
    assert str(err.value) == (
        "encoder 'nature_cnn' needs images of at least 36x36; env 'pgrad-test/Planes-v0''s "
        "image 'image' is 10x10x4; use encoder='minatar_cnn' (or 'auto')")
    with pytest.raises(ValueError, match="needs image observations"):
        agents.make("a2c", "CartPole-v1", encoder="impala_cnn")
    with pytest.raises(ValueError, match="normalize_obs normalises vector observations only"):
        agents.make("a2c", PLANES, normalize_obs=True)
    with pytest.raises(ValueError, match="shared_trunk applies to MLP policies"):
        agents.make("a2c", PLANES, shared_trunk=True)
    with pytest.raises(ValueError, match="critic_updates needs a separate critic"):
        agents.make("npg", PLANES)
    with pytest.raises(ValueError, match="attacks vector observations only"):
        agents.make("a2c", PLANES, adversarial_epsilon=0.1)


def test_mlp_encoder_on_images_and_impala():
    agent = agents.make("a2c", PLANES, encoder="mlp", **small("a2c", hidden=(32,)))
    assert agent.net.encoder.feature_dim == 32 and isinstance(agent.mirror, CompiledActor)
    agent.step()
    agent.close()
    agent = agents.make("ppo", PLANES, encoder="impala_cnn", **small("ppo"))
    assert agent.net.encoder.feature_dim == 256
    assert np.isfinite(list(agent.step()["metrics"].values())).all()
    agent.close()


def test_continuous_actions_from_pixels_with_gsde(tmp_path):
    factory = lambda: ImageEnv((10, 10, 2), np.bool_,  # noqa: E731
                               action_space=gym.spaces.Box(-1, 1, (2,), np.float32))
    agent = agents.make("ppo", factory, use_sde=True, **small("ppo"))
    assert agent.head.sde_latent_dim == 128  # the CNN's features
    for _ in range(2):
        agent.step()
    np.testing.assert_array_equal(agent.mirror.log_std, agent.head.log_std.numpy())
    agent.close()


@pytest.mark.slow
def test_ppo_with_minatar_cnn_learns_breakout_above_random():
    """MinAtar Breakout (10x10x4 bool, 3 actions): random play scores 0.33 a game; PPO with the
    MinAtar CNN beats it 3x on a small budget (by hand: 5.9 +- 0.7 after 300k steps)."""
    minatar = pytest.importorskip("minatar.gym")
    minatar.register_envs()
    agent = agents.make("ppo", "MinAtar/Breakout-v1", seed=0, encoder="minatar_cnn",
                        num_envs=8, n_steps=128, minibatch_size=256, epochs=4,
                        learning_rate=5e-4, ent_coef=0.01)
    agent.learn(40_960, progress=False)
    result = pgrad.evaluate(agent, episodes=10)
    agent.close()
    assert result["return_mean"] > 1.0, result


@pytest.mark.subprocess
def test_cnn_export_runs_in_plain_tensorflow_without_pgrad(tmp_path):
    import subprocess

    agent = agents.make("a2c", FRAMES, **small("a2c"))
    agent.step()
    agent.export_policy(str(tmp_path / "p"))
    obs = np.random.default_rng(0).integers(0, 256, (3, 36, 36, 4)).astype(np.uint8)
    expected = agent.act(obs, deterministic=True).tolist()
    agent.close()
    np.save(tmp_path / "obs.npy", obs)
    code = (
        "import sys, json, numpy as np, tensorflow as tf\n"
        f"m = tf.saved_model.load({str(tmp_path / 'p')!r})\n"
        f"obs = np.load({str(tmp_path / 'obs.npy')!r})\n"
        "print(json.dumps(m.action(obs).numpy().tolist()))\n"
        "assert 'pgrad' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == expected
