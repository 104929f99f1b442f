"""Markdown helpers of the bench report: figures by dotted path, cells and tables."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.stats import Figure

__all__ = ["cell", "get", "plain", "table", "unavailable"]


def plain(value: Any) -> Any:  # noqa: ANN401 - any JSON-able tree
    """The results tree with every :class:`Figure` turned into its JSON form."""
    if isinstance(value, Figure):
        return value.as_json()
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value


def get(tree: Mapping[str, Any], path: str) -> Any:  # noqa: ANN401
    """The node at the dotted ``path`` of ``tree``, or ``None``."""
    node: Any = tree
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def cell(tree: Mapping[str, Any], path: str, suffix: str = "") -> str:
    """The figure at ``path`` as a table cell (``—`` when there is none)."""
    value = get(tree, path)
    if isinstance(value, Figure):
        return value.text() + suffix
    if value is None:
        return "—"
    return str(value)


def table(header: list[str], body: list[list[str]]) -> list[str]:
    """A markdown table and the blank line after it."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return [*lines, ""]


def unavailable(section: Mapping[str, Any]) -> str | None:
    """Why a comparison has no figures (it failed or was skipped), or ``None``."""
    if "error" in section:
        return f"failed: {section['error']}"
    if "skipped" in section:
        return f"skipped: {section['skipped']}"
    return None
