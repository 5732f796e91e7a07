"""The import contract: each layer imports only the layers below it; importing is inert.

Layers, bottom to top (docs/architecture.md): pgrad.core < pgrad.transforms < pgrad.engine <
pgrad.tools < pgrad.rl (its rooms: the basics < envs, models < acting, collection < multiagent,
export < evaluation) < pgrad (the public package) < agents < the application's rooms
(errors, quiet < config < run, distributed < experiments, perf < cli < the pgrad_app package
itself) < scripts, examples. Rooms on one floor (run and distributed; experiments and perf) may
not import each other either. Every import counts, including those inside functions: a lazy
import is still a dependency.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Floors, bottom to top; each floor holds one or more rooms (module prefixes).
FLOORS: list[tuple[str, ...]] = [
    ("pgrad.core",), ("pgrad.transforms",), ("pgrad.engine",), ("pgrad.tools",),
    # pgrad.rl's rooms (docs/architecture.md), then its package face
    ("pgrad.rl._lazy", "pgrad.rl.distributions", "pgrad.rl.flat_call", "pgrad.rl.storage",
     "pgrad.rl.observations", "pgrad.rl.advantages", "pgrad.rl.tokens"),
    ("pgrad.rl.envs", "pgrad.rl.models"), ("pgrad.rl.acting", "pgrad.rl.collection"),
    ("pgrad.rl.multiagent", "pgrad.rl.export"), ("pgrad.rl.evaluation",), ("pgrad.rl",),
    ("pgrad",), ("agents",),
    ("pgrad_app.errors", "pgrad_app.quiet"), ("pgrad_app.config",),
    ("pgrad_app.run", "pgrad_app.distributed"), ("pgrad_app.experiments", "pgrad_app.perf"),
    ("pgrad_app.cli",), ("pgrad_app",), ("scripts",),
]
ROOMS = [room for floor in FLOORS for room in floor]


def room_of(module: str) -> str | None:
    """The most specific room ``module`` belongs to (None: third party)."""
    found = [r for r in ROOMS if module == r or module.startswith(r + ".")]
    return max(found, key=len) if found else None


def floor_of(room: str) -> int:
    return next(i for i, floor in enumerate(FLOORS) if room in floor)


def module_name(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[0] in ("scripts", "examples"):
        return "scripts." + parts[-1]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """``(line, imported module)`` for every import statement in the file."""
    tree = ast.parse(path.read_text(), str(path))
    package = module_name(path, root).rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            # "from pgrad_app import run" names a room: count the most specific name.
            names = [f"{base}.{a.name}" for a in node.names]
            out += [(node.lineno, n if room_of(n) is not None and n.split(".")[0] in (
                "pgrad", "agents", "pgrad_app") else base) for n in names]
    return out


def source_files(root: Path = ROOT):
    for top in ("pgrad", "agents", "pgrad_app", "scripts", "examples"):
        yield from sorted((root / top).rglob("*.py"))


def violations(root: Path = ROOT) -> list[str]:
    """Every import of a room on a higher floor, or of another room on the same floor."""
    found = []
    for path in source_files(root):
        here = room_of(module_name(path, root))
        for line, target in imports(path, root):
            there = room_of(target)
            if there is None or here is None or there == here:
                continue
            if floor_of(there) >= floor_of(here):
                found.append(f"{path.relative_to(root)}:{line} ({here}) imports {target} "
                             f"({there})")
    return found


def test_no_module_imports_a_layer_above_its_own():
    assert violations() == []


def test_every_module_is_in_a_room():
    """A new top-level module of pgrad_app must be placed on a floor (this list) first."""
    unplaced = [str(p.relative_to(ROOT)) for p in source_files()
                if room_of(module_name(p)) in ("pgrad_app",) and p.name not in
                ("__init__.py", "__main__.py")]
    assert unplaced == []


def test_pgrad_never_imports_agents_or_the_application():
    for path in (ROOT / "pgrad").rglob("*.py"):
        for line, target in imports(path):
            assert not target.startswith(("agents", "pgrad_app")), f"{path}:{line} {target}"


def test_nothing_in_the_application_names_a_path_under_scripts():
    """The package runs its programs as modules (python -m pgrad_app ...): a wheel has no
    scripts/ folder."""
    for path in (ROOT / "pgrad_app").rglob("*.py"):
        code = ast.parse(path.read_text())
        for node in ast.walk(code):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert node.value not in ("scripts",) and not node.value.startswith(
                    "scripts/"), f"{path}: {node.value!r}"


@pytest.mark.parametrize("probe", [
    ("pgrad/core/_probe.py", "def f():\n    import agents  # hidden in a function\n", 2),
    ("pgrad_app/run/_probe.py", "from pgrad_app.cli import entry\n", 1),
    ("pgrad_app/run/_probe.py", "from pgrad_app.distributed import workers\n", 1),
    ("pgrad_app/config/_probe.py", "import pgrad_app.run.trainer\n", 1),
])
def test_the_checker_catches_an_upward_or_sideways_import(tmp_path, probe):
    """A copy of the tree with one bad import (the source tree itself is never written)."""
    rel, code, line = probe
    for top in ("pgrad", "agents", "pgrad_app", "scripts", "examples"):
        for path in (ROOT / top).rglob("*.py"):
            target = tmp_path / path.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(path.read_text())
    assert violations(tmp_path) == []
    (tmp_path / rel).write_text(code)
    assert any(f"{Path(rel).name}:{line}" in v for v in violations(tmp_path))


@pytest.mark.subprocess  # a fresh interpreter: what import does to a clean process
def test_importing_the_application_changes_nothing_global():
    """Every module of pgrad_app imports without touching warning filters, the warning format
    or the environment: only the entry points quiet the terminal (pgrad_app.quiet.silence)."""
    code = textwrap.dedent("""
        import importlib, os, pkgutil, sys, warnings
        import tensorflow, keras, gymnasium, tensorflow_probability
        before = (list(warnings.filters), warnings.formatwarning, dict(os.environ))
        import pgrad_app
        names = [m.name for m in pkgutil.walk_packages(pgrad_app.__path__, "pgrad_app.")
                 if m.name != "pgrad_app.__main__"]
        for name in names:
            importlib.import_module(name)
        after = (list(warnings.filters), warnings.formatwarning, dict(os.environ))
        assert before == after, [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
        from pgrad_app.quiet import silence
        silence()  # what an entry point does: then the format is the commands' own
        assert warnings.formatwarning is not before[1]
        print(len(names))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout.strip().splitlines()[-1]) > 30


@pytest.mark.subprocess  # a fresh interpreter: what import does to a clean process
def test_import_pgrad_changes_nothing_global():
    """After its dependencies are imported (they set warning filters of their own), importing
    pgrad and agents (and using the taps) leaves the environment, warning filters, import
    machinery and Keras classes as they were."""
    code = textwrap.dedent("""
        import os, sys, warnings
        import tensorflow as tf, keras, tensorflow_probability, gymnasium
        before = (dict(os.environ), list(warnings.filters), list(sys.meta_path),
                  list(sys.path_hooks), keras.layers.Dense.call)
        import pgrad, agents
        after_import = (dict(os.environ), list(warnings.filters), list(sys.meta_path),
                        list(sys.path_hooks), keras.layers.Dense.call)
        assert before == after_import, [i for i, (a, b) in
                                        enumerate(zip(before, after_import)) if a != b]
        net = keras.Sequential([keras.layers.Input((3,)), keras.layers.Dense(4, "tanh"),
                                keras.layers.Dense(2)])
        x = tf.random.stateless_normal([5, 3], seed=[1, 2])
        fn = lambda o: tf.reduce_sum(net(o), 1)
        pgrad.per_step_grads(fn, net.trainable_variables, x)  # opens and closes a recording
        assert keras.layers.Dense.call is before[-1]
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("ok")


@pytest.mark.parametrize("use_taps", [True, False])
def test_user_models_outside_pgrad_are_bit_identical(use_taps):
    """A Keras model called outside pgrad gives the same outputs and gradients, bit for bit,
    before and after pgrad computed per-step gradients through it."""
    import keras
    import numpy as np
    import tensorflow as tf

    import pgrad

    keras.utils.set_random_seed(0)
    net = keras.Sequential([keras.layers.Input((3,)), keras.layers.Dense(8, "tanh"),
                            keras.layers.Dense(2)])
    x = tf.random.stateless_normal([6, 3], seed=[3, 4])

    def plain():
        with tf.GradientTape() as tape:
            y = net(x)
            total = tf.reduce_sum(y * y)
        return [y.numpy()] + [g.numpy() for g in tape.gradient(total, net.trainable_variables)]

    before = plain()
    pgrad.per_step_grads(lambda o: tf.reduce_sum(net(o), 1), net.trainable_variables, x,
                         use_taps=use_taps)
    for a, b in zip(before, plain()):
        np.testing.assert_array_equal(a, b)
