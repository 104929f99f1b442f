"""A channel's recipient rows on PostgreSQL commit whatever the pool's connections are: the one
statement that writes an event's rows is its own transaction on an autocommit connection, and is
committed with the connection's transaction when the pool takes back one that is not (the rows
must be there for the lane's worker and for another process's recheck).
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from outbox_adapters.lanes.email import email_message
from outbox_adapters.postgres.channels import RecipientRows
from outbox_core.delivery import Status

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("autocommit", [True, False], ids=["autocommit", "transactions"])
@pytest.mark.parametrize("new", [True, False], ids=["first-delivery", "recheck"])
async def test_an_events_rows_are_committed_once_and_seen_by_another_connection(
    dsn: str, lane: str, *, autocommit: bool, new: bool
) -> None:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        dsn, min_size=1, max_size=1, kwargs={"autocommit": autocommit}, open=False
    )
    messages = [
        email_message(to=to, subject="s", text="t", lane=lane, idempotency_key=f"e1:{kind}")
        for to, kind in (("a@example.org", "welcome"), ("b@example.org", "notify"))
    ]
    async with pool:
        rows = RecipientRows(pool, lane=lane)
        first = await rows.ensure(messages, new=new)
        again = await rows.ensure(messages)
    assert set(first) == set(again) == {"e1:welcome", "e1:notify"}
    assert {row.status for row in (*first.values(), *again.values())} == {Status.PENDING}
    with psycopg.connect(dsn) as other:
        stored = other.execute(
            "SELECT idempotency_key, payload ->> 'to', status FROM outbox_message"
            " WHERE lane = %s ORDER BY id",
            (lane,),
        ).fetchall()
    assert stored == [
        ("e1:welcome", "a@example.org", "pending"),
        ("e1:notify", "b@example.org", "pending"),
    ]
