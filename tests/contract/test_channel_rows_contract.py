"""The consumer channels' rows and parking ledger: the in-memory ones (``memory.channels``) against
PostgreSQL's (``postgres.channels``), one suite, so the simulator's fakes keep the real semantics.

- ``ensure`` writes a message unless its (lane, key) exists, and answers every row's state by key;
- a pending row due later waits until then; a claimed one waits 0; a failed one keeps its error;
- a message of another lane, or without a key, is refused before anything is written; so is an
  event whose payload the enqueue refuses (all of its rows or none);
- each row written carries the context of its own PRODUCER span, a child of the delivery's;
- the ledger records each (channel, event, kind) once and lists an event's kinds;
- a park lifted by ``dlq redrive`` no longer counts; ``rearm`` puts the lifted kinds' failed rows
  back to pending once (audited) and drops the lifted parks; a second ``rearm`` does nothing.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool
from tests.support.telemetry import context_of, recording

from outbox_adapters.lanes.consumer import ParkLedger
from outbox_adapters.lanes.email import email_message
from outbox_adapters.lanes.row_channel import RecipientRowStore
from outbox_adapters.memory import MemoryParkLedger, MemoryRecipientRows, MemoryStore
from outbox_adapters.postgres import PostgresStore
from outbox_adapters.postgres.channels import PostgresParkLedger, RecipientRows
from outbox_core.delivery import Status
from outbox_core.errors import InvalidPayload
from outbox_core.messages import ClaimToken, Mark, NewMessage
from outbox_core.ports import ClaimRequest, OutboxStore

LANE = "contract-channel"
Parts = tuple[RecipientRowStore, ParkLedger, OutboxStore]


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.integration)])
async def parts(request: pytest.FixtureRequest) -> AsyncIterator[Parts]:
    if request.param == "memory":
        store = MemoryStore()
        ledger = MemoryParkLedger(store)
        yield MemoryRecipientRows(store, lane=LANE, ledger=ledger), ledger, store
        return
    dsn: str = request.getfixturevalue("contract_dsn")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE outbox_message, outbox_channel_parked RESTART IDENTITY")
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=False
    )
    async with pool:
        yield RecipientRows(pool, lane=LANE), PostgresParkLedger(pool), PostgresStore(pool)


def _message(key: str | None, *, to: str = "a@example.org", lane: str = LANE) -> NewMessage:
    return email_message(to=to, subject="s", text="t", lane=lane, idempotency_key=key)


async def test_ensure_writes_once_per_key_and_answers_every_row(parts: Parts) -> None:
    rows, _, _ = parts
    first = await rows.ensure([_message("e1:welcome"), _message("e1:notify")])
    again = await rows.ensure([_message("e1:welcome", to="other@example.org")])
    assert set(first) == {"e1:welcome", "e1:notify"}
    assert set(again) == {"e1:welcome"}
    for row in (*first.values(), *again.values()):
        assert (row.status, row.attempts, row.last_error) == (Status.PENDING, 0, None)
        assert row.wait == timedelta(0)  # due now


async def test_a_new_events_rows_are_written_and_one_written_before_is_found_not_doubled(
    parts: Parts,
) -> None:
    """``new`` (the event's first delivery) writes what is missing and finds what another process
    wrote: each key still has one row, in the state it is in."""
    rows, _, store = parts
    await rows.ensure([_message("e4:welcome")])  # another process got there first
    token = ClaimToken.from_entropy(os.urandom(16))
    (claimed,) = await store.claim_due(
        ClaimRequest(lane=LANE, limit=5, lease=timedelta(minutes=5), token=token)
    )
    await store.mark_if_pending(Mark.failed(claimed, "550 no such user"))
    both = await rows.ensure(
        [_message("e4:welcome", to="other@example.org"), _message("e4:notify")], new=True
    )
    assert (both["e4:welcome"].status, both["e4:welcome"].attempts) == (Status.FAILED, 1)
    assert both["e4:welcome"].last_error == "550 no such user"
    assert (both["e4:notify"].status, both["e4:notify"].attempts) == (Status.PENDING, 0)
    again = await rows.ensure([_message("e4:welcome"), _message("e4:notify")], new=True)
    assert {k: r.status for k, r in again.items()} == {k: r.status for k, r in both.items()}
    token = ClaimToken.from_entropy(os.urandom(16))
    left = await store.claim_due(
        ClaimRequest(lane=LANE, limit=5, lease=timedelta(minutes=5), token=token)
    )
    assert len(left) == 1  # e4:notify, written once


async def test_an_events_rows_are_written_all_or_none(parts: Parts) -> None:
    """A payload the enqueue refuses raises before anything is written: not even the event's
    other, valid row."""
    rows, _, store = parts
    bad = NewMessage(LANE, {"amount": float("nan")}, idempotency_key="e5:notify")
    with pytest.raises(InvalidPayload, match="nan"):
        await rows.ensure([_message("e5:welcome"), bad], new=True)
    token = ClaimToken.from_entropy(os.urandom(16))
    assert (
        await store.claim_due(
            ClaimRequest(lane=LANE, limit=5, lease=timedelta(minutes=5), token=token)
        )
        == []
    )
    assert set(await rows.ensure([_message("e5:welcome")], new=True)) == {"e5:welcome"}


async def test_each_row_carries_its_own_producer_span_under_the_delivery(parts: Parts) -> None:
    """One PRODUCER span per row, each a child of the span current at the write (the channel's
    delivery), each row stamped with its own span's context; a row found (not written) says so."""
    rows, _, store = parts
    await rows.ensure([_message("e6:welcome")])
    with recording() as otel:
        tracer = otel.tracer_provider.get_tracer("test")
        with tracer.start_as_current_span("process events") as delivery:
            await rows.ensure(
                [_message("e6:welcome"), _message("e6:notify", to="n@example.org")], new=True
            )
        sends = otel.spans(f"send {LANE}")
        assert len(sends) == 2
        parent = delivery.get_span_context().span_id
        assert all(span.parent is not None and span.parent.span_id == parent for span in sends)
        created = {span.attributes["outbox.created"] for span in sends if span.attributes}
        assert created == {True, False}
        [written] = [s for s in sends if s.attributes and s.attributes["outbox.created"]]
    token = ClaimToken.from_entropy(os.urandom(16))
    claimed = await store.claim_due(
        ClaimRequest(lane=LANE, limit=5, lease=timedelta(minutes=5), token=token)
    )
    by_to = {}
    for row in claimed:
        assert isinstance(row.payload, dict)  # decoded (no sealed fields here)
        by_to[row.payload["to"]] = row.trace_context
    context = context_of(written)
    stamped = f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    assert by_to["n@example.org"] == stamped
    assert by_to["a@example.org"] is None  # written before, outside any span


async def test_a_row_reports_its_claim_its_retry_and_its_failure(parts: Parts) -> None:
    rows, _, store = parts
    await rows.ensure([_message("e2:a"), _message("e2:b")])
    token = ClaimToken.from_entropy(os.urandom(16))
    claimed = await store.claim_due(
        ClaimRequest(lane=LANE, limit=2, lease=timedelta(minutes=5), token=token)
    )
    assert len(claimed) == 2
    during = await rows.ensure([_message("e2:a")])
    assert during["e2:a"].wait == timedelta(0)  # a send is in flight
    a, b = sorted(claimed, key=lambda row: row.id)
    await store.mark_if_pending(Mark.retry(a, "451 later", delay=timedelta(minutes=10)))
    await store.mark_if_pending(Mark.failed(b, "550 no such user"))
    after = await rows.ensure([_message("e2:a"), _message("e2:b")])
    assert after["e2:a"].status is Status.PENDING
    assert timedelta(minutes=9) < after["e2:a"].wait <= timedelta(minutes=10)
    assert (after["e2:b"].status, after["e2:b"].attempts) == (Status.FAILED, 1)
    assert after["e2:b"].last_error == "550 no such user"


@pytest.mark.parametrize("bad", [_message(None), _message("k", lane="another-lane")])
async def test_a_message_without_key_or_of_another_lane_is_refused(
    parts: Parts, bad: NewMessage
) -> None:
    rows, _, _ = parts
    with pytest.raises(ValueError, match="idempotency key"):
        await rows.ensure([_message("e3:ok"), bad])
    assert await rows.ensure([]) == {}
    assert "e3:ok" not in await rows.ensure([_message("e3:other")])


async def test_the_ledger_records_each_kind_once(parts: Parts) -> None:
    _, ledger, _ = parts
    assert await ledger.parked("email", "e4") == frozenset()
    await ledger.record("email", "e4", "welcome", reason="bad address", attempts=0)
    await ledger.record("email", "e4", "welcome", reason="again", attempts=3)
    await ledger.record("email", "e4", "notify", reason="550", attempts=2)
    await ledger.record("inapp", "e4", "x", reason="r", attempts=0)
    assert await ledger.parked("email", "e4") == frozenset({"welcome", "notify"})
    assert await ledger.parked("email", "e5") == frozenset()


async def test_a_redriven_park_rearms_its_failed_row_once_with_an_audit(parts: Parts) -> None:
    rows, ledger, store = parts
    await rows.ensure([_message("e9:welcome"), _message("e9:notify")])
    token = ClaimToken.from_entropy(os.urandom(16))
    claimed = await store.claim_due(
        ClaimRequest(lane=LANE, limit=2, lease=timedelta(minutes=5), token=token)
    )
    for row in claimed:
        await store.mark_if_pending(Mark.failed(row, "550 no such user"))
    await ledger.record("ch", "e9", "welcome", reason="550", attempts=5)
    await ledger.record("ch", "e9", "notify", reason="550", attempts=5)
    assert await rows.rearm("ch", "e9") == frozenset()  # nothing lifted: a plain redelivery

    lift = getattr(ledger, "redriven")  # noqa: B009 - on both ledgers, not in the port
    assert await lift(["e9", "elsewhere"], actor="ops@host", reason="T-1") == 2
    assert await ledger.parked("ch", "e9") == frozenset()
    assert await lift(["e9"], actor="ops@host") == 0  # already lifted
    assert await rows.rearm("other-channel", "e9") == frozenset()
    assert await rows.rearm("ch", "e9") == {"welcome", "notify"}
    after = await rows.ensure([_message("e9:welcome"), _message("e9:notify")])
    assert {(r.status, r.attempts, r.last_error) for r in after.values()} == {
        (Status.PENDING, 0, None)
    }
    assert await rows.rearm("ch", "e9") == frozenset()  # the lifted parks are gone
    # Parked again after a new failure: the ledger records it as a park of its own.
    await ledger.record("ch", "e9", "welcome", reason="550 again", attempts=5)
    assert await ledger.parked("ch", "e9") == {"welcome"}
