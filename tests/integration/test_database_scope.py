"""The database's scope (postgres.identity): what makes the e-mail Message-IDs of two databases
differ for rows of the same id (lanes.email.row_message_id)."""

from __future__ import annotations

import email
import re

import pytest
from psycopg.conninfo import make_conninfo
from tests.support.cli import outbox
from tests.support.postgres import query

from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.lanes.email import row_message_id
from outbox_adapters.postgres.identity import DATABASE_SCOPE, database_scope
from outbox_adapters.postgres.pools import connection_pool

pytestmark = pytest.mark.integration


async def scope_of(dsn: str) -> str:
    async with connection_pool(dsn, max_size=1) as pool:
        return await database_scope(pool)


async def test_the_scope_is_the_cluster_s_identifier_and_the_database_s_oid(dsn: str) -> None:
    scope = await scope_of(dsn)
    assert re.fullmatch(r"\d+/\d+", scope), scope
    assert await scope_of(dsn) == scope  # every worker of this database computes the same one
    # Another database of the same cluster (a dump restored beside it): another scope.
    other = make_conninfo(dsn, dbname="postgres")
    theirs = await scope_of(other)
    assert theirs.split("/")[0] == scope.split("/")[0]
    assert theirs != scope


def test_outbox_worker_sends_the_message_id_of_the_row_in_this_database(
    dsn: str, lane: str, sink: SmtpSink
) -> None:
    """``outbox worker`` passes the database's scope to the e-mail handler: the Message-ID is
    ``row_message_id`` of the row under that scope (not the unscoped one)."""
    enqueued = outbox(
        "enqueue", "email", "--database-url", dsn, "--lane", lane,
        "--to", "ada@example.com", "--subject", "Hi", "--text", "Hello",
    )  # fmt: skip
    assert enqueued.exit_code == 0, enqueued.output
    sent = outbox(
        "worker", "--drain", "--database-url", dsn, "--lane", lane,
        "--smtp-url", f"smtp://{sink.host}:{sink.port}", "--smtp-tls", "starttls",
        "--smtp-ca-file", str(sink.ca_file), "--sender", "outbox@example.com",
        "--poll-interval", "0.1",
    )  # fmt: skip
    assert sent.exit_code == 0, sent.output
    [(row_id, created)] = query(
        dsn, "SELECT id, created_at FROM outbox_message WHERE lane = %s", lane
    )
    [(scope,)] = query(dsn, DATABASE_SCOPE)
    [mail] = sink.received
    found = str(email.message_from_bytes(mail.data)["Message-ID"])
    assert found == row_message_id(lane, row_id, created, domain="example.com", scope=scope)
    assert found != row_message_id(lane, row_id, created, domain="example.com")
    assert re.fullmatch(r"<[a-z2-7]{32}@example\.com>", found), found
