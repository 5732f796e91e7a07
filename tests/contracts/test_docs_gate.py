"""The documentation gate can fail: the strict build (`make docs`, `make lint`) passes on the tree
as it is, and fails on a copy of it with a broken link, a broken anchor and a page that is
neither in the navigation nor listed as kept out of it: one warning each.

The copies hold docs/ and mkdocs.yml; the packages whose docstrings the API reference renders
are linked in, not copied. Each build takes ~6 s.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).with_name("mkdocs")

pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.skipif(not MKDOCS.exists(), reason="the docs extra is not installed "
                       "(pip install -e '.[docs]'; make test installs it)"),
]


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of the site under ``root``, as ``make docs`` runs it (its log,
    stderr and stdout together, in ``stdout``)."""
    return subprocess.run([str(MKDOCS), "build", "--strict", "-d", str(site)], cwd=root,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


@pytest.fixture
def copy(tmp_path) -> Path:
    root = tmp_path / "tree"
    shutil.copytree(ROOT / "docs", root / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "mkdocs.yml", root / "mkdocs.yml")
    for package in ("pgrad", "agents", "pgrad_app"):
        (root / package).symlink_to(ROOT / package, target_is_directory=True)
    return root


def test_the_site_builds_strict(tmp_path):
    proc = build(ROOT, tmp_path / "site")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "WARNING" not in proc.stdout, proc.stdout[-3000:]


def _append(page: Path, text: str) -> None:
    page.write_text(page.read_text(encoding="utf-8") + text, encoding="utf-8")


def test_a_broken_link_a_broken_anchor_and_a_page_outside_the_navigation_fail_the_build(
        copy, tmp_path):
    """The three faults planted in one copy (one build, not three): each is one warning of
    its own, so the build stops at exactly three, and each names what it found."""
    _append(copy / "docs" / "troubleshooting.md", "\nSee [the old page](no_such_page.md).\n"
            "\nSee [a section](agents.md#no-such-section).\n")
    (copy / "docs" / "orphan.md").write_text("# A page nobody can reach\n")
    proc = build(copy, tmp_path / "site")
    assert proc.returncode != 0
    warnings = [ln for ln in proc.stdout.splitlines() if ln.startswith("WARNING")]
    assert len(warnings) == 3, proc.stdout[-3000:]
    assert "Aborted with 3 warnings in strict mode" in proc.stdout, proc.stdout[-3000:]
    assert any("no_such_page.md" in w for w in warnings), warnings
    assert any("no-such-section" in w for w in warnings), warnings
    # the navigation's warning lists the pages on the lines after it
    assert any('"nav" configuration' in w for w in warnings), warnings
    assert "- orphan.md" in proc.stdout, proc.stdout[-3000:]
