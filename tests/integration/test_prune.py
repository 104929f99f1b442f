"""``outbox prune`` on a database of its own: what goes (sent, published, delivered, read, older than
the cut-off), what stays (pending, failed, unread, young), batches that skip a held row instead of
waiting for it, and a walk that stops where the young rows begin."""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterator
from typing import Any, cast

import psycopg
import pytest
from tests.support.cli import one_line_error, outbox
from tests.support.postgres import query, scratch_database

from outbox_adapters.postgres import schema
from outbox_adapters.postgres.retention import prune_queue
from outbox_adapters.postgres.tables import outbox_message

pytestmark = pytest.mark.integration

QUEUES = {
    "messages": "outbox_message",
    "webhooks": "outbox_webhook",
    "deliveries": "outbox_webhook_delivery",
    "events": "outbox_event",
}
#: (status, resolved days ago, created days ago, kept?) for each queue table's rows.
ROWS = [
    ("dispatched", 40, 41, False),
    ("dispatched", 35, 41, False),
    ("skipped", 31, 41, False),
    ("dispatched", 1, 41, True),  # created long ago, sent yesterday: young
    ("failed", 40, 41, True),  # the operator's
    ("pending", None, 41, True),  # work
    ("dispatched", 1, 1, True),
]


PRUNE_MESSAGES = ("prune", "--older-than", "30d", "--json", "--only", "messages")


@pytest.fixture
def db(postgres_server: str) -> Iterator[str]:
    with scratch_database(postgres_server, "prune") as dsn:
        schema.apply(dsn)
        yield dsn


def _payload(table: str) -> dict[str, str]:
    if table == "outbox_event":  # its generated columns read the envelope
        token = secrets.token_hex(4)
        return {"topic": "t", "subject": "k", "id": f"ev-{token}", "type": "x", "source": "s"}
    return {"to": "a@example.org"}


def _fill(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in QUEUES.values():
            for status, resolved, created, _ in ROWS:
                conn.execute(
                    f"INSERT INTO {table} (lane, payload, status, resolved_at, created_at,"  # noqa: S608 - our own table names
                    " next_attempt_at, attempts, claim_token)"
                    " VALUES ('prune-test', %s, %s, now() - make_interval(days => %s),"
                    " now() - make_interval(days => %s), now(), 1, %s)",
                    (
                        json.dumps(_payload(table)),
                        status,
                        resolved,
                        created,
                        None if status == "pending" else "token",
                    ),
                )
        for read_days, created in [(35, 40), (33, 40), (None, 40), (1, 2)]:
            conn.execute(
                "INSERT INTO outbox_notification (event_id, audience, title, body, created_at,"
                " read_at) VALUES (%s, 'platform', 't', 'b', now() - make_interval(days => %s),"
                " now() - make_interval(days => %s))",
                (secrets.token_hex(4), created, read_days),
            )


def _left(dsn: str, table: str) -> list[tuple[Any, ...]]:
    return query(
        dsn,
        f"SELECT status, extract(day FROM now() - resolved_at)::int,"  # noqa: S608
        f" extract(day FROM now() - created_at)::int FROM {table} ORDER BY id",
    )


def test_prune_removes_what_was_sent_long_ago_and_keeps_everything_else(db: str) -> None:
    """By default the webhook outbox and the deliveries; the dedup records when named."""
    _fill(db)
    result = outbox(
        "prune", "--database-url", db, "--older-than", "30d", "--batch-size", "2", "--json"
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "older_than": "30d",
        "removed": {"webhooks": 3, "deliveries": 3},
    }
    assert len(_left(db, "outbox_message")) == len(ROWS)
    named = outbox(
        "prune", "--database-url", db, "--older-than", "30d", "--batch-size", "2", "--json",
        "--only", "messages", "--only", "events", "--only", "notifications",
    )  # fmt: skip
    assert named.exit_code == 0, named.output
    assert json.loads(named.stdout)["removed"] == {"messages": 3, "events": 3, "notifications": 2}
    kept = [(s, r, c) for s, r, c, keep in ROWS if keep]
    for table in QUEUES.values():
        assert _left(db, table) == kept, table
    assert query(db, "SELECT read_at IS NULL FROM outbox_notification ORDER BY id") == [
        (True,),
        (False,),
    ]
    again = outbox("prune", "--database-url", db, "--older-than", "30d", "--only", "messages")
    assert again.exit_code == 0, again.output
    assert "messages  0 removed" in again.stdout


def test_only_prunes_the_named_tables(db: str) -> None:
    _fill(db)
    result = outbox(
        "prune", "--database-url", db, "--older-than", "30d", "--only", "events", "--json"
    )
    assert json.loads(result.stdout)["removed"] == {"events": 3}
    assert len(_left(db, "outbox_message")) == len(ROWS)


def test_a_held_row_is_skipped_not_waited_for(db: str) -> None:
    _fill(db)
    holder = psycopg.connect(db)
    try:
        # A worker or an operator holds one of the old sent e-mails in an open transaction.
        held = holder.execute(
            "SELECT id FROM outbox_message WHERE status = 'dispatched' ORDER BY id LIMIT 1"
            " FOR UPDATE"
        ).fetchone()
        assert held is not None
        done: list[object] = []
        runner = threading.Thread(
            target=lambda: done.append(outbox(*PRUNE_MESSAGES, "--database-url", db)),
            daemon=True,
        )
        runner.start()
        runner.join(20)
        assert done, "prune waited for the held row"
    finally:
        holder.rollback()
        holder.close()
    removed = json.loads(cast("Any", done[0]).stdout)["removed"]
    assert removed["messages"] == 2
    assert query(db, "SELECT count(*) FROM outbox_message WHERE id = %s", held[0]) == [(1,)]


class _Counting:
    """An autocommit connection that counts the statements prune_queue sends."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.autocommit = True
        self.statements = 0

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        self.statements += 1
        return self.conn.execute(*args, **kwargs)


def test_the_walk_stops_where_the_young_rows_begin(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        for created in [50, 50, 50] + [1] * 40:
            conn.execute(
                "INSERT INTO outbox_message (lane, payload, status, resolved_at, created_at,"
                " claim_token) VALUES ('walk', '{}', 'dispatched',"
                " now() - make_interval(days => %s), now() - make_interval(days => %s), 't')",
                (created, created),
            )
        cutoff = conn.execute("SELECT now() - interval '30 days'").fetchone()
        assert cutoff is not None
        counting = _Counting(conn)
        removed = prune_queue(cast("Any", counting), outbox_message, cutoff[0], batch=2)
    assert removed == 3
    # Two batches hold the three old rows, the third meets young rows only: 43 rows, 3 statements.
    assert counting.statements == 3


def test_bad_settings_are_refused_naming_them(db: str) -> None:
    refused = outbox("prune", "--database-url", db, "--older-than", "soon")
    assert refused.exit_code == 2
    assert "--older-than" in one_line_error(refused)
    unknown = outbox("prune", "--database-url", db, "--older-than", "1d", "--only", "emails")
    assert unknown.exit_code == 2
    with psycopg.connect(db) as conn, pytest.raises(ValueError, match="autocommit"):
        prune_queue(conn, outbox_message, cast("Any", None))
