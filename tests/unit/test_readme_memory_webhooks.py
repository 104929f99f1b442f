"""The README's in-memory webhook example runs as written (no database), and importing the memory
adapters pulls in neither psycopg nor SQLAlchemy (they are the ``postgres`` extra, not core
dependencies)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "docs" / "guides" / "webhooks.md"


def test_the_readme_s_memory_webhook_example_runs() -> None:
    text = README.read_text(encoding="utf-8")
    found = re.search(
        r"<!-- memory-webhooks-example -->\n```python\n(.*?)```\n<!-- /memory-webhooks-example -->",
        text,
        re.DOTALL,
    )
    assert found is not None, "README.md lost its memory-webhooks example"
    exec(compile(found.group(1), "README.md", "exec"), {"__name__": "readme"})  # noqa: S102


def test_the_memory_adapters_import_without_the_postgres_extra() -> None:
    code = (
        "import sys, outbox_adapters.memory, outbox_adapters.webhook_model\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'psycopg', 'psycopg_pool',"
        " 'sqlalchemy'}))"
    )
    done = subprocess.run(  # noqa: S603 - this interpreter, our own code
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    )
    assert done.stdout.strip() == "[]"
