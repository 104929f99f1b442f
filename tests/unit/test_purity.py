"""The core's purity rule is enforced by the repository's own lint, and the lint bites.

``outbox_core`` never reads the clock, randomness or the environment and never imports I/O or a
third-party library but attrs (ADR 0001, docs/testing.md "The purity rule"). Two checks enforce
it in ``nox -s lint``: ruff's banned-api rule (TID251, applied to src/outbox_core only) for the
calls and the clock/random/environment modules, and the import-linter sans-IO contract for the I/O
modules. These tests plant a violation in a copy of ``src/`` and expect each tool to refuse it, so
a config edit that silently turns a check off fails here. The third-party allowlist, which neither
tool can express, is checked here directly.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "src" / "outbox_core"
BIN = Path(sys.executable).parent
#: The only imports the core may make beyond the standard library.
ALLOWED_THIRD_PARTY = {"attrs", "attr", "outbox_core", "typing_extensions"}

pytestmark = pytest.mark.skipif(
    "MUTANT_UNDER_TEST" in os.environ,
    reason="mutmut's trampolines import os into the core under test; the rule is for the source",
)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of src/ and pyproject.toml (the lint configuration) to plant violations in."""
    shutil.copytree(ROOT / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def plant(tree: Path, module: str, code: str) -> None:
    path = tree / "src" / module
    path.write_text(path.read_text(encoding="utf-8") + "\n\n" + code + "\n", encoding="utf-8")


def ruff(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "TID251",
         "--output-format", "concise", "src"],
        cwd=tree, capture_output=True, text=True, check=False,
    )  # fmt: skip


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}  # the copy, not the installed tree
    return subprocess.run(  # noqa: S603 - import-linter from this environment, fixed arguments
        [str(BIN / "lint-imports"), "--no-cache"],
        cwd=tree, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip


BANNED_CALLS = {
    "datetime.now": "from datetime import datetime\n\ndef _t() -> datetime:\n    return datetime.now()",
    "datetime.utcnow": "import datetime\n\n_T = datetime.datetime.utcnow()",
    "datetime.today": "from datetime import datetime as _dt\n\n_T = _dt.today()",
    "date.today": "from datetime import date\n\n_T = date.today()",
    "time.time": "import time\n\n_T = time.time()",
    "time.monotonic": "from time import monotonic\n\n_T = monotonic()",
    "random.random": "import random\n\n_J = random.random()",
    "secrets.token_hex": "from secrets import token_hex\n\n_K = token_hex(8)",
    "os.getenv": "import os\n\n_E = os.getenv('HOME')",
    "os.environ": "from os import environ\n\n_E = environ.get('HOME')",
    "uuid.uuid4": "import uuid\n\n_U = uuid.uuid4()",
    "sys.argv": "import sys\n\n_A = sys.argv",
}  # fmt: skip


def test_ruff_passes_the_core_as_it_is(tree: Path) -> None:
    result = ruff(tree)
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("call", list(BANNED_CALLS))
def test_ruff_refuses_the_clock_randomness_and_environment_in_the_core(
    tree: Path, call: str
) -> None:
    plant(tree, "outbox_core/backoff.py", BANNED_CALLS[call])
    result = ruff(tree)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "src/outbox_core/backoff.py" in result.stdout
    assert "TID251" in result.stdout


def test_ruff_leaves_the_adapters_free_to_read_the_clock(tree: Path) -> None:
    plant(tree, "outbox_adapters/clock.py", BANNED_CALLS["datetime.now"])
    plant(tree, "outbox_adapters/clock.py", BANNED_CALLS["os.getenv"])
    result = ruff(tree)
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize(
    ("module", "code", "forbidden"),
    [
        ("outbox_core/lease.py", "import socket", "socket"),
        ("outbox_core/decide.py", "import asyncio", "asyncio"),
        ("outbox_core/payload.py", "from outbox_adapters import clock", "outbox_adapters"),
    ],
)
def test_the_import_contract_refuses_io_in_the_core(
    tree: Path, module: str, code: str, forbidden: str
) -> None:
    plant(tree, module, code)
    result = lint_imports(tree)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "BROKEN" in result.stdout
    assert f"-> {forbidden}" in result.stdout


def test_the_import_contract_passes_the_tree_as_it_is(tree: Path) -> None:
    result = lint_imports(tree)
    assert result.returncode == 0, result.stdout + result.stderr


def imported_roots(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def test_the_core_imports_the_standard_library_and_attrs_only() -> None:
    allowed = set(sys.stdlib_module_names) | ALLOWED_THIRD_PARTY
    foreign = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in sorted(CORE.rglob("*.py"))
        for line, name in imported_roots(path)
        if name not in allowed
    ]
    assert foreign == []


def test_the_allowlist_check_sees_a_third_party_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import attrs\nfrom httpx import Client\nimport email.utils\n")
    assert [name for _, name in imported_roots(module)] == ["attrs", "httpx", "email"]
