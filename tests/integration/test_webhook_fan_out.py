"""The webhook model's PostgreSQL-only cases: enqueue on the host's transaction, a failure between
the fan-out's statements (one transaction), the legacy NULL-due claim, a disable mark on a table
without endpoints, and ``outbox schema apply`` adding the ordering-key columns to a database an
earlier release made.

The repository's semantics (fan-out, born lease, fences, 410 marks, replay, endpoints, health)
are the contract suite's, run against PostgreSQL and the in-memory repository alike:
tests/contract/test_webhook_repository_contract.py.
"""

from __future__ import annotations

import secrets
from datetime import timedelta

import attrs
import psycopg
import pytest
from tests.support.contract import VIA
from tests.support.webhooks import BIRTH, token

from outbox_adapters.postgres import PostgresStore, outbox_message, schema, statements
from outbox_adapters.postgres.enqueue import TransactionRequired
from outbox_adapters.postgres.webhooks import (
    DELIVERY_LANE,
    WEBHOOK_LANE,
    enqueue_webhook,
    outbox_webhook_delivery,
)
from outbox_adapters.postgres.webhooks import statements as webhook_statements
from outbox_core.errors import ConfigurationError, InvalidMessage
from outbox_core.messages import Mark
from outbox_core.ports import ClaimRequest

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]

TICK = timedelta(microseconds=1)


# --- enqueue --------------------------------------------------------------------------------------


def test_enqueue_webhook_writes_on_the_host_transaction_and_refuses_bad_input_at_enqueue(dsn):
    with psycopg.connect(dsn) as conn:
        with conn.transaction():
            made = enqueue_webhook(
                conn, "invoice.paid", {"invoice": 7}, idempotency_key="k1", tenant="acme"
            )
            again = enqueue_webhook(
                conn, "invoice.paid", {"invoice": 7}, idempotency_key="k1", tenant="acme"
            )
        assert made.created
        assert not again.created
        assert again.row_id == made.row_id
        row = conn.execute(
            "SELECT lane, event_type, payload FROM outbox_webhook WHERE id = %s", (made.row_id,)
        ).fetchone()
        assert row == (
            WEBHOOK_LANE,
            "invoice.paid",
            {"event_type": "invoice.paid", "data": {"invoice": 7}, "tenant": "acme"},
        )
        with conn.transaction():
            for bad_type in ("", "has space", "quote'", "x" * 129, 7):
                with pytest.raises(InvalidMessage, match="event type"):
                    enqueue_webhook(conn, bad_type, {"a": 1}, tenant="acme")  # type: ignore[arg-type]
            with pytest.raises(InvalidMessage, match="JSON object"):
                enqueue_webhook(conn, "invoice.paid", [1, 2], tenant="acme")  # type: ignore[arg-type]
    with psycopg.connect(dsn, autocommit=True) as conn, pytest.raises(TransactionRequired):
        enqueue_webhook(conn, "invoice.paid", {"a": 1}, tenant="acme")
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM outbox_webhook").fetchone() == (1,)


# --- fan-out --------------------------------------------------------------------------------------


async def test_a_failure_between_the_fan_out_statements_leaves_nothing_and_a_re_drain_makes_one_event(
    wh, monkeypatch
):
    """Event + deliveries + outbox mark are ONE transaction: a failure after the event's INSERT
    (the deliveries' statement fails) leaves no orphan event, the outbox row pending under its
    claim, and the next drain after the lease makes exactly one event."""
    await wh.endpoint("invoice.paid")
    await wh.enqueue()
    (row,) = await wh.claim_outbox()
    with monkeypatch.context() as patch:
        patch.setattr(webhook_statements, "BORN_DELIVERIES", "SELECT simulated_failure()")
        with pytest.raises(psycopg.errors.UndefinedFunction):
            await wh.repo.fan_out(row, birth_lease=BIRTH, birth_token=token())
    assert await wh.rows("SELECT count(*) FROM outbox_webhook_event") == [(0,)]
    assert await wh.rows("SELECT count(*) FROM outbox_webhook_delivery") == [(0,)]
    assert await wh.rows("SELECT status FROM outbox_webhook WHERE id = %s", row.id) == [
        ("pending",)
    ]

    (again,) = await wh.claim_outbox(now=row.lease_expires_at + TICK)
    fan = await wh.repo.fan_out(again, birth_lease=BIRTH, birth_token=token())
    assert fan.marked
    assert len(fan.deliveries) == 1
    assert await wh.rows("SELECT count(*) FROM outbox_webhook_event") == [(1,)]
    assert await wh.rows("SELECT count(*) FROM outbox_webhook_delivery") == [(1,)]


# --- born leased ----------------------------------------------------------------------------------


async def test_a_legacy_delivery_with_a_null_due_time_is_still_claimed(wh):
    # Legacy rollout (ADR 0017): deliveries written before every delivery was born leased may have
    # a NULL due time. The deliveries table keeps the claim's NULL branch for them, with this
    # regression test, until no such row can exist; no other table has the branch.
    endpoint = await wh.endpoint("invoice.paid")
    fan = await wh.drained()
    (event,) = await wh.rows("SELECT id FROM outbox_webhook_event")
    await wh.rows("DELETE FROM outbox_webhook_delivery RETURNING id")
    (legacy,) = await wh.rows(
        "INSERT INTO outbox_webhook_delivery (lane, payload, next_attempt_at, event_id, endpoint_id)"
        " VALUES (%s, jsonb_build_object('event_id', %s::bigint, 'endpoint_id', %s::bigint), NULL, %s, %s)"
        " RETURNING id",
        DELIVERY_LANE, event[0], endpoint, event[0], endpoint,
    )  # fmt: skip
    (row,) = await wh.claim_deliveries()
    assert row.id == legacy[0]
    assert row.attempts == 1
    assert fan.marked
    assert "IS NULL" not in statements.render(statements.CLAIM, outbox_message)
    assert not outbox_message.c.next_attempt_at.nullable
    assert outbox_webhook_delivery.c.next_attempt_at.nullable


# --- delivery marks -------------------------------------------------------------------------------


def gone(row, *, reason: str = "HTTP 410 Gone: the receiver removed this endpoint") -> Mark:
    return attrs.evolve(Mark.failed(row, reason), disable_endpoint=True)


@VIA
async def test_a_store_whose_table_has_no_endpoint_refuses_a_disable_mark_and_writes_nothing(
    dsn, wh, via
):
    store = PostgresStore(wh.pool, table=outbox_message)
    with psycopg.connect(dsn, autocommit=True) as conn:
        inserted = conn.execute(
            "INSERT INTO outbox_message (lane, payload) VALUES ('refuse', '{}') RETURNING id"
        ).fetchone()
    assert inserted is not None
    row_id = inserted[0]
    (row,) = await store.claim_due(ClaimRequest(lane="refuse", limit=1, lease=BIRTH, token=token()))
    write = store.mark_if_pending if via == "mark_if_pending" else store.mark_many
    with pytest.raises(ConfigurationError, match="no endpoint_id column"):
        await write(gone(row) if via == "mark_if_pending" else [gone(row)])  # type: ignore[arg-type]
    assert await wh.rows("SELECT status FROM outbox_message WHERE id = %s", row_id) == [
        ("pending",)
    ]


# --- schema upgrade -------------------------------------------------------------------------------


def test_schema_apply_adds_the_ordering_key_columns_and_index_to_an_earlier_database(
    postgres_dsn: str,
):
    # A schema of its own, so dropping things here can't disturb the other tests' tables.
    name = f"ordering_{secrets.token_hex(4)}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    private = psycopg.conninfo.make_conninfo(postgres_dsn, options=f"-c search_path={name}")
    try:
        schema.apply(private)
        with psycopg.connect(private, autocommit=True) as conn:  # as an earlier release made it
            conn.execute("ALTER TABLE outbox_webhook_delivery DROP COLUMN ordering_key")
            conn.execute("ALTER TABLE outbox_webhook_event DROP COLUMN ordering_key")
        assert schema.verify(private) == [
            "column outbox_webhook_event.ordering_key is missing",
            "column outbox_webhook_delivery.ordering_key is missing",
            "index ix_outbox_webhook_delivery_key_order on outbox_webhook_delivery is missing",
        ]
        schema.apply(private)
        assert schema.verify(private) == []
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {name} CASCADE")
