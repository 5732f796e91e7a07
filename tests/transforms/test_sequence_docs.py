"""The sequence pages run: every Python block of docs/sequences/ executes, each printed chain
is the text block under it, each variant equals its spelled-out chain, and the page's own
variant (SAPO) matches TRL's loss and logit gradient from the stored fixture."""

import ast
import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pytest
from grpo_trl import TOLERANCE, load, pgrad_loss_and_grad, relative_errors

import pgrad

DOCS = Path(__file__).resolve().parents[2] / "docs" / "sequences"
BLOCK = re.compile(r"^```(python|text)\n(.*?)^```", re.S | re.M)


def run_page(name):
    """Runs the page's Python blocks in one namespace; ``(namespace, [(block, printed, text
    block after it or None, the namespace as that block left it)])``."""
    blocks = BLOCK.findall((DOCS / name).read_text(encoding="utf-8"))
    assert blocks, name
    ns: dict = {"__name__": f"docs_{name}"}
    runs = []
    for i, (kind, code) in enumerate(blocks):
        if kind != "python":
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"{name}#{i + 1}", "exec"), ns)  # noqa: S102 (the docs' code)
        after = blocks[i + 1][1] if i + 1 < len(blocks) and blocks[i + 1][0] == "text" else None
        runs.append((code, out.getvalue(), after, dict(ns)))
    return ns, runs


def gradients(ns, transform):
    out = pgrad.engine.run(transform, transform.init(None), ns["log_prob_fn"], [ns["logits"]],
                           (ns["rows"], ns["tokens"]), ns["ctx"])
    assert float(out.metrics["path_fused"]) == 1.0
    return out.grads[0].numpy()


def test_the_grpo_family_page_runs_and_each_variant_is_its_spelled_out_chain():
    ns, runs = run_page("grpo_family.md")
    checked = []
    assert sum(bool(run[1]) for run in runs) == 1
    for code, printed, after, names_then in runs:
        if printed:  # what a block prints is the text block under it
            assert printed == after, (printed, after)
        names = [t.id for node in ast.parse(code).body if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name)]
        if "same" in names:  # `variant = grpo_chain(...)` then `same = chain(...)`
            variant = names[0]
            np.testing.assert_allclose(gradients(ns, names_then[variant]),
                                       gradients(ns, names_then["same"]), rtol=1e-6, atol=1e-9)
            checked.append(variant)
    assert checked == ["grpo", "dr_grpo", "dapo", "gspo", "cispo", "rloo"]


def test_the_variant_page_is_short_runs_and_matches_trl():
    ns, runs = run_page("write_your_own_variant.md")
    assert sum(bool(run[1]) for run in runs) == 1
    for _, printed, after, _ in runs:
        if printed:
            assert printed == after, (printed, after)
    definition = runs[0][0]
    start = definition.index("def soft_gate")
    lines = [line for line in definition[start:].splitlines() if line.strip()]
    assert len(lines) <= 15, lines
    fx, meta = load("sapo")
    assert meta["config"]["loss_type"] == "sapo"
    for path in ("fused", "full"):
        loss, grad, _ = pgrad_loss_and_grad(fx, meta, path, transform=ns["sapo"])
        loss_error, grad_error = relative_errors(fx, loss, grad)
        assert loss_error <= TOLERANCE and grad_error <= TOLERANCE, (loss_error, grad_error)


@pytest.mark.parametrize("page", ["grpo_family.md", "write_your_own_variant.md"])
def test_pages_link_each_other(page):
    text = (DOCS / page).read_text(encoding="utf-8")
    other = "write_your_own_variant.md" if page == "grpo_family.md" else "grpo_family.md"
    assert f"]({other})" in text
