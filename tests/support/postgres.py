"""The outbox tables as a test reads and writes them: plain SQL on a connection of its own.

What goes through enqueue here goes through the real ``enqueue_async`` on a host transaction, as an
application would write it; reads go around the store, so a test checks what PostgreSQL holds, not
the store's own idea of it.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterable, Iterator
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row

from outbox_adapters.postgres import enqueue_async
from outbox_core.messages import NewMessage

#: Every kind of handle ``enqueue``/``enqueue_async`` takes a host transaction on.
HANDLE_KINDS = [
    "psycopg",
    "psycopg-async",
    "sqlalchemy-connection",
    "sqlalchemy-async-connection",
    "sqlalchemy-session",
    "sqlalchemy-async-session",
]


@contextlib.contextmanager
def scratch_database(server_dsn: str, prefix: str = "outbox_test") -> Iterator[str]:
    """A DSN for a new, empty database on ``server_dsn``'s server; dropped (FORCE) afterwards."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = conninfo_to_dict(server_dsn)
    params["dbname"] = name
    try:
        yield make_conninfo("", **params)
    finally:
        with (
            psycopg.connect(server_dsn, autocommit=True) as admin,
            contextlib.suppress(Exception),
        ):
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def query(dsn: str, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    """Every row ``statement`` returns, on an autocommit connection of its own."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(statement, params).fetchall()


def stored(dsn: str, row_id: int) -> dict[str, Any]:
    """The outbox row ``row_id`` as PostgreSQL holds it, by column name; it must exist."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        row = conn.execute("SELECT * FROM outbox_message WHERE id = %s", (row_id,)).fetchone()
    assert row is not None, f"no outbox row {row_id}"
    return row


def stored_rows(dsn: str, lane: str | None = None) -> dict[int, dict[str, Any]]:
    """Every outbox row (of ``lane`` when given) by id, in id order."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        found = conn.execute(
            "SELECT * FROM outbox_message WHERE %(lane)s::text IS NULL OR lane = %(lane)s"
            " ORDER BY id",
            {"lane": lane},
        ).fetchall()
    return {row["id"]: row for row in found}


def empty_outbox(dsn: str) -> None:
    """Truncate every ``outbox_*`` table (messages, audits, leases), restarting the ids."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        names = [
            name
            for (name,) in conn.execute(
                "SELECT tablename FROM pg_tables"
                " WHERE schemaname = current_schema() AND tablename LIKE 'outbox\\_%'"
            ).fetchall()
        ]
        if names:
            tables = sql.SQL(", ").join(sql.Identifier(name) for name in names)
            conn.execute(sql.SQL("TRUNCATE {} RESTART IDENTITY").format(tables))


async def enqueue_all(
    dsn: str, messages: Iterable[NewMessage], *, notify: bool = True
) -> list[int]:
    """Enqueue ``messages`` inside ONE host transaction, as an application would; their row ids."""
    async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
        return [int((await enqueue_async(conn, m, notify=notify)).row_id) for m in messages]


def insert_raw(dsn: str, lane: str, text: str) -> int:
    """A row written AROUND enqueue (a buggy producer, an old row): its payload the JSON ``text``
    as it is, due now; its id."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute(
            "INSERT INTO outbox_message (lane, payload) VALUES (%s, %s::jsonb) RETURNING id",
            (lane, text),
        ).fetchone()
    assert found is not None
    return int(found[0])
