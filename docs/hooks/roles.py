"""A griffe extension for the API reference: the docstrings are written with Sphinx's inline roles
(``:class:`Outcome```, ``:func:`~outbox_core.decide.decide```), which Markdown would show as they
are typed. This turns each into a code span of the name (``Outcome``, ``decide``) before
mkdocstrings renders the docstring; the text itself is not changed anywhere else.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

__all__ = ["SphinxRoles", "plain_roles"]

_ROLE = re.compile(
    r":(?:py:)?(?:class|func|meth|attr|data|mod|exc|obj|const):`(~?)([^`<]+?)(?:\s*<[^`>]+>)?`"
)


def _name(match: re.Match[str]) -> str:
    short, target = match.group(1), match.group(2).strip()
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


def plain_roles(text: str) -> str:
    """``text`` with every Sphinx inline role turned into a Markdown code span of its target."""
    return _ROLE.sub(_name, text)


class SphinxRoles(griffe.Extension):
    """Rewrites the roles in every object's docstring as it is loaded."""

    def on_instance(self, *, obj: griffe.Object, **_kwargs: Any) -> None:  # noqa: ANN401
        if obj.docstring is not None:
            obj.docstring.value = plain_roles(obj.docstring.value)
