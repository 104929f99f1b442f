"""The suite's own layout: pytest imports test modules by their file name (rootdir-relative, no
packages under tests/unit or tests/integration), so two test files with one name make the whole
collection fail, which a targeted run of either file never shows."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_file_name() -> None:
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        if not (path.parent / "__init__.py").exists():
            by_name[path.name].append(path.relative_to(TESTS).as_posix())
    assert {name: paths for name, paths in by_name.items() if len(paths) > 1} == {}
