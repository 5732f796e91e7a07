"""The install layers: the core holds the runtime dependencies, every optional feature names its
extra in one line when the extra is missing, and the test extra holds every runtime extra.

A missing package is simulated by ``sys.modules[name] = None`` (``import name`` then raises
ImportError, ``importlib.util.find_spec`` returns None), so the test venv needs no uninstall.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS: dict[str, list[str]] = PROJECT["optional-dependencies"]
#: Tools for developing pgrad rather than features of it; `all` bundles every other extra.
NOT_RUNTIME = {"all", "test", "docs", "bench"}
#: The distributions each runtime extra brings, none of which the core may hold.
OPTIONAL_PACKAGES = {"optuna", "ray", "wandb", "moviepy", "mujoco", "box2d", "ale-py", "minatar",
                     "envpool", "tf2onnx", "onnx", "onnxruntime", "ai-edge-litert",
                     "opencv-python-headless", "pytest", "mkdocs", "stable-baselines3"}
NAMED_EXTRA = re.compile(r"pgrad\[([\w,-]+)\]|'\.\[([\w,-]+)\]'")


def _names(requirement: str) -> tuple[str, list[str]]:
    """``"gymnasium[box2d,mujoco]>=1.1"`` -> ``("gymnasium", ["box2d", "mujoco"])``."""
    match = re.match(r"([A-Za-z0-9_.-]+)(?:\[([^\]]*)\])?", requirement)
    assert match, requirement
    return match.group(1).lower(), [e.strip() for e in (match.group(2) or "").split(",") if e]


def _expand(extra: str) -> set[str]:
    """Every distribution an extra installs, through ``pgrad[...]`` references."""
    found: set[str] = set()
    for requirement in EXTRAS[extra]:
        name, inner = _names(requirement)
        if name == "pgrad":
            for e in inner:
                found |= _expand(e)
        else:
            found.add(requirement)
    return found


def test_every_extra_the_code_and_docs_name_exists():
    files = [*ROOT.glob("pgrad/**/*.py"), *ROOT.glob("agents/**/*.py"),
             *ROOT.glob("pgrad_app/**/*.py"), ROOT / "README.md", *ROOT.glob("docs/**/*.md"),
             ROOT / "Makefile"]
    named: dict[str, str] = {}
    for path in files:
        for match in NAMED_EXTRA.finditer(path.read_text(encoding="utf-8")):
            for extra in (match.group(1) or match.group(2)).split(","):
                named.setdefault(extra, str(path.relative_to(ROOT)))
    assert {"ray", "tune", "wandb", "video", "atari", "export"} <= set(named)
    unknown = {extra: where for extra, where in named.items() if extra not in EXTRAS}
    assert not unknown, f"extras named but not in pyproject.toml: {unknown}"


def test_the_core_holds_no_optional_package():
    core = {_names(r)[0] for r in PROJECT["dependencies"]}
    assert core & OPTIONAL_PACKAGES == set()
    assert {"tensorflow", "tensorflow-probability", "tf-keras", "keras", "gymnasium"} <= core


def test_the_test_extra_installs_every_runtime_extra():
    """`make test` (what CI runs) installs the test extra: no feature may go untested for want
    of its package."""
    tested = _expand("test")
    for extra in set(EXTRAS) - NOT_RUNTIME:
        assert _expand(extra) <= tested, extra
    assert _expand("all") == set().union(*(_expand(e) for e in set(EXTRAS) - NOT_RUNTIME))


def _call(module: str, function: str, *args):
    return lambda: getattr(importlib.import_module(module), function)(*args)


def _unregistered(env_id: str):
    """``ensure_registered(env_id)`` as on a machine where the id's package never loaded."""
    def call():
        import gymnasium as gym

        from pgrad.rl.envs.ids import ensure_registered

        entry = gym.registry.pop(env_id, None)
        try:
            ensure_registered(env_id)
        finally:
            if entry is not None:
                gym.registry[env_id] = entry
    return call


def _rliable():
    """``import_rliable()`` with its cached answer cleared before and after."""
    from pgrad_app.experiments.benchmark import stats

    stats._rliable.cache_clear()
    try:
        stats.import_rliable()
    finally:
        stats._rliable.cache_clear()


MISSING = {
    "ray": (("ray",), _call("pgrad_app.distributed.session", "import_ray")),
    "tune": (("optuna",), _call("pgrad_app.experiments.tuning.study", "import_optuna")),
    "wandb": (("wandb",), _call("pgrad_app.run.tracking", "require", "wandb")),
    "video": (("moviepy",), _call("pgrad_app.run.video", "film_first_env", None, Path("v"), 1)),
    "envpool": (("envpool",), _call("pgrad.rl.envs.envpool", "_envpool")),
    "export": (("tf2onnx", "onnx"), _call("pgrad.rl.export.deploy", "to_onnx", "nowhere",
                                          "p.onnx")),
    "atari": (("ale_py",), _unregistered("ALE/Pong-v5")),
    "minatar": (("minatar", "minatar.gym"), _unregistered("MinAtar/Breakout-v1")),
    "compare": (("rliable",), _rliable),
}


@pytest.mark.parametrize("extra", sorted(MISSING))
def test_a_missing_extra_is_one_line_naming_it(extra, monkeypatch):
    hidden, call = MISSING[extra]
    for name in hidden:
        monkeypatch.setitem(sys.modules, name, None)
    from pgrad_app.errors import UserError

    with pytest.raises((ImportError, ValueError, UserError)) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message.strip(), message
    assert f"pip install 'pgrad[{extra}]'" in message, message
    assert extra in EXTRAS


def test_the_checker_sees_an_unknown_extra(tmp_path):
    """The pattern the first test scans for finds both spellings of an install hint."""
    text = "needs Foo: pip install 'pgrad[foo]'; from a clone: pip install -e '.[bar,baz]'"
    found = {e for m in NAMED_EXTRA.finditer(text) for e in (m.group(1) or m.group(2)).split(",")}
    assert found == {"foo", "bar", "baz"}
