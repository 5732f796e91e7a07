"""Config resolution: typed values, YAML (safe, with line numbers), unknown keys, plug-ins."""

from __future__ import annotations

import dataclasses
import textwrap
from dataclasses import dataclass, field
from typing import Literal

import pytest
import tensorflow as tf
import yaml

import pgrad  # noqa: F401  (first: quiet TensorFlow)
from pgrad_app.config import plugins as P
from pgrad_app.config import settings as C
from pgrad_app.config import values as V
from pgrad_app.config import yamlfile as Y
from pgrad_app.errors import UserError


@dataclass
class Toy:
    gamma: float = field(default=0.99, metadata={"help": "discount"})
    n_steps: int = field(default=5, metadata={"help": "rollout length"})
    hidden: tuple[int, ...] = field(default=(64, 64), metadata={"help": "widths"})
    shared: bool = field(default=False, metadata={"help": "share trunk"})
    optimizer: Literal["adam", "rmsprop"] = field(default="adam", metadata={"help": "opt"})
    clip: float | None = field(default=None, metadata={"help": "clip or None"})

    def validate(self):
        if not 0 <= self.gamma <= 1:
            raise ValueError(f"gamma must be in [0, 1]; got {self.gamma}")


def test_set_values_are_typed_from_the_field_types():
    types = V.field_types(Toy)
    cases = {
        ("gamma", "0.5"): 0.5, ("gamma", "1e-3"): 1e-3, ("gamma", "1"): 1.0,
        ("n_steps", "16"): 16, ("n_steps", "1e3"): 1000,
        ("hidden", "[32, 16]"): (32, 16), ("shared", "true"): True, ("shared", "false"): False,
        ("optimizer", "rmsprop"): "rmsprop", ("clip", "null"): None, ("clip", "0.5"): 0.5,
    }
    for (key, text), want in cases.items():
        k, raw = V.parse_set(f"{key}={text}")
        got = V.coerce(raw, types[k], f"--set {k}")
        assert got == want and type(got) is type(want), (key, text, got)


@pytest.mark.parametrize("pair, fragment", [
    ("n_steps=2.5", "expected an integer"),
    ("gamma=abc", "expected a number"),
    ("shared=maybe", "expected true or false"),
    ("hidden=abc", "expected a list"),
    ("optimizer=adamw", "must be one of ['adam', 'rmsprop']"),
])
def test_set_values_of_the_wrong_type_name_the_key(pair, fragment):
    key, raw = V.parse_set(pair)
    with pytest.raises(UserError, match="--set " + key) as err:
        V.coerce(raw, V.field_types(Toy)[key], f"--set {key}")
    assert fragment in str(err.value)


def test_set_without_equals_is_an_error():
    with pytest.raises(UserError, match="expected key=value"):
        V.parse_set("gamma")


def test_unknown_keys_suggest_the_nearest():
    with pytest.raises(UserError, match="Did you mean 'gamma'"):
        C.split_keys({"gama": 0.9}, Toy, "--set gama")
    with pytest.raises(UserError, match="Did you mean 'total_steps'"):
        C.split_keys({"total_step": 9}, Toy, "f.yaml")
    with pytest.raises(UserError, match="unknown hyperparameter 'nsteps'.*'n_steps'"):
        C.split_keys({"hyperparameters": {"nsteps": 3}}, Toy, "f.yaml")


def test_keys_split_into_run_settings_and_hyperparameters():
    run, hyper = C.split_keys(
        {"env": "X-v0", "gamma": 0.5, "hyperparameters": {"n_steps": 7}}, Toy, "f"
    )
    assert run == {"env": "X-v0"} and hyper == {"gamma": 0.5, "n_steps": 7}


def test_build_validates_and_names_the_source():
    with pytest.raises(UserError, match=r"\(--set gamma\): gamma must be in \[0, 1\]; got 1.5"):
        C.build(Toy, {"gamma": 1.5}, {"gamma": "--set gamma"})
    with pytest.raises(UserError, match="total_steps must be >= 1"):
        C.build(C.RunSettings, {"total_steps": 0}, {})


def test_malformed_yaml_names_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("gamma: 0.9\nhidden: [64, 64\nn_steps: 5\n")
    with pytest.raises(UserError, match=r"bad.yaml:\d+:\d+: malformed YAML"):
        Y.load_yaml(path)
    path.write_text("- a\n- b\n")
    with pytest.raises(UserError, match="expected a mapping"):
        Y.load_yaml(path)


def test_yaml_is_read_with_the_safe_loader(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.yaml"
    path.write_text(f'gamma: !!python/object/apply:os.system ["touch {marker}"]\n')
    with pytest.raises(UserError, match="malformed YAML"):
        Y.load_yaml(path)
    assert not marker.exists()


def test_resolved_config_round_trips_through_yaml():
    settings = C.RunSettings(env="Acrobot-v1", seed=3, total_steps=123, stop_at_return=-90.0)
    toy = Toy(gamma=0.5, hidden=(8,), optimizer="rmsprop", clip=0.25)
    data = yaml.safe_load(C.dump_run_config(settings, toy))
    run, hyper = C.split_keys(data, Toy, "config.yaml")
    assert C.build(C.RunSettings, run, {}) == settings
    assert C.build(Toy, hyper, {}) == toy
    assert set(data["hyperparameters"]) == {f.name for f in dataclasses.fields(Toy)}


def test_field_help_lists_every_field_with_its_default():
    rows = C.field_help(Toy)
    assert [r[0] for r in rows] == [f.name for f in dataclasses.fields(Toy)]
    assert rows[2] == ("hidden", "widths", [64, 64])


# -- plug-ins ---------------------------------------------------------------------------------


def test_resolve_env_suggests_close_matches():
    assert P.resolve_env("CartPole-v1") == "CartPole-v1"
    with pytest.raises(UserError, match="unknown env 'CartPol-v1'. Did you mean.*'CartPole-v1'"):
        P.resolve_env("CartPol-v1")
    with pytest.raises(UserError, match="cannot import module 'no_such_mod_xyz'"):
        P.resolve_env("no_such_mod_xyz:Foo-v0")


def test_resolve_env_module_form_imports_the_module_first(tmp_path, monkeypatch):
    (tmp_path / "my_envs_mod.py").write_text(textwrap.dedent("""
        import gymnasium as gym
        gym.register("MyCorridorTest-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv")
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert P.resolve_env("my_envs_mod:MyCorridorTest-v0") == "MyCorridorTest-v0"


TRANSFORMS = '''
import pgrad
import tensorflow as tf

ready = pgrad.chain(pgrad.weight_by("advantages"), pgrad.mean_steps())
number = 3

def factory(max_norm=1.0):
    return pgrad.chain(pgrad.clip_per_step(max_norm), pgrad.weight_by("advantages"),
                       pgrad.mean_steps())

def plain(grads, **context):
    w = context["advantages"]
    return [g * tf.reshape(w, [-1] + [1] * (len(g.shape) - 1)) for g in grads]

def aggregated(grads, **context):  # weights each step, then averages: the final gradient
    w = context["advantages"]
    return [tf.reduce_mean(g * tf.reshape(w, [-1] + [1] * (len(g.shape) - 1)), 0) for g in grads]

def not_a_factory():
    return 42

def two_args(a, b):
    return a
'''


@pytest.fixture
def transforms_file(tmp_path):
    path = tmp_path / "user_transforms.py"
    path.write_text(TRANSFORMS)
    return path


def test_load_transform_accepts_transform_factory_and_plain_function(transforms_file):
    t = P.load_transform(f"{transforms_file}:ready")
    assert isinstance(t, pgrad.GradientTransform) and t.aggregates
    t = P.load_transform(f"{transforms_file}:factory")
    assert [c.name for c in t.leaves][0] == "clip_per_step(1.0)"
    g = [tf.constant([[1.0, 2.0], [3.0, 4.0]])]  # [T=2, 2]
    adv = tf.constant([1.0, -2.0])
    ready = P.load_transform(f"{transforms_file}:ready")
    ref, _ = ready.update(g, ready.init([tf.Variable([0.0, 0.0])]), advantages=adv)
    # A plain function returning per-step gradients gets the mean; one returning aggregated
    # gradients is the aggregation itself. Both compute mean_t(adv_t * g_t), like the chain.
    for name in ("plain", "aggregated"):
        t = P.load_transform(f"{transforms_file}:{name}")
        assert [c.name for c in t.leaves] == [name] and t.aggregates
        out, _ = t.update(g, t.init([tf.Variable([0.0, 0.0])]), advantages=adv)
        assert out[0].numpy().tolist() == ref[0].numpy().tolist() == [-2.5, -3.0]


def test_plain_function_of_neither_shape_is_named():
    t = pgrad.from_function(lambda grads, **c: [g[:, :1] for g in grads], name="cut")
    with pytest.raises(pgrad.TransformError, match=r"'cut' returned gradient 0 with shape "
                       r"\[2, 1\]; expected \[2, 2\] \(per step\) or \[2\] \(aggregated\)"):
        t.update([tf.ones([2, 2])], t.init([tf.Variable([0.0, 0.0])]))


def test_transform_args_are_typed_for_the_factory(transforms_file):
    t = P.load_transform(f"{transforms_file}:factory", {"max_norm": 2})  # int -> float
    assert t.leaves[0].name == "clip_per_step(2.0)"
    for kwargs, fragment in [({"max_nrom": 1}, "Did you mean 'max_norm'"),
                             ({"max_norm": "abc"}, "--transform-arg max_norm: expected a number")]:
        with pytest.raises(UserError) as err:
            P.load_transform(f"{transforms_file}:factory", kwargs)
        assert fragment in str(err.value)
    with pytest.raises(UserError, match="needs a factory"):
        P.load_transform(f"{transforms_file}:ready", {"max_norm": 1.0})


@pytest.mark.parametrize("attr, fragment", [
    ("number", "'number' is a int; expected a GradientTransform"),
    ("not_a_factory", "not_a_factory() returned a int"),
    ("two_args", "takes 2 required arguments"),
    ("missing", "has no attribute 'missing'"),
    ("plian", "Did you mean 'plain'"),
])
def test_load_transform_rejects_what_is_not_a_transform(transforms_file, attr, fragment):
    with pytest.raises(UserError, match=f"--transform {transforms_file}:{attr}") as err:
        P.load_transform(f"{transforms_file}:{attr}")
    assert fragment in str(err.value)


def test_load_transform_import_failures_are_one_line(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("x = 1\ndef f(:\n")
    with pytest.raises(UserError, match=r"SyntaxError \(line 2\)"):
        P.load_transform(f"{broken}:f")
    raising = tmp_path / "raising.py"
    raising.write_text("raise RuntimeError('no GPU here')\n")
    with pytest.raises(UserError, match="RuntimeError: no GPU here"):
        P.load_transform(f"{raising}:f")
    with pytest.raises(UserError, match="does not exist"):
        P.load_transform(f"{tmp_path / 'nope.py'}:f")
    with pytest.raises(UserError, match="expected module:attr"):
        P.load_transform("just_a_name")
