"""Registering env ids on demand (:mod:`pgrad.rl.envs.ids`): MinAtar's render-only seaborn
import deferred until something uses it."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from pgrad.rl.envs import ids as env_ids


def test_a_deferred_module_imports_on_first_use_and_replaces_itself(monkeypatch):
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    env_ids._defer_import("colorsys")
    stand_in = sys.modules["colorsys"]
    assert type(stand_in).__name__ == "_DeferredModule"
    import colorsys  # a second import gives the stand-in, without loading anything

    assert colorsys is stand_in
    assert colorsys.rgb_to_hsv(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)
    assert type(sys.modules["colorsys"]) is types.ModuleType  # the real one now
    assert colorsys.hls_to_rgb(0.0, 0.5, 1.0) == (1.0, 0.0, 0.0)  # the stand-in still answers


def test_walking_sys_modules_does_not_load_a_deferred_module(monkeypatch):
    """``inspect.getmodule`` (and autograph, tracing an export) asks every module in
    ``sys.modules`` for its ``__file__``: a stand-in answers that it has none, without loading."""
    import inspect

    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    env_ids._defer_import("colorsys")
    assert not hasattr(sys.modules["colorsys"], "__file__")
    assert inspect.getmodule(test_walking_sys_modules_does_not_load_a_deferred_module) is (
        sys.modules[__name__])
    assert type(sys.modules["colorsys"]).__name__ == "_DeferredModule"  # still not loaded
    assert sys.modules["colorsys"].rgb_to_hsv(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)


def test_imported_or_missing_modules_are_left_alone(monkeypatch):
    env_ids._defer_import("json")
    assert type(sys.modules["json"]) is types.ModuleType
    env_ids._defer_import("no_such_module_here")
    assert "no_such_module_here" not in sys.modules


def test_minatar_registers_without_seaborn_and_still_renders():
    """Not even saving a model (an export: autograph looks at every module's ``__file__``)
    loads seaborn; rendering does."""
    pytest.importorskip("minatar")
    pytest.importorskip("seaborn")
    code = (
        "import sys\n"
        "from pgrad.rl.envs.ids import ensure_registered\n"
        "ensure_registered('MinAtar/Breakout-v1')\n"
        "assert type(sys.modules['seaborn']).__name__ == '_DeferredModule'\n"
        "assert 'scipy.stats' not in sys.modules\n"
        "import gymnasium as gym\n"
        "env = gym.make('MinAtar/Breakout-v1', render_mode='rgb_array')\n"
        "env.reset(seed=0)\n"
        "import tempfile, tensorflow as tf\n"  # saving a signature walks sys.modules
        "m = tf.Module()\n"
        "m.f = tf.function(lambda x: x + 1, input_signature=[tf.TensorSpec([], tf.float32)])\n"
        "tf.saved_model.save(m, tempfile.mkdtemp(), signatures={'f': m.f})\n"
        "assert type(sys.modules['seaborn']).__name__ == '_DeferredModule'\n"
        "assert env.render().shape == (10, 10, 3)\n"  # colours from seaborn's palette
        "assert type(sys.modules['seaborn']).__name__ == 'module'\n"
    )
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-1500:]


MUJOCO_SNIPPET = """
import logging
import warnings
import mujoco
from pgrad.rl.envs.vector import make_vec_env

logged = []
logging.getLogger("pgrad.mujoco").addHandler(logging.Handler())
logging.getLogger("pgrad.mujoco").handlers[0].emit = lambda record: logged.append(record.msg)
logging.getLogger("pgrad.mujoco").setLevel(logging.DEBUG)

envs = make_vec_env("HalfCheetah-v5", 2)
envs.reset(seed=0)
envs.close()
handler = mujoco.get_mju_user_warning()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    handler("Nan, Inf or huge value in QACC at DOF 0. The simulation is unstable.")
    handler("compiler attribute 'x' is deprecated")
print([(w.category.__name__, str(w.message)) for w in caught])
print(logged[-1])
"""


def test_mujoco_model_deprecations_do_not_reach_stderr():
    """MuJoCo 4 prints a deprecation line for each Gymnasium MuJoCo model it compiles; pgrad
    logs the deprecations (DEBUG, ``pgrad.mujoco``) and turns MuJoCo's other warnings (an
    unstable simulation) into one-line RuntimeWarnings."""
    pytest.importorskip("mujoco")
    done = subprocess.run([sys.executable, "-c", MUJOCO_SNIPPET], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "settotalmass" not in done.stderr, done.stderr
    said, logged = done.stdout.strip().splitlines()[-2:]
    assert said == str([("RuntimeWarning", "MuJoCo: Nan, Inf or huge value in QACC at DOF 0. "
                                           "The simulation is unstable.")])
    assert logged == "compiler attribute 'x' is deprecated"
