"""Every file of the repository that the code's own text names exists.

The text is every docstring, comment and string literal in ``pgrad/``, ``agents/``,
``pgrad_app/`` and ``scripts/``. It names files two ways, and both are checked without importing
anything:

* paths from the top of the repository (``docs/tuning.md``, ``pgrad_app/config/hyperparams/``,
  ``scripts/train.py``); placeholders stand for any name (``AGENT.yaml``, ``<agent>.yaml``,
  ``*.yaml``) and ``{a,b}`` for each of its choices, so ``hyperparams/AGENT.yaml`` needs at least
  one file there;
* dotted names of pgrad's own modules in a reference (``:mod:`pgrad.rl.collection.rollout```,
  ``:func:`pgrad_app.run.evaluate.evaluate_run```, or between double backticks): the module must
  be a file or a package, and the first name after it one that the module defines or imports.

What rots first when files move is a name in prose that nothing runs; this finds it.
"""

from __future__ import annotations

import ast
import io
import itertools
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("pgrad", "agents", "pgrad_app", "scripts")
#: Top-level folders a path in the text can start from.
TOPS = ("pgrad", "agents", "pgrad_app", "scripts", "docs", "configs", "examples", "tests",
        "benchmarks", "shared")
PATH = re.compile(r"(?<![\w./~$-])((?:" + "|".join(TOPS) + r")/(?:[\w.*{}<>,-]+/)*[\w.*{}<>,-]*)")
#: A dotted name of pgrad's own packages inside a reference role or double backticks.
DOTTED = re.compile(r"(?::(?:mod|func|class|meth|data|attr|exc|obj):`~?|``)"
                    r"((?:pgrad|agents|pgrad_app)(?:\.\w+)+)(?:\(\))?(?:`|``)")
PLACEHOLDER = re.compile(r"<[^>/]*>|\b[A-Z][A-Z0-9_]*[A-Z0-9]\b|\b[A-Z]\b")
#: Gymnasium ids in pgrad's namespace (``pgrad/Sort-v0``) look like paths and are not.
ENV_ID = re.compile(r"-v\d+$")
#: Dotted names in the text that are not modules, and what they are.
NOT_MODULES = {"pgrad.mujoco": "a logger's name (pgrad/rl/envs/ids.py)"}


def source_files() -> list[Path]:
    return [p for top in SCANNED for p in sorted((ROOT / top).rglob("*.py"))
            if "__pycache__" not in p.parts]


def texts(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, text)`` of every comment and plain string literal (docstrings included)."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, str(path))
    formatted = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
                 for v in node.values}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in formatted):
            yield node.lineno, node.value
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string


def _choices(text: str) -> list[str]:
    """``a/{x,y}.md`` -> ``["a/x.md", "a/y.md"]`` (every brace group expanded)."""
    parts = re.split(r"\{([^{}]*)\}", text)
    options = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(combo) for combo in itertools.product(*options)]


def path_exists(named: str, root: Path = ROOT) -> bool:
    """Whether ``named`` (relative to ``root``, placeholders allowed) names something there."""
    named = named.rstrip(",")
    for candidate in _choices(named):
        pattern = PLACEHOLDER.sub("*", candidate)
        wants_dir = pattern.endswith("/")
        pattern = pattern.rstrip("/")
        if any(ch in pattern for ch in "*?["):
            found = list(root.glob(pattern))
        else:
            found = [p for p in (root / pattern, root / f"{pattern}.py") if p.exists()]
        if not any(p.is_dir() for p in found) if wants_dir else not found:
            return False
    return True


def _top_names(path: Path) -> set[str]:
    """Names a module defines, imports or lists in ``__all__`` (what ``module.name`` reaches;
    a package's ``__getattr__`` serves the names of its ``__all__``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                names.update(e.value for e in ast.walk(node.value)
                             if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return names


def module_exists(dotted: str, root: Path = ROOT) -> bool:
    """Whether ``dotted`` is a module of the repository, or a module and a name it holds."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = root.joinpath(*parts[:cut])
        module = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if module.is_file():
            rest = parts[cut:]
            if not rest:
                return True
            if (base / rest[0]).is_dir() or (base / f"{rest[0]}.py").is_file():
                return False  # a submodule would have matched the longer cut
            return rest[0] in _top_names(module)
    return False


def named(kind: str) -> list[tuple[str, str]]:
    """``(file:line, what it names)`` for every path (``kind="path"``) or dotted module name
    (``kind="module"``) in the scanned text."""
    found = []
    regex = PATH if kind == "path" else DOTTED
    for path in source_files():
        for line, text in texts(path):
            for match in regex.finditer(text):
                what = match.group(1).rstrip(".,:;")  # the sentence's, not the path's
                if ENV_ID.search(what) or what in NOT_MODULES:
                    continue
                found.append((f"{path.relative_to(ROOT)}:{line}", what))
    return found


def test_every_path_the_code_names_exists():
    paths = named("path")
    assert len(paths) > 100  # the scan reads what it should
    missing = sorted({f"{where}: {p}" for where, p in paths if not path_exists(p)})
    assert not missing, "named but not in the repository:\n" + "\n".join(missing)


def test_every_module_the_code_names_exists():
    modules = named("module")
    assert len(modules) > 100
    missing = sorted({f"{where}: {m}" for where, m in modules if not module_exists(m)})
    assert not missing, "named but not a module (or a name in one):\n" + "\n".join(missing)


def test_the_checks_can_fail(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "mod.py").write_text("import os\nX = 1\ndef f():\n    pass\n")
    assert path_exists("docs/a.md", tmp_path) and path_exists("docs/", tmp_path)
    assert path_exists("docs/AGENT.md", tmp_path) and path_exists("docs/<name>.md", tmp_path)
    assert path_exists("docs/{a}.md", tmp_path) and not path_exists("docs/{a,b}.md", tmp_path)
    assert not path_exists("docs/b.md", tmp_path) and not path_exists("docs/a.md/", tmp_path)
    assert not path_exists("configs/ppo.yaml", tmp_path)
    for good in ("pkg", "pkg.mod", "pkg.mod.f", "pkg.mod.X", "pkg.mod.os"):
        assert module_exists(good, tmp_path), good
    for bad in ("pkg.other", "pkg.mod.g", "pkg.mod2.f"):
        assert not module_exists(bad, tmp_path), bad
    text = 'see ``pgrad.rl.x`` and :func:`~pgrad_app.run.y.z` and docs/x.md, RESULTS/docs/no'
    assert [m.group(1) for m in DOTTED.finditer(text)] == ["pgrad.rl.x", "pgrad_app.run.y.z"]
    assert [m.group(1).rstrip(".,") for m in PATH.finditer(text)] == ["docs/x.md"]
