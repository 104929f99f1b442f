"""The webhook model on real PostgreSQL: enqueue on the host's transaction, the atomic fan-out into
born-leased deliveries, the outbox row's fence, handler-owns-mark, the legacy NULL-due claim, and
the delivery marks (fence, 410 disables the endpoint in the mark's transaction).

The deliveries and the webhook outbox are queue tables served by the one ``PostgresStore``: these
tests claim and mark them through it, never through SQL of their own.
"""

from __future__ import annotations

import re
from datetime import timedelta

import attrs
import psycopg
import pytest
from tests.support.contract import VIA
from tests.support.webhooks import BIRTH, Webhooks, token

from outbox_adapters.postgres import PostgresStore, outbox_message, statements
from outbox_adapters.postgres.enqueue import TransactionRequired
from outbox_adapters.postgres.webhooks import (
    DELIVERY_LANE,
    WEBHOOK_LANE,
    enqueue_webhook,
    outbox_webhook_delivery,
)
from outbox_adapters.postgres.webhooks import statements as webhook_statements
from outbox_core.delivery import Status
from outbox_core.errors import ConfigurationError, InvalidMessage
from outbox_core.messages import ClaimedRow, Mark
from outbox_core.ports import ClaimRequest, MarkResult

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]

TICK = timedelta(microseconds=1)


async def mark(wh: Webhooks, via: str, m: Mark) -> MarkResult:
    if via == "mark_if_pending":
        return await wh.deliveries.mark_if_pending(m)
    (result,) = await wh.deliveries.mark_many([m])
    return result


# --- enqueue --------------------------------------------------------------------------------------


def test_enqueue_webhook_writes_on_the_host_transaction_and_refuses_bad_input_at_enqueue(dsn):
    with psycopg.connect(dsn) as conn:
        with conn.transaction():
            made = enqueue_webhook(conn, "invoice.paid", {"invoice": 7}, idempotency_key="k1")
            again = enqueue_webhook(conn, "invoice.paid", {"invoice": 7}, idempotency_key="k1")
        assert made.created
        assert not again.created
        assert again.row_id == made.row_id
        row = conn.execute(
            "SELECT lane, event_type, payload FROM outbox_webhook WHERE id = %s", (made.row_id,)
        ).fetchone()
        assert row == (
            WEBHOOK_LANE,
            "invoice.paid",
            {"event_type": "invoice.paid", "data": {"invoice": 7}},
        )
        with conn.transaction():
            for bad_type in ("", "has space", "quote'", "x" * 129, 7):
                with pytest.raises(InvalidMessage, match="event type"):
                    enqueue_webhook(conn, bad_type, {"a": 1})  # type: ignore[arg-type]
            with pytest.raises(InvalidMessage, match="JSON object"):
                enqueue_webhook(conn, "invoice.paid", [1, 2])  # type: ignore[arg-type]
    with psycopg.connect(dsn, autocommit=True) as conn, pytest.raises(TransactionRequired):
        enqueue_webhook(conn, "invoice.paid", {"a": 1})
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM outbox_webhook").fetchone() == (1,)


# --- fan-out --------------------------------------------------------------------------------------


async def test_fan_out_makes_the_event_born_leased_deliveries_and_the_outbox_mark_at_once(wh):
    first = await wh.endpoint("invoice.paid")
    every = await wh.endpoint("*")
    await wh.endpoint("user.created")  # not subscribed
    disabled = await wh.endpoint("invoice.paid")
    await wh.repo.disable_endpoint(disabled, "off for the test")
    await wh.enqueue("invoice.paid", invoice=7)
    (row,) = await wh.claim_outbox()
    birth = token()
    (before,) = await wh.rows("SELECT now()")
    fan = await wh.repo.fan_out(row, birth_lease=BIRTH, birth_token=birth)

    assert fan.marked
    assert fan.event_id is not None
    assert re.fullmatch(r"msg_[0-9a-f]{32}", fan.msg_id or "")
    assert sorted(d.payload["endpoint_id"] for d in fan.deliveries) == [first, every]
    for delivery in fan.deliveries:
        assert delivery.lane == DELIVERY_LANE
        assert delivery.attempts == 1
        assert delivery.token == birth
        assert delivery.payload["event_id"] == fan.event_id
        assert delivery.lease_expires_at >= before[0] + BIRTH
    stored = await wh.rows(
        "SELECT status, attempts, claim_token, next_attempt_at IS NOT NULL, claimed_at IS NOT NULL"
        " FROM outbox_webhook_delivery ORDER BY id"
    )
    assert stored == [("pending", 1, birth.value, True, True)] * 2
    assert await wh.rows("SELECT status FROM outbox_webhook WHERE id = %s", row.id) == [
        ("dispatched",)
    ]
    events = await wh.rows(
        "SELECT id, msg_id, event_type, data, source_outbox_id FROM outbox_webhook_event"
    )
    assert events == [(fan.event_id, fan.msg_id, "invoice.paid", {"invoice": 7}, row.id)]
    target = await wh.repo.delivery_target(fan.deliveries[0].id)
    assert target is not None
    assert target.msg_id == fan.msg_id
    assert target.url.startswith("https://")
    assert target.body.startswith(b'{"data":{"invoice":7},"timestamp":"')
    assert target.body.endswith(b'Z","type":"invoice.paid"}')


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
        patch.setattr(webhook_statements, "BORN_DELIVERIES", "SELECT 1 / 0")
        with pytest.raises(psycopg.errors.DivisionByZero):
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


async def test_a_fan_out_under_a_stale_claim_token_writes_nothing(wh):
    await wh.endpoint("invoice.paid")
    await wh.enqueue()
    (row,) = await wh.claim_outbox()
    (sibling,) = await wh.claim_outbox(now=row.lease_expires_at + TICK)  # the lease ran out
    stale = await wh.repo.fan_out(row, birth_lease=BIRTH, birth_token=token())
    assert not stale.marked
    assert stale.event_id is None
    assert stale.deliveries == ()
    assert await wh.rows("SELECT count(*) FROM outbox_webhook_event") == [(0,)]
    assert await wh.rows("SELECT count(*) FROM outbox_webhook_delivery") == [(0,)]
    assert await wh.rows("SELECT status, claim_token FROM outbox_webhook") == [
        ("pending", sibling.token.value)
    ]
    assert (await wh.outbox.lane_stats())[WEBHOOK_LANE].stale_marks == 1
    fresh = await wh.repo.fan_out(sibling, birth_lease=BIRTH, birth_token=token())
    assert fresh.marked
    assert len(fresh.deliveries) == 1


async def test_handler_owns_the_mark_a_replayed_drainer_tick_claims_nothing_and_one_event_exists(
    wh,
):
    await wh.endpoint("invoice.paid")
    fan = await wh.drained()
    assert fan.marked
    (now,) = await wh.rows("SELECT now() + interval '1 day'")
    assert await wh.claim_outbox(now=now[0]) == []
    assert await wh.rows("SELECT count(*) FROM outbox_webhook_event") == [(1,)]
    assert await wh.rows("SELECT count(*) FROM outbox_webhook_delivery") == [(1,)]


async def test_a_row_that_is_not_an_event_is_refused_before_anything_is_written(wh):
    await wh.endpoint("invoice.paid")
    await wh.enqueue()
    (row,) = await wh.claim_outbox()
    for payload in (
        {"event_type": "invoice.paid", "data": [1]},
        {"event_type": "no space", "data": {}},
        "text",
    ):
        with pytest.raises(InvalidMessage):
            await wh.repo.fan_out(
                attrs.evolve(row, payload=payload), birth_lease=BIRTH, birth_token=token()
            )
    assert await wh.rows("SELECT status FROM outbox_webhook") == [("pending",)]


# --- born leased ----------------------------------------------------------------------------------


async def test_the_retry_claim_cannot_take_a_delivery_inside_its_birth_lease_and_takes_it_after(wh):
    await wh.endpoint("invoice.paid")
    await wh.endpoint("invoice.paid")
    fan = await wh.drained()
    assert len(fan.deliveries) == 2
    assert await wh.claim_deliveries() == []  # the database's now: inside the birth lease
    inside = min(d.lease_expires_at for d in fan.deliveries) - timedelta(seconds=1)
    assert await wh.claim_deliveries(now=inside) == []
    after = max(d.lease_expires_at for d in fan.deliveries) + TICK
    taken = await wh.claim_deliveries(now=after)
    assert sorted(d.id for d in taken) == sorted(d.id for d in fan.deliveries)
    assert all(d.attempts == 2 for d in taken)


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


async def after_birth(wh: Webhooks) -> tuple[ClaimedRow, ClaimedRow]:
    """A fanned-out delivery whose birth lease ran out, reclaimed by the retry worker."""
    await wh.endpoint("invoice.paid")
    fan = await wh.drained()
    (born,) = fan.deliveries
    (retry,) = await wh.claim_deliveries(now=born.lease_expires_at + TICK)
    return born, retry


@VIA
async def test_a_stale_failure_mark_after_a_sibling_s_success_is_dropped(wh, via):
    born, retry = await after_birth(wh)
    assert await mark(wh, via, Mark.dispatched(retry, scrub_keys=frozenset())) is MarkResult.APPLIED
    late = Mark.failed(born, "HTTP 500 after 8 s")
    assert await mark(wh, via, late) is MarkResult.STALE
    assert await wh.rows("SELECT status, last_error FROM outbox_webhook_delivery") == [
        ("dispatched", None)
    ]
    assert (await wh.deliveries.lane_stats())[DELIVERY_LANE].stale_marks == 1


@VIA
async def test_the_first_attempt_s_late_mark_after_the_retry_worker_reclaimed_the_delivery_is_stale(
    wh, via
):
    born, retry = await after_birth(wh)
    late = Mark.retry(born, "HTTP 503", delay=timedelta(seconds=5))
    assert await mark(wh, via, late) is MarkResult.STALE
    assert await wh.rows("SELECT status, claim_token, last_error FROM outbox_webhook_delivery") == [
        ("pending", retry.token.value, None)
    ]


def gone(row, *, reason: str = "HTTP 410 Gone: the receiver removed this endpoint") -> Mark:
    return attrs.evolve(Mark.failed(row, reason), disable_endpoint=True)


@VIA
async def test_a_410_mark_disables_the_endpoint_in_the_mark_s_own_transaction(wh, via, monkeypatch):
    born, retry = await after_birth(wh)
    # Same transaction: if disabling the endpoint fails, the mark is not written either.
    with monkeypatch.context() as patch:
        patch.setattr(statements, "DISABLE_ENDPOINTS", "SELECT 1 / 0")
        with pytest.raises(psycopg.errors.DivisionByZero):
            await mark(wh, via, gone(retry))
    assert await wh.rows("SELECT status FROM outbox_webhook_delivery") == [("pending",)]
    assert await wh.rows("SELECT enabled FROM outbox_webhook_endpoint") == [(True,)]

    assert await mark(wh, via, gone(born)) is MarkResult.STALE  # stale: the endpoint stays
    assert await wh.rows("SELECT enabled FROM outbox_webhook_endpoint") == [(True,)]

    assert await mark(wh, via, gone(retry)) is MarkResult.APPLIED
    assert await wh.rows("SELECT status, last_error FROM outbox_webhook_delivery") == [
        ("failed", "HTTP 410 Gone: the receiver removed this endpoint")
    ]
    assert await wh.rows(
        "SELECT enabled, disabled_reason, disabled_at IS NOT NULL FROM outbox_webhook_endpoint"
    ) == [(False, "HTTP 410 Gone: the receiver removed this endpoint", True)]


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


async def test_the_marks_patch_the_status_code_and_snippet_into_the_payload_and_the_report_groups_them(
    wh,
):
    born, retry = await after_birth(wh)
    progress = {"last_status": 500, "response": "upstream exploded"}
    await wh.deliveries.mark_if_pending(
        attrs.evolve(Mark.failed(retry, "HTTP 500"), payload_patch=progress)
    )
    report = await wh.repo.deliveries()
    (group,) = report.groups
    assert (group.status, group.error, group.deliveries) == (Status.FAILED, "HTTP 500", 1)
    assert (group.last_status, group.response) == (500, "upstream exploded")
    assert report.by_status == {Status.FAILED: 1}
    assert (await wh.repo.deliveries(status="pending")).groups == ()
    assert not isinstance(born.payload, str)
    assert born.payload == {
        "event_id": born.payload["event_id"],
        "endpoint_id": group.endpoint_ids[0],
    }
