"""Which row an e-mail was sent for, from its Message-ID (outbox_adapters.lanes.email.row_message_id).

The Message-ID is opaque: a test finds the row by computing the Message-ID of every row it may be
(its lane, id and enqueue time), under each scope a worker may use: ``""`` (an ``EmailHandler``
built without one, as the test processes build it) and the database's (``outbox worker``).
Domains are left out (the token before ``@`` is compared).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from outbox_adapters.lanes.email import row_message_id

__all__ = ["rows_by_token", "rows_in_database", "token_of"]


def token_of(message_id: str) -> str:
    """The part of a Message-ID before its ``@``, without the angle brackets."""
    return message_id.strip().strip("<>").partition("@")[0]


def rows_by_token(
    rows: Iterable[tuple[str, int, datetime]], *, scopes: Iterable[str] = ("",)
) -> dict[str, int]:
    """Message-ID token → row id, for ``rows`` given as (lane, id, created_at)."""
    found: dict[str, int] = {}
    for scope in tuple(scopes):
        for lane, row_id, created in rows:
            found[token_of(row_message_id(lane, row_id, created, domain="x", scope=scope))] = row_id
    return found


def rows_in_database(dsn: str, lane: str, *, table: str = "outbox_message") -> dict[str, int]:
    """Message-ID token → row id, for every row of ``lane`` in ``table`` of the database ``dsn``,
    under both scopes."""
    import psycopg  # noqa: PLC0415 - the in-memory users of this module need no PostgreSQL

    from outbox_adapters.postgres.identity import DATABASE_SCOPE  # noqa: PLC0415

    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        rows = [
            (str(lane_), int(row_id), created)
            for lane_, row_id, created in conn.execute(
                f"SELECT lane, id, created_at FROM {table} WHERE lane = %s",  # noqa: S608 - a test's own table name
                (lane,),
            )
        ]
        scope = conn.execute(DATABASE_SCOPE).fetchone()
    return rows_by_token(rows, scopes=("", "" if scope is None else str(scope[0])))
