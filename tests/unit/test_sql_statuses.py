"""The SQL that names the statuses whose mark scrubs names :data:`SCRUBBED_ON_MARK`, no more, no less.

The statements keep the list as literal SQL (readable, and the mutation matrix edits the retention
line by its exact text, tests/mutations/matrix.py), so this pins each spelling to the constant: a
status added to or taken from the constant turns this red until the SQL says the same.
"""

from __future__ import annotations

import pytest

from outbox_adapters.postgres import retention, statements
from outbox_core.delivery import SCRUBBED_ON_MARK

SCRUBBED_SQL = "IN (" + ", ".join(f"'{status.value}'" for status in sorted(SCRUBBED_ON_MARK)) + ")"


@pytest.mark.parametrize(
    "sql",
    [statements.MARK, statements.MARK_MANY, retention.PRUNE_QUEUE],
    ids=["MARK", "MARK_MANY", "PRUNE_QUEUE"],
)
def test_the_sql_lists_exactly_the_statuses_whose_mark_scrubs(sql: str) -> None:
    assert sql.count(SCRUBBED_SQL) == 1
