"""The operator's commands on every queue table (``--queue``): failed, get, requeue (audited with
the table it touched) and stats, on a database of their own."""

from __future__ import annotations

import json
from collections.abc import Iterator

import psycopg
import pytest
from tests.support.cli import outbox
from tests.support.postgres import query, scratch_database

from outbox_adapters.postgres import schema

pytestmark = pytest.mark.integration


@pytest.fixture
def db(postgres_server: str) -> Iterator[str]:
    with scratch_database(postgres_server, "opq") as dsn:
        schema.apply(dsn)
        yield dsn


def _failed(dsn: str, table: str, lane: str, payload: dict[str, str], error: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute(
            f"INSERT INTO {table} (lane, payload, status, attempts, resolved_at, last_error,"  # noqa: S608 - our own table names
            " claim_token) VALUES (%s, %s, 'failed', 5, now(), %s, 't') RETURNING id",
            (lane, json.dumps(payload), error),
        ).fetchone()
    assert found is not None
    return int(found[0])


EVENT = {"topic": "t", "subject": "k", "id": "ev-1", "type": "x", "source": "s"}


def test_every_queue_has_failed_get_requeue_and_stats(db: str) -> None:
    event = _failed(db, "outbox_event", "events", EVENT, "the broker refuses this message: too big")
    delivery = _failed(
        db,
        "outbox_webhook_delivery",
        "hooks-test",
        {"n": "1"},
        "receiver rejected the request: 400",
    )

    failed = outbox("failed", "--database-url", db, "--queue", "events")
    assert failed.exit_code == 0, failed.output
    assert "failed events by error class:" in failed.stdout
    assert "the broker refuses this message  [" in failed.stdout  # the class, then its span
    assert "the broker refuses this message: too big" in failed.stdout  # the row itself
    assert "no failed messages" in outbox("failed", "--database-url", db).stdout

    shown = outbox("get", str(event), "--database-url", db, "--queue", "events")
    assert shown.exit_code == 0, shown.output
    assert "ev-1" in shown.stdout
    assert outbox("get", str(event), "--database-url", db).exit_code == 1  # not a message row

    requeued = outbox(
        "requeue", str(delivery), "--database-url", db, "--queue", "deliveries", "--actor", "ops"
    )
    assert requeued.exit_code == 0, requeued.output
    assert query(
        db, "SELECT status, attempts FROM outbox_webhook_delivery WHERE id = %s", delivery
    ) == [("pending", 0)]
    assert query(
        db, "SELECT queue, message_id, actor, previous_attempts FROM outbox_requeue_audit"
    ) == [("outbox_webhook_delivery", delivery, "ops", 5)]

    stats = outbox("stats", "--database-url", db, "--queue", "deliveries")
    assert stats.exit_code == 0, stats.output
    assert "hooks-test" in stats.stdout


def test_schema_apply_adds_a_column_added_after_its_table_shipped(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("ALTER TABLE outbox_requeue_audit DROP COLUMN reason")  # an older database
    assert schema.verify(db) == ["column outbox_requeue_audit.reason is missing"]
    schema.apply(db)
    assert schema.verify(db) == []


def test_a_requeue_reason_is_kept_and_a_bad_one_refused(db: str) -> None:
    row = _failed(db, "outbox_message", "mail", {"to": "a@example.org"}, "451 try later")
    bad = outbox("requeue", str(row), "--database-url", db, "--reason", "two\nlines")
    assert bad.exit_code == 2
    assert "--reason" in bad.stderr
    done = outbox("requeue", str(row), "--database-url", db, "--reason", "OPS-7", "--actor", "me")
    assert done.exit_code == 0, done.output
    assert "as me (OPS-7)" in done.stdout
    assert query(db, "SELECT actor, reason FROM outbox_requeue_audit") == [("me", "OPS-7")]
    late = _failed(db, "outbox_message", "mail", {"to": "b@example.org"}, "451 try later")
    window = outbox(
        "requeue", "--all-failed", "--before", "2000-01-01T00:00Z", "--database-url", db
    )
    assert "nothing requeued" in window.stdout
    assert query(db, "SELECT status FROM outbox_message WHERE id = %s", late) == [("failed",)]


def test_failed_groups_by_error_class_with_addresses_masked_unless_exact(db: str) -> None:
    for to in ("a@x.example", "b@y.example"):
        _failed(db, "outbox_message", "mail", {"to": to}, f"recipient {to} refused: SMTP 550 5.1.1")
    _failed(db, "outbox_message", "mail", {"to": "c@z.example"}, "SMTP failure at tls: bad cert")
    by_class = outbox("failed", "--database-url", db).stdout
    lines = by_class.split("newest")[0]
    assert "     2  recipient <address> refused  [" in lines
    assert "     1  SMTP failure at tls  [" in lines
    assert "a@x.example" not in lines
    exact = outbox("failed", "--database-url", db, "--exact").stdout.split("newest")[0]
    assert "recipient a@x.example refused: SMTP 550 5.1.1" in exact
