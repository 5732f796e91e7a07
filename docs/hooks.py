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


def on_page_content(html: str, **kwargs) -> str:
    return _ROLE.sub(_reference, html)
