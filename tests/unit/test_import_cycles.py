"""No import circle inside ``outbox_core`` or ``outbox_adapters`` (issue 23).

The module graph is read from the source with :mod:`ast`, not by importing: every ``import`` and
``from ... import`` counts, at module level, under ``if TYPE_CHECKING:`` and inside a function
alike. A circle under ``TYPE_CHECKING`` still says two modules each need the other, and a lazy
import only moves the circle from import time to call time. An import names the module it loads:
``from a.b import c`` is an edge to ``a.b.c`` when that is a module, else to ``a.b``; a package's
``__init__`` being run on the way is not counted (that would make every re-exporting package a
circle).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGES = ("outbox_core", "outbox_adapters")


def module_files(src: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Every module of ``packages`` under ``src``, by dotted name (a package by its own name)."""
    found = {}
    for package in packages:
        for path in sorted((src / package).rglob("*.py")):
            parts = path.relative_to(src).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _imported(name: str, path: Path, modules: Mapping[str, Path]) -> Iterator[str]:
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package[: len(package) - node.level + 1]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    yield f"{base}.{alias.name}"
                elif base in modules:
                    yield base


def import_graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """Each module's imports of the other modules in ``modules``."""
    return {
        name: {target for target in _imported(name, path, modules) if target != name}
        for name, path in modules.items()
    }


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected group of two or more modules, as ``a -> b -> ... -> a``
    (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = stack[stack.index(node) :]
                    del stack[stack.index(node) :]
                    if len(group) > 1:
                        found.append(_circle(sorted(group), graph))
            elif target not in index:
                index[target] = low[target] = len(index)
                stack.append(target)
                work.append((target, iter(sorted(graph[target]))))
            elif target in stack:
                low[node] = min(low[node], index[target])
    return found


def _circle(group: list[str], graph: Mapping[str, set[str]]) -> list[str]:
    """A path from the group's first module back to itself, inside the group (breadth first)."""
    start, members = group[0], set(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & members):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"{group} is not a circle")  # pragma: no cover - Tarjan's groups are


def test_no_import_circle_in_the_library() -> None:
    found = cycles(import_graph(module_files(SRC, PACKAGES)))
    assert not found, "import circles: " + "; ".join(" -> ".join(circle) for circle in found)


def test_the_check_finds_a_circle_under_type_checking_and_through_relative_imports(
    tmp_path: Path,
) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from pkg.a import A\n")
    (package / "a.py").write_text("from pkg.sub import b\nA = 1\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..c import C\n"
    )
    (package / "c.py").write_text("def f():\n    import pkg.a\n")
    (package / "d.py").write_text("from pkg import a\n")

    graph = import_graph(module_files(tmp_path, ("pkg",)))

    assert graph["pkg.d"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]]
