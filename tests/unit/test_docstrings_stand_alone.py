"""The library's prose stands on its own: docstrings and comments cite this repository only.

Every docstring (module, class, function and ``#:``-style attribute strings) and every comment in
``src/`` and ``examples/``, and the whole text of the package data (``.html``, ``.js``, ``.sql``),
may point at ``docs/`` pages and ADRs (docs/adr/), never at a document outside the repository: no
``../shared`` path, no ``RELIABILITY.md``, ``PERFORMANCE.md``, ``DESIGN.md`` or ``STYLE.md``, no
catalogue or fault id such as ``C10``, ``B6`` or ``F4`` (say what it means, and name the ADR or
the docs/reliability.md section). Prose says what the code does, not its history: no
``issue 13 item 2``, no ``used to``.

Only prose is read (docstrings through ``ast``, comments through ``tokenize``), so code that
happens to match (a PDF font named ``F1``, a SQL literal) is never reported.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("src", "examples")
PACKAGE_DATA = {".html", ".js", ".sql"}

#: Files skipped whole while they are being moved or rewritten (none: every file is checked).
ALLOWLIST: tuple[str, ...] = ()

#: What a citation of something outside the repository, or a history note, looks like.
CITATIONS: dict[str, re.Pattern[str]] = {
    "a path outside the repository": re.compile(r"\.\./shared\b"),
    "the specification outside the repository": re.compile(
        r"\bRELIABILITY\b|\b(?:PERFORMANCE|DESIGN|STYLE)\.md\b"
    ),
    "the catalogue outside the repository": re.compile(r"\bcatalogue\b", re.IGNORECASE),
    "a catalogue, fault or security id": re.compile(r"(?<![\w.+/-])[ABCFS][1-9]\d?(?![\w+/])"),
    "an issue number (history)": re.compile(r"\bissues? #?\d+", re.IGNORECASE),
    "history": re.compile(r"\bused to\b", re.IGNORECASE),
}

#: Phrases that look like an id but are not one: removed before the id pattern is tried.
NOT_CITATIONS = re.compile(
    r"\bC0\b[^.]*?\bC1\b"  # the Unicode control sets, named together: "C0 and C1 controls"
    r"|\bC1 controls?\b"
    r"|\bA4 (?:paper|page)\b"  # the ISO paper size
)


def docstrings_and_comments(path: Path) -> Iterator[tuple[int, str]]:
    """Yield (line number, text) for every line of prose in ``path``."""
    source = path.read_text(encoding="utf-8")
    if path.suffix != ".py":
        yield from enumerate(source.splitlines(), start=1)
        return
    lines = source.splitlines()
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            end = node.end_lineno or node.lineno
            for number in range(node.lineno, end + 1):
                yield number, lines[number - 1]
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def allowed(relative: str) -> bool:
    return any(relative == entry or relative.startswith(entry) for entry in ALLOWLIST)


def scanned_files() -> Iterator[tuple[str, Path]]:
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            if "__pycache__" in path.parts or not path.is_file():
                continue
            if path.suffix == ".py" or path.suffix in PACKAGE_DATA:
                yield path.relative_to(ROOT).as_posix(), path


def citations(path: Path) -> Iterator[tuple[int, str, str]]:
    """Yield (line number, what it cites, the line) for each citation in ``path``'s prose."""
    for number, text in docstrings_and_comments(path):
        plain = NOT_CITATIONS.sub("", text)
        for what, pattern in CITATIONS.items():
            found = pattern.search(plain)
            if found:
                yield number, f"{what} ({found.group(0)!r})", text.strip()


def test_docstrings_and_comments_cite_only_this_repository() -> None:
    found = [
        f"{relative}:{number}: {what}: {text[:100]}"
        for relative, path in scanned_files()
        if not allowed(relative)
        for number, what, text in citations(path)
    ]
    assert found == [], (
        "prose that cites a document outside this repository or tells history; say what the code"
        " does and point at docs/ or docs/adr/ instead:\n" + "\n".join(found)
    )


def test_a_planted_citation_is_found(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        '"""Fenced marks (catalogue C10, RELIABILITY F4); see ../shared/DESIGN.md."""\n'
        "\n"
        "#: The scrub (C6) in the same write.\n"
        "FONT = 'F1'  # a PDF font name: code, not a citation\n"
        "\n"
        "\n"
        "def f() -> None:\n"
        '    """The mark used to be applied twice (issue 13 item 2)."""\n'
        "    # C0 and C1 controls are refused.\n",
        encoding="utf-8",
    )
    assert {(number, what) for number, what, _ in citations(planted)} == {
        (1, "a path outside the repository ('../shared')"),
        (1, "the specification outside the repository ('RELIABILITY')"),
        (1, "the catalogue outside the repository ('catalogue')"),
        (1, "a catalogue, fault or security id ('C10')"),
        (3, "a catalogue, fault or security id ('C6')"),
        (8, "an issue number (history) ('issue 13')"),
        (8, "history ('used to')"),
    }


def test_package_data_is_read_whole(tmp_path: Path) -> None:
    planted = tmp_path / "page.js"
    planted.write_text(
        '"use strict";\n// Requeue as RELIABILITY.md asks (issue 13).\n', encoding="utf-8"
    )
    assert {(number, what) for number, what, _ in citations(planted)} == {
        (2, "the specification outside the repository ('RELIABILITY')"),
        (2, "an issue number (history) ('issue 13')"),
    }
