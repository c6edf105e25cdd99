"""MkDocs hook: render the Sphinx roles of the docstrings (:func:`x`, :class:`~a.B`) as plain code.

The docstrings are written as reST-flavoured prose; mkdocstrings turns ```x``` into code but leaves
the role prefix as text. This drops the prefix and, for ``~a.b.C``, keeps the last component, as Sphinx
shows it.
"""

from __future__ import annotations

import re

_ROLE = re.compile(r":(?:func|meth|class|mod|attr|data|exc|obj):(<code>)(~?)([^<]*)(</code>)")


def _plain(m: re.Match) -> str:
    text = m.group(3)
    if m.group(2):
        text = text.rsplit(".", 1)[-1]
    return f"{m.group(1)}{text}{m.group(4)}"


def on_page_content(html: str, **kwargs) -> str:
    return _ROLE.sub(_plain, html)
