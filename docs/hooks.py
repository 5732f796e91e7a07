"""mkdocs hook (mkdocs.yml ``hooks:``): the docstrings' reST roles as links in the API reference.

The docstrings are Google style with Sphinx cross-references (``:class:`~pgrad.chain```); the
Markdown renders a role as its name and a code span. This turns each into an autorefs reference:
a link where the target is documented on the site, the plain code span (no ``~`` prefix) where not.
"""

import re

_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):<code>(~?)([\w.]+)(\(\))?</code>")


def _reference(match: re.Match) -> str:
    short, name, call = match.group(1), match.group(2), match.group(3) or ""
    title = name.rsplit(".", 1)[-1] if short else name
    return f'<autoref identifier="{name}" optional><code>{title}{call}</code></autoref>'


# reST's literal-block marker: "a paragraph::" before a code block reads "a paragraph:".
_LITERAL = re.compile(r"::</p>(\s*<div class=\"highlight\">)")


def on_page_content(html: str, **kwargs) -> str:
    return _LITERAL.sub(r":</p>\1", _ROLE.sub(_reference, html))


# benchmarks.md (the comparison with the published numbers) and benchmarks/README.md (the files
# scripts/benchmark.py writes) both become benchmarks/index.html: the second overwrote the first.
_MOVED = {"benchmarks/README.md": "benchmarks/files/"}


def on_files(files, config, **kwargs):
    for file in files:
        url = _MOVED.get(file.src_uri)
        if url is not None:
            file.url, file.dest_uri = url, url + "index.html"
            file.abs_dest_path = f"{config['site_dir']}/{file.dest_uri}"
    return files


# Pages whose tables are wider than the text column: no table of contents on the right, so the
# table gets its width (benchmarks.md's TOC has two entries).
_WIDE = {"benchmarks.md"}


def on_page_markdown(markdown, page, **kwargs):
    if page.file.src_uri in _WIDE:
        page.meta.setdefault("hide", []).append("toc")
    return _raise_headings(_algorithms(markdown))


#: Where a page lists the registered algorithms (docs/reference/agents.md, docs/agents.md).
ALGORITHMS_TABLE = "<!-- pgrad:algorithms-table -->"
ALGORITHMS_REFERENCE = "<!-- pgrad:algorithms-reference -->"


def _algorithms(markdown: str) -> str:
    """The registry's algorithms, found from their declarations (agents.catalog.registry), as a
    table and as reference entries: an algorithm added in one module appears here untouched."""
    if ALGORITHMS_TABLE not in markdown and ALGORITHMS_REFERENCE not in markdown:
        return markdown
    from agents.catalog.registry import declarations  # no TensorFlow

    algs = sorted(declarations().values(), key=lambda a: a.name)
    rows = ["| name | class | config | declared in | what it is |", "|---|---|---|---|---|"]
    rows += [f"| `{a.name}` | `agents.{a.class_name}` | `{a.config.__name__}` | "
             f"`{a.config.__module__}` | {a.summary} |" for a in algs]
    modules = dict.fromkeys(a.config.__module__ for a in algs)
    reference = "\n\n".join(f"::: {m}" for m in modules)
    return (markdown.replace(ALGORITHMS_TABLE, "\n".join(rows))
            .replace(ALGORITHMS_REFERENCE, reference))


_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{2,6}) ")


def _raise_headings(markdown: str) -> str:
    """A page whose only ``##`` heading is its first (a README section moved to its own page)
    gets every heading one level up: else the theme adds the nav title as a ``#`` above it, and
    the title shows twice. Anchors come from the heading text, so links are unchanged. Fenced
    code is skipped (its ``#`` lines are comments)."""
    lines, fenced, levels = markdown.split("\n"), False, []
    for i, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            levels.append((i, len(line) - len(line.lstrip("#"))))
    if not levels or levels[0][1] != 2 or sum(level <= 2 for _, level in levels) != 1:
        return markdown  # an "#" title already, or several "##" sections under the nav title
    for i, _ in levels:
        lines[i] = _HEADING.sub(lambda m: m.group(1)[1:] + " ", lines[i])
    return "\n".join(lines)
