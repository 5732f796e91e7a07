"""Every Python snippet in README.md and docs/*.md names only things that exist.

A snippet is code (it parses: every name it imports must exist) or a signature listing (it does
not parse: every ``pgrad.a.b(`` / ``agents.x(`` it starts a line with must resolve). Snippets are
not run (many train for minutes or start Ray); what rots first in docs is a name that moved, and
that is cheap to check exactly.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
SIGNATURE = re.compile(r"^((?:pgrad|agents|pgrad_app)(?:\.\w+)+)\(", re.M)


def _snippets() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for n, match in enumerate(BLOCK.finditer(page.read_text(encoding="utf-8"))):
            found.append((f"{page.relative_to(ROOT)}#{n + 1}", match.group(1)))
    return found


SNIPPETS = _snippets()


def test_the_docs_have_python_snippets():
    assert len(SNIPPETS) >= 20, [name for name, _ in SNIPPETS]


def _exists(module: str, name: str) -> bool:
    mod = importlib.import_module(module)
    if hasattr(mod, name):
        return True
    try:
        importlib.import_module(f"{module}.{name}")
    except ModuleNotFoundError:
        return False
    return True


def _resolve(name: str, dotted: str, callable_: bool = True) -> None:
    head, *rest = dotted.split(".")
    obj = importlib.import_module(head)
    for i, part in enumerate(rest):
        if not hasattr(obj, part):
            obj = importlib.import_module(".".join([head, *rest[: i + 1]]))
        else:
            obj = getattr(obj, part)
    assert callable(obj) or not callable_, f"{name}: {dotted} is not callable"


@pytest.mark.parametrize("name,code", SNIPPETS, ids=[name for name, _ in SNIPPETS])
def test_snippet_names_exist(name, code):
    try:
        tree = ast.parse(code, filename=name)
    except SyntaxError:
        signatures = SIGNATURE.findall(code)
        assert signatures, f"{name}: neither code that parses nor a signature listing"
        for dotted in signatures:
            _resolve(name, dotted)
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                importlib.import_module(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [a.name for a in node.names if a.name != "*"]
            missing = [n for n in names if not _exists(node.module, n)]
            assert not missing, f"{name}: `from {node.module} import` {missing} does not exist"


INLINE_NAME = re.compile(r"`((?:pgrad|agents|pgrad_app)(?:\.[A-Za-z_]\w*)+)(?:\([^`]*\))?`")
INLINE_PATH = re.compile(
    r"`((?:pgrad|agents|pgrad_app|scripts|tests|examples|docs|benchmarks)/[\w/.\-]+"
    r"\.(?:py|yaml|yml|md|jsonl|json))(?![\w.])")
OTHER_REPOS = {"examples/mujoco/README.md"}  # Tianshou's, cited in docs/benchmarks.md


def _inline(pattern: re.Pattern) -> list[tuple[str, str]]:
    return sorted({(str(page.relative_to(ROOT)), m.group(1))
                   for page in PAGES for m in pattern.finditer(page.read_text(encoding="utf-8"))})


def test_inline_dotted_names_resolve():
    names = _inline(INLINE_NAME)
    assert len(names) >= 50
    stale = []
    for page, dotted in names:
        try:
            _resolve(page, dotted, callable_=False)
        except (ImportError, AssertionError):
            stale.append(f"{page}: {dotted}")
    assert not stale, stale


def test_inline_file_paths_exist():
    paths = _inline(INLINE_PATH)
    assert len(paths) >= 50
    stale = [f"{page}: {path}" for page, path in paths
             if path not in OTHER_REPOS and "AGENT" not in path and not (ROOT / path).exists()]
    assert not stale, stale
