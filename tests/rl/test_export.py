"""Exported policies: one observation or a batch, deterministic and sampled actions, distribution
parameters, and the conversions to TFLite (LiteRT's interpreter) and ONNX (onnxruntime)."""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

import pgrad
from pgrad.rl import distributions as dist_lib
from pgrad.rl.acting.policy import NetworkPolicy, _categorical, gaussian_numpy, make_actor
from pgrad.rl.export import deploy
from pgrad.rl.export.saved_model import export_policy, read_metadata
from pgrad.rl.models import encoders
from pgrad.rl.models.networks import actor_critic
from pgrad.rl.observations import spaces
from pgrad.rl.observations.normalize import ObsNormalizer

VECTOR = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
IMAGE = gym.spaces.Box(0, 255, (12, 12, 3), np.uint8)  # small: MinAtar's CNN
MIXED = gym.spaces.Dict({"image": IMAGE, "vector": gym.spaces.Box(-1.0, 1.0, (3,), np.float32)})
DISCRETE = gym.spaces.Discrete(3, start=1)
BOX = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)

#: name -> (observation space, action space, head options)
POLICIES = {
    "discrete-mlp": (VECTOR, DISCRETE, {}),
    "box-mlp": (VECTOR, BOX, {"log_std_init": -1.5}),
    "box-squash": (VECTOR, BOX, {"squash": True, "log_std_init": -0.5}),
    "box-state-std": (VECTOR, BOX, {"state_dependent_std": True}),
    "box-sde": (VECTOR, BOX, {"sde": True}),
    "multidiscrete": (VECTOR, gym.spaces.MultiDiscrete([2, 3]), {}),
    "multibinary": (VECTOR, gym.spaces.MultiBinary(3), {}),
    "discrete-obs": (gym.spaces.Discrete(5), DISCRETE, {}),
    "cnn": (IMAGE, gym.spaces.Discrete(4), {}),
    "dict": (MIXED, gym.spaces.Discrete(4), {}),
}


class Built:
    """A network, its export and a reference policy acting on the live network."""

    def __init__(self, name: str, path):
        obs_space, action_space, options = POLICIES[name]
        self.action_space = action_space
        options = dict(options)
        sde = options.pop("sde", False)
        self.layout = layout = spaces.obs_layout(obs_space)

        def head(latent):
            return pgrad.make_head(action_space, sde_latent_dim=latent if sde else 0, **options)

        net = actor_critic(layout, head, encoders.resolve("auto", layout), hidden=(16,), seed=3)
        out = net.actor.layers[-1]  # logits far apart: no argmax decided by round-off
        out.kernel.assign(out.kernel * 100.0)
        if getattr(net.head, "log_std", None) is not None and sde:
            net.head.log_std.assign(net.head.log_std - 1.0)
        norm = None
        if layout.vector_dim and layout.flat:  # a normaliser with real statistics
            norm = ObsNormalizer(layout.vector_dim)
            rng = np.random.default_rng(0)
            norm.mean.assign(rng.normal(0, 0.2, layout.vector_dim))
            norm.var.assign(rng.uniform(0.5, 2.0, layout.vector_dim))
            norm.pull()
        self.net, self.norm, self.obs_space, self.action_space = net, norm, obs_space, action_space
        self.path = path
        export_policy(net, norm, obs_space, path, {"env_id": None})
        self.loaded = tf.saved_model.load(str(path))
        self.reference = NetworkPolicy(net, make_actor(net, layout), norm, obs_space, action_space)

    def observations(self, n: int, seed: int = 0):
        """``n`` observations as the export takes them (the layout's parts, raw values)."""
        self.obs_space.seed(seed)
        raw = [self.obs_space.sample() for _ in range(n)]
        if isinstance(self.obs_space, gym.spaces.Dict):
            batch = {k: np.stack([o[k] for o in raw]) for k in self.obs_space.spaces}
            return batch, self.layout.preprocess(batch)
        batch = np.asarray(raw)
        if isinstance(self.obs_space, (gym.spaces.Box, gym.spaces.Discrete)):
            return batch, batch.astype(np.int64) if batch.dtype.kind == "i" else batch
        return batch, self.layout.preprocess(batch)

    def params(self, batch) -> np.ndarray:
        """``[N, param_size]`` from the live network (normaliser applied as in training)."""
        return self.reference.params(self.layout.to_tensors(self.layout.preprocess(batch))).numpy()

    def feeds(self, obs) -> dict:
        """The signatures' keyword inputs for ``obs`` (the layout's parts)."""
        if isinstance(obs, tuple):
            return {p.name: x for p, x in zip(self.layout.parts, obs)}
        return {"observation": obs}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cache: dict[str, Built] = {}

    def get(name: str) -> Built:
        if name not in cache:
            cache[name] = Built(name, tmp_path_factory.mktemp(name) / "policy")
        return cache[name]

    return get


def one(obs, i: int):
    return tuple(x[i] for x in obs) if isinstance(obs, tuple) else obs[i]


# -- the SavedModel's functions ------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_action_takes_one_observation_or_a_batch(built, name):
    b = built(name)
    batch, obs = b.observations(6)
    expected = b.reference.act_flat(b.layout.preprocess(batch), deterministic=True)
    out = b.loaded.action(obs).numpy()
    np.testing.assert_allclose(out, expected, atol=1e-5)
    assert all(b.action_space.contains(a) for a in out)
    for i in (0, 5):  # one unbatched observation, in the env's own shape and dtype
        single = b.loaded.action(one(obs, i)).numpy()
        assert single.shape == out.shape[1:]
        np.testing.assert_allclose(single, out[i], atol=1e-6)
    stacked = tf.nest.map_structure(lambda x: np.stack([x[:3], x[3:]]), obs)  # [2, 3, ...]
    np.testing.assert_allclose(b.loaded.action(stacked).numpy(), out.reshape(2, 3, *out.shape[1:]),
                               atol=1e-6)
    sig = b.loaded.signatures["action"](**{k: tf.constant(v) for k, v in b.feeds(obs).items()})
    np.testing.assert_allclose(sig["output_0"].numpy(), out, atol=1e-6)


def test_signatures_are_batched_with_named_inputs(built):
    b = built("box-mlp")
    sigs = b.loaded.signatures
    assert sorted(sigs) == ["action", "distribution_params", "sample", "sample_with_noise"]
    inputs = {k: f.structured_input_signature[1] for k, f in sigs.items()}
    assert inputs["action"]["observation"].shape.as_list() == [None, 4]
    assert inputs["sample"]["seed"].shape.as_list() == [2]
    assert inputs["sample"]["seed"].dtype == tf.int64
    assert inputs["sample_with_noise"]["noise"].shape.as_list() == [None, 4]  # 2 per dimension
    assert sorted(sigs["distribution_params"].structured_outputs) == ["log_std", "mean"]
    assert read_metadata(b.path)["noise_size"] == 4
    parts = built("dict").loaded.signatures["action"].structured_input_signature[1]
    assert {k: (s.dtype, s.shape.as_list()) for k, s in parts.items()} == {
        "image": (tf.uint8, [None, 12, 12, 3]), "vector": (tf.float32, [None, 3])}


def test_each_function_is_traced_once_on_batched_rows(monkeypatch, tmp_path):
    """The network and head are traced once per exported function, on ``[N, ...]`` rows: the
    attributes (any rank) call the signatures' graphs instead of tracing the body again."""
    from pgrad.rl.export.feedforward import DenseExport

    seen: list = []
    params = DenseExport._params
    monkeypatch.setattr(DenseExport, "_params",
                        lambda self, x: seen.append(x.shape.rank) or params(self, x))
    layout = spaces.obs_layout(VECTOR)
    net = actor_critic(layout, lambda latent: pgrad.make_head(DISCRETE), "mlp", hidden=(8,),
                       seed=0)
    export_policy(net, None, VECTOR, tmp_path / "policy")
    # action, sample, sample_with_noise, distribution_params, action_masked, params
    assert seen == [2] * 6
    loaded = tf.saved_model.load(str(tmp_path / "policy"))
    obs = np.random.default_rng(0).uniform(-1, 1, (5, 4)).astype(np.float32)
    expected = loaded.signatures["action"](observation=tf.constant(obs))["output_0"].numpy()
    np.testing.assert_array_equal(loaded.action(obs).numpy(), expected)
    np.testing.assert_array_equal(loaded.action(obs[2]).numpy(), expected[2])


def test_a_wrong_observation_shape_is_one_clear_error(built):
    b = built("discrete-mlp")
    for bad in (np.zeros(3, np.float32), np.zeros((2, 2), np.float32)):
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"observation: one float32 \[4\] or a batch of them"):
            b.loaded.action(bad)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"noise: \[\.\.\., 1\] uniforms"):
        b.loaded.sample_with_noise(np.zeros((2, 4), np.float32), np.zeros((2, 2), np.float32))


def reference_sample(head, params: np.ndarray, log_std, u: np.ndarray) -> np.ndarray:
    """Env actions from uniforms ``u`` in numpy: inverse CDF (pgrad's numpy sampler), Box-Muller
    normals, ``u < sigmoid``."""
    if isinstance(head, dist_lib.CategoricalHead):
        return _categorical(params.astype(np.float64), u[:, 0])[0] + head.start
    if isinstance(head, dist_lib.GaussianHead):
        a = head.size
        mean, step_log_std = gaussian_numpy(head, params.astype(np.float64), log_std)
        z = np.sqrt(-2.0 * np.log(1.0 - u[:, :a])) * np.cos(2.0 * np.pi * u[:, a:])
        return head.to_env(mean + np.exp(step_log_std) * z)
    if isinstance(head, dist_lib.MultiCategoricalHead):
        parts = np.split(params.astype(np.float64), np.cumsum(head.nvec)[:-1], axis=1)
        return np.stack([_categorical(p, u[:, d])[0] for d, p in enumerate(parts)], 1) + head.start
    return head.to_env(u < 1.0 / (1.0 + np.exp(-params)))


@pytest.mark.parametrize("name", ["discrete-mlp", "box-mlp", "box-squash", "box-state-std",
                                  "box-sde", "multidiscrete", "multibinary", "cnn"])
def test_sample_with_noise_is_the_numpy_reference(built, name):
    b = built(name)
    batch, obs = b.observations(64, seed=1)
    k = read_metadata(b.path)["noise_size"]
    u = np.random.default_rng(2).random((64, k)).astype(np.float32)
    log_std = b.net.head.log_std.numpy() if getattr(b.net.head, "log_std", None) is not None \
        else None
    expected = reference_sample(b.net.head, b.params(batch), log_std, u)
    out = b.loaded.sample_with_noise(obs, u).numpy()
    np.testing.assert_allclose(out, expected, atol=2e-5)
    assert all(b.action_space.contains(a) for a in out)
    # the seeded sample: the same uniforms, drawn from the seed by a stateless op
    seeded = b.loaded.sample(obs, [7, 8]).numpy()
    drawn = tf.random.stateless_uniform([64, k], tf.constant([7, 8], tf.int64)).numpy()
    np.testing.assert_allclose(seeded, b.loaded.sample_with_noise(obs, drawn).numpy(), atol=1e-6)


def test_seeded_samples_reproduce_and_follow_the_categorical(built):
    b = built("discrete-mlp")
    _, obs = b.observations(1, seed=4)
    n = 20_000
    rows = np.repeat(obs, n, axis=0)
    logits = b.loaded.distribution_params(obs[0])["logits"].numpy().astype(np.float64)
    p = np.exp(logits - logits.max())
    p /= p.sum()
    assert 0.05 < p.min() and p.max() < 0.95, p  # every action is seen often enough to count
    draws = b.loaded.sample(rows, [1, 2]).numpy()
    np.testing.assert_array_equal(draws, b.loaded.sample(rows, [1, 2]).numpy())
    assert (draws != b.loaded.sample(rows, [1, 3]).numpy()).mean() > 0.3
    freq = np.bincount(draws - DISCRETE.start, minlength=3) / n
    np.testing.assert_array_less(np.abs(freq - p), 4 * np.sqrt(p * (1 - p) / n))
    single = b.loaded.sample(obs[0], np.array([1, 2])).numpy()
    assert single.shape == () and DISCRETE.contains(single)


def test_seeded_samples_follow_the_gaussian(built):
    b = built("box-mlp")
    _, obs = b.observations(1, seed=4)
    n = 20_000
    params = b.loaded.distribution_params(obs[0])
    mean, std = params["mean"].numpy(), np.exp(params["log_std"].numpy())
    assert np.all(np.abs(mean) + 5 * std < 2.0)  # the bounds clip (almost) nothing
    draws = b.loaded.sample(np.repeat(obs, n, axis=0), [5, 6]).numpy()
    np.testing.assert_array_less(np.abs(draws.mean(0) - mean), 4 * std / np.sqrt(n))
    np.testing.assert_array_less(np.abs(draws.std(0) / std - 1), 4 / np.sqrt(2 * n))
    corr = np.corrcoef(draws.T)[0, 1]  # the two Box-Muller uniforms of a row are independent
    assert abs(corr) < 4 / np.sqrt(n)


@pytest.mark.parametrize("name", ["discrete-mlp", "box-squash", "box-sde", "multibinary"])
def test_distribution_params_are_the_heads(built, name):
    b = built(name)
    batch, obs = b.observations(5)
    params = b.params(batch)
    out = {k: v.numpy() for k, v in b.loaded.distribution_params(obs).items()}
    head = b.net.head
    if "logits" in out:
        np.testing.assert_allclose(out["logits"].reshape(5, -1), params, rtol=1e-5, atol=1e-5)
        return
    mean, log_std = (t.numpy() for t in head.mean_and_log_std(tf.constant(params)))
    np.testing.assert_allclose(out["mean"], mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["log_std"], log_std, rtol=1e-5, atol=1e-5)


# -- conversions ---------------------------------------------------------------------------------

CONVERTED = ["discrete-mlp", "box-mlp", "cnn"]


def saved_model_outputs(b: Built, obs, u) -> dict[str, dict[str, np.ndarray]]:
    sigs = b.loaded.signatures
    feeds = {k: tf.constant(v) for k, v in b.feeds(obs).items()}
    return {"action": {k: v.numpy() for k, v in sigs["action"](**feeds).items()},
            "sample_with_noise": {k: v.numpy() for k, v in sigs["sample_with_noise"](
                noise=tf.constant(u), **feeds).items()},
            "distribution_params": {k: v.numpy() for k, v in sigs["distribution_params"](
                **feeds).items()}, **masked_outputs(b, feeds)}


def masked_outputs(b: Built, feeds) -> dict[str, dict[str, np.ndarray]]:
    """``action_masked`` of discrete exports, with the unmasked action forbidden (Discrete) or
    every action legal (MultiDiscrete): the argmax must move to the next legal one."""
    sigs = b.loaded.signatures
    if "action_masked" not in sigs:
        return {}
    width = int(sigs["action_masked"].structured_input_signature[1]["action_mask"].shape[1])
    (action,) = sigs["action"](**feeds).values()
    mask = np.ones((action.shape[0], width), bool)
    if action.shape.rank == 1:  # Discrete: forbid what the policy would take
        start = int(getattr(b.action_space, "start", 0))
        mask[np.arange(action.shape[0]), action.numpy() - start] = False
    b.mask = mask
    out = sigs["action_masked"](action_mask=tf.constant(mask), **feeds)
    return {"action_masked": {k: v.numpy() for k, v in out.items()}}


def assert_same(got: dict, want: dict, what: str) -> None:
    assert sorted(got) == sorted(want), what
    for k in want:
        np.testing.assert_allclose(got[k], want[k], atol=2e-5, rtol=1e-5, err_msg=f"{what} {k}")
        assert np.asarray(got[k]).dtype == want[k].dtype, (what, k)


@pytest.mark.parametrize("name", CONVERTED + ["dict"])
def test_tflite_interpreter_gives_the_saved_models_outputs(built, name, tmp_path):
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    b = built(name)
    _, obs = b.observations(7, seed=5)
    u = np.random.default_rng(5).random((7, read_metadata(b.path)["noise_size"]), np.float32)
    want = saved_model_outputs(b, obs, u)
    path = deploy.to_tflite(b.path, tmp_path / "policy.tflite")
    interpreter = litert.Interpreter(model_path=str(path))
    assert sorted(interpreter.get_signature_list()) == sorted(want)
    for key, outputs in want.items():
        feeds = dict(b.feeds(obs), **({"noise": u} if key == "sample_with_noise" else {}),
                     **({"action_mask": b.mask} if key == "action_masked" else {}))
        assert_same(interpreter.get_signature_runner(key)(**feeds), outputs, key)


@pytest.mark.parametrize("name", CONVERTED + ["dict"])
def test_onnxruntime_gives_the_saved_models_outputs(built, name, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("tf2onnx")
    b = built(name)
    _, obs = b.observations(7, seed=6)
    u = np.random.default_rng(6).random((7, read_metadata(b.path)["noise_size"]), np.float32)
    want = saved_model_outputs(b, obs, u)
    for key, outputs in want.items():
        path = deploy.to_onnx(b.path, tmp_path / f"{key}.onnx", key)
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feeds = dict(b.feeds(obs), **({"noise": u} if key == "sample_with_noise" else {}),
                     **({"action_mask": b.mask} if key == "action_masked" else {}))
        names = [o.name for o in session.get_outputs()]
        assert_same(dict(zip(names, session.run(None, feeds))), outputs, key)


def test_the_seeded_sample_does_not_convert_and_says_why(built, tmp_path):
    pytest.importorskip("tf2onnx")
    b = built("discrete-mlp")
    with pytest.raises(ValueError, match="'sample' does not convert to TFLite: its "
                       "StatelessRandomGetKeyCounter and StatelessRandomUniformV2"):
        deploy.to_tflite(b.path, tmp_path / "p.tflite", ["sample"])
    with pytest.raises(ValueError, match=r"tf2onnx 1\.\d+\.\d+ \(TensorFlow 2\.\d+\.\d+\) cannot "
                       r"convert signature 'sample' .*StatelessRandomGetKeyCounter"):
        deploy.to_onnx(b.path, tmp_path / "p.onnx", "sample")
    with pytest.raises(ValueError, match="has no signature 'act'; it has action, "):
        deploy.to_tflite(b.path, tmp_path / "p.tflite", ["act"])
    with pytest.raises(ValueError, match="holds no exported policy"):
        deploy.to_onnx(tmp_path, tmp_path / "p.onnx")
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.subprocess
def test_converted_models_run_without_pgrad_or_tensorflow(built, tmp_path):
    pytest.importorskip("ai_edge_litert.interpreter")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tf2onnx")
    b = built("cnn")
    _, obs = b.observations(4, seed=7)
    u = np.random.default_rng(7).random((4, 1), np.float32)
    expected = {"action": b.loaded.action(obs).numpy().tolist(),
                "sample": b.loaded.sample_with_noise(obs, u).numpy().tolist()}
    deploy.to_tflite(b.path, tmp_path / "p.tflite")
    deploy.to_onnx(b.path, tmp_path / "p.onnx")
    deploy.to_onnx(b.path, tmp_path / "s.onnx", "sample_with_noise")
    np.save(tmp_path / "obs.npy", obs)
    np.save(tmp_path / "u.npy", u)
    code = (
        "import sys, json, numpy as np, onnxruntime as ort\n"
        "from ai_edge_litert.interpreter import Interpreter\n"
        f"d = {str(tmp_path)!r}\n"
        "obs, u = np.load(d + '/obs.npy'), np.load(d + '/u.npy')\n"
        "lite = Interpreter(model_path=d + '/p.tflite')\n"
        "out = {'tflite': lite.get_signature_runner('action')(observation=obs)['output_0'],\n"
        "       'tflite_sample': lite.get_signature_runner('sample_with_noise')(\n"
        "           observation=obs, noise=u)['output_0']}\n"
        "run = lambda f, **x: ort.InferenceSession(d + f).run(None, x)[0]\n"
        "out['onnx'] = run('/p.onnx', observation=obs)\n"
        "out['onnx_sample'] = run('/s.onnx', observation=obs, noise=u)\n"
        "assert 'pgrad' not in sys.modules and 'tensorflow' not in sys.modules\n"
        "print(json.dumps({k: v.tolist() for k, v in out.items()}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["tflite"] == got["onnx"] == expected["action"]
    assert got["tflite_sample"] == got["onnx_sample"] == expected["sample"]
