"""The import contract: each layer imports only the layers below it; importing pgrad is inert.

Layers, bottom to top (docs/architecture.md): pgrad.core < pgrad.transforms < pgrad.engine <
pgrad.tools < pgrad.rl < pgrad (the public package) < agents < pgrad_app < scripts, examples.
Every import counts, including those inside functions: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ["pgrad.core", "pgrad.transforms", "pgrad.engine", "pgrad.tools", "pgrad.rl", "pgrad",
          "agents", "pgrad_app", "scripts"]


def layer_of(module: str) -> int | None:
    """Index in LAYERS of the most specific layer ``module`` belongs to (None: third party)."""
    best = None
    for i, name in enumerate(LAYERS):
        if module == name or module.startswith(name + "."):
            if best is None or len(name) > len(LAYERS[best]):
                best = i
    return best


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[0] in ("scripts", "examples"):
        return "scripts." + parts[-1]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports(path: Path) -> list[tuple[int, str]]:
    """``(line, imported module)`` for every import statement in the file."""
    tree = ast.parse(path.read_text(), str(path))
    package = module_name(path).rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            # "from pgrad import x" may name a submodule: count the most specific name.
            names = [f"{base}.{a.name}" for a in node.names]
            out += [(node.lineno, n if layer_of(n) is not None and n.split(".")[0] in (
                "pgrad", "agents", "pgrad_app") else base) for n in names]
    return out


def source_files():
    for top in ("pgrad", "agents", "pgrad_app", "scripts", "examples"):
        yield from sorted((ROOT / top).rglob("*.py"))


def violations() -> list[str]:
    found = []
    for path in source_files():
        here = layer_of(module_name(path))
        for line, target in imports(path):
            there = layer_of(target)
            if there is None or here is None:
                continue
            # "from pgrad import per_step" resolves to a submodule that may not exist under that
            # name any more (an alias); the alias's layer is what it points to.
            if there > here:
                found.append(f"{path.relative_to(ROOT)}:{line} ({LAYERS[here]}) imports "
                             f"{target} ({LAYERS[there]})")
    return found


def test_no_module_imports_a_layer_above_its_own():
    assert violations() == []


def test_pgrad_never_imports_agents_or_the_application():
    for path in (ROOT / "pgrad").rglob("*.py"):
        for line, target in imports(path):
            assert not target.startswith(("agents", "pgrad_app")), f"{path}:{line} {target}"


def test_the_checker_catches_an_upward_import(tmp_path, monkeypatch):
    bad = ROOT / "pgrad" / "core" / "_layer_probe.py"
    bad.write_text("def f():\n    import agents  # hidden in a function: still a dependency\n")
    try:
        assert any("_layer_probe.py:2" in v for v in violations())
    finally:
        bad.unlink()


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
