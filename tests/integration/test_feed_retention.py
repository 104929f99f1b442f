"""The feed's retention (``outbox feed prune``) and its push trigger in the schema tools (ADR 0022).

The promises: prune deletes READ notifications older than the age asked for, in batches, says how
many, and never an unread one however old; ``outbox schema apply`` creates the push trigger and
``verify`` reports it missing or disabled.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from tests.support.cli import one_line_error, outbox
from tests.support.feed import insert_notification
from tests.support.postgres import query

from outbox_adapters.postgres import schema

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]


def aged(dsn: str, *, days: int, read: bool) -> int:
    """A notification created ``days`` ago, read (a day after) or not; its id."""
    row = insert_notification(dsn, audience="tenant", tenant_id="acme")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE outbox_notification SET created_at = now() - make_interval(days => %s),"
            " read_at = CASE WHEN %s THEN now() - make_interval(days => %s - 1) END WHERE id = %s",
            (days, read, days, row),
        )
    return row


def remaining(dsn: str) -> set[int]:
    return {int(row_id) for (row_id,) in query(dsn, "SELECT id FROM outbox_notification")}


def test_prune_removes_old_read_rows_in_batches_and_keeps_unread_and_recent_ones(dsn: str):
    old_read = [aged(dsn, days=100, read=True) for _ in range(7)]
    old_unread = aged(dsn, days=400, read=False)
    recent_read = aged(dsn, days=10, read=True)
    result = outbox(
        "feed", "prune", "--database-url", dsn, "--older-than", "90d", "--batch-size", "3"
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == "feed prune: 7 read notification(s) older than 90d removed\n"
    assert remaining(dsn) == {old_unread, recent_read}
    assert not remaining(dsn) & set(old_read)

    again = outbox("feed", "prune", "--database-url", dsn, "--older-than", "90d")
    assert again.stdout == "feed prune: 0 read notification(s) older than 90d removed\n"


def test_prune_takes_its_settings_from_the_environment_too(dsn: str):
    aged(dsn, days=3, read=True)
    env = {
        "OUTBOX_DATABASE_URL": dsn,
        "OUTBOX_FEED_PRUNE_OLDER_THAN": "2d",
        "OUTBOX_FEED_PRUNE_BROKER_RETENTION": "1d",
    }
    result = outbox("feed", "prune", env=env)
    assert result.exit_code == 0, result.output
    assert "1 read notification(s)" in result.stdout


@pytest.mark.parametrize("age", ["90", "0d", "ninety days", "-1d"])
def test_prune_refuses_a_bad_age_naming_the_option(dsn: str, age: str):
    result = outbox("feed", "prune", "--database-url", dsn, "--older-than", age)
    assert result.exit_code == 2
    assert one_line_error(result).startswith("Error: --older-than (OUTBOX_FEED_PRUNE_OLDER_THAN): ")


@pytest.fixture
def restored_trigger(dsn: str) -> Iterator[None]:
    yield
    schema.apply(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE outbox_notification ENABLE TRIGGER outbox_notification_push")
    assert schema.verify(dsn) == []


def test_schema_verify_reports_the_push_trigger_missing_or_disabled_and_apply_restores_it(
    dsn: str, restored_trigger: None
):
    assert schema.verify(dsn) == []
    problem = "trigger outbox_notification_push on outbox_notification is missing or disabled"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE outbox_notification DISABLE TRIGGER outbox_notification_push")
    assert schema.verify(dsn) == [problem]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE outbox_notification ENABLE TRIGGER outbox_notification_push")
        conn.execute("DROP TRIGGER outbox_notification_push ON outbox_notification")
    assert schema.verify(dsn) == [problem]
    result = outbox("schema", "verify", "--database-url", dsn)
    assert result.exit_code == 1
    assert f"schema problem: {problem}" in result.stdout
    schema.apply(dsn)
    assert schema.verify(dsn) == []


async def test_the_trigger_announces_the_scope_and_nothing_else(dsn: str):
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as listening:
        await listening.execute("LISTEN outbox_feed")
        insert_notification(dsn, audience="tenant", tenant_id="acme", title="secret title")
        insert_notification(dsn, audience="platform", tenant_id=None)
        insert_notification(dsn, audience="tenant", tenant_id="x" * 2000)
        got = [note.payload async for note in listening.notifies(timeout=0.5)]
    assert got == [
        '{"audience" : "tenant", "tenant_id" : "acme"}',
        '{"audience" : "platform", "tenant_id" : null}',
        '{"audience" : "tenant", "tenant_id" : null}',  # too long to announce: all refetch
    ]
