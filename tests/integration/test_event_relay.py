"""The event outbox and its relay (ADR 0020) on real PostgreSQL with the in-memory broker: events
commit with the host's business rows, the relay publishes them in key order with the event id as
the broker's message id, ``published_at`` is set only after the broker's acknowledgement, a broker
outage leaves writes alone and delays the events (in order), a replayed publish is stored once, and
one key's order survives a relay crash.

``test_published_at_is_set_only_after_the_broker_acknowledged`` is the matrix's test for "publish
mark before the ack" (tests/mutations/matrix.py, ``relay-mark-before-ack``).
"""

from __future__ import annotations

import asyncio
import json
import math
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from tests.support.postgres import query

from outbox_adapters.lanes.relay import (
    EARLIER_UNPUBLISHED,
    RELAY_BACKOFF,
    RelayHandler,
    relay_disabled_warning,
    relay_lane,
)
from outbox_adapters.memory import MemoryBroker
from outbox_adapters.postgres import TransactionRequired
from outbox_adapters.postgres.events import RELAY_LANE, outbox_event, publish, publish_async
from outbox_adapters.postgres.store import PostgresStore
from outbox_adapters.runtime import LaneConfig, Worker
from outbox_core.backoff import SlotSchedule
from outbox_core.delivery import Status
from outbox_core.errors import ConfigurationError, InvalidMessage, InvalidPayload
from outbox_core.events import CONTENT_TYPE, decode_event
from outbox_core.messages import ClaimToken, Mark
from outbox_core.outcomes import Outcome
from outbox_core.ports import BrokerMessage, ClaimRequest, MarkResult
from outbox_core.timing import RelayTiming

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]

TOPIC = "platform-events"
#: Short figures: 1 s a row, batches of 10, a lease of 12 s; retries after 0.1 s.
TIMING = RelayTiming(
    publish=timedelta(seconds=0.5), mark=timedelta(seconds=0.5), batch_size=10,
    lease_grace=timedelta(seconds=2),
)  # fmt: skip
QUICK = SlotSchedule((timedelta(seconds=0.1),) * 50, jitter_ratio=0.0)


def config(**settings: Any) -> LaneConfig:
    return relay_lane(**{"timing": TIMING, "backoff": QUICK, "poll_interval": 0.05, **settings})


@pytest.fixture
async def events(dsn: str) -> AsyncIterator[PostgresStore]:
    async with await PostgresStore.open(dsn, table=outbox_event, max_size=4) as opened:
        yield opened


async def publish_keys(dsn: str, *keys: str) -> list[str]:
    """One event per key, in order, in ONE host transaction; their event ids."""
    async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
        return [
            (
                await publish_async(
                    conn, topic=TOPIC, key=key, type="tenant.provisioned", data={"n": n}
                )
            ).event.id
            for n, key in enumerate(keys)
        ]


def rows(dsn: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        return conn.execute("SELECT * FROM outbox_event ORDER BY id").fetchall()


def broker_order(broker: MemoryBroker) -> dict[str, list[str]]:
    """The stored message ids per partition key, in the broker's order."""
    order: dict[str, list[str]] = {}
    for message in broker.on(TOPIC):
        order.setdefault(message.key, []).append(message.message_id)
    return order


# --- publish on the host's transaction ------------------------------------------------------------


def test_an_event_commits_with_the_business_rows_and_a_rollback_leaves_none(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS signup_tenant (id text PRIMARY KEY)")
        conn.commit()
        with conn.transaction():
            conn.execute("INSERT INTO signup_tenant VALUES ('t-1')")
            done = publish(
                conn, topic=TOPIC, key="t-1", type="tenant.provisioned", source="auth",
                data={"tenant_id": "t-1", "admin_email": "admin@example.org"},
            )  # fmt: skip
        with conn.transaction(force_rollback=True):  # the signup fails after its writes
            conn.execute("INSERT INTO signup_tenant VALUES ('t-2')")
            publish(conn, topic=TOPIC, key="t-2", type="tenant.provisioned", data={})
    assert query(dsn, "SELECT id FROM signup_tenant ORDER BY id") == [("t-1",)]
    stored = rows(dsn)
    assert [(r["event_id"], r["partition_key"], r["topic"]) for r in stored] == [
        (done.event.id, "t-1", TOPIC)
    ]
    row = stored[0]
    assert (row["lane"], row["status"], row["event_type"]) == (
        RELAY_LANE,
        "pending",
        done.event.type,
    )
    assert (row["attempts"], row["published_at"], row["last_error"]) == (0, None, None)
    assert done.created
    assert str(done.row_id) == str(row["id"])
    assert done.event.source == "auth"


async def test_publish_refuses_a_handle_without_a_transaction(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        with pytest.raises(TransactionRequired, match="autocommit"):
            await publish_async(conn, topic=TOPIC, key="k", type="t.x", data={})
    with psycopg.connect(dsn) as conn, pytest.raises(TypeError, match="is synchronous"):
        await publish_async(conn, topic=TOPIC, key="k", type="t.x", data={})
    assert rows(dsn) == []


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("topic", "platform events", "the topic must be a dotted name"),
        ("topic", "", "the topic must be a dotted name"),
        ("type", "tenant provisioned\r\nX: y", "the event type must be a dotted name"),
        ("source", "../auth", "the event source must be a dotted name"),
        ("key", "", "the partition key must be 1 to 200 printable characters"),
        ("key", "t-1\nx", "the partition key must be 1 to 200 printable characters"),
        ("event_id", "a" * 201, "the event id must be 1 to 200 printable characters"),
        ("data", ["not", "an", "object"], "an event's data must be a JSON object"),
        ("data", {"n": math.nan}, "JSON cannot represent"),
        ("data", {"s": {1, 2}}, r"payload\['data'\]\['s'\]"),
        ("data", {"blob": "x" * 300_000}, "bytes"),
    ],
)
def test_a_bad_event_is_refused_before_anything_is_written(
    dsn: str, field: str, value: object, says: str
) -> None:
    event: dict[str, Any] = {"topic": TOPIC, "key": "t-1", "type": "t.x", "data": {}}
    event[field] = value
    with psycopg.connect(dsn) as conn, conn.transaction():
        with pytest.raises(InvalidPayload, match=says) as refused:
            publish(conn, **event)
        assert isinstance(refused.value, InvalidMessage)
        # The host's transaction is untouched and goes on.
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert rows(dsn) == []


async def test_a_second_publish_with_the_same_event_id_writes_nothing_and_says_so(
    dsn: str,
) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        async with conn.transaction():
            first = await publish_async(
                conn, topic=TOPIC, key="t-1", type="t.x", data={"v": 1}, event_id="evt-1"
            )
        async with conn.transaction():
            again = await publish_async(
                conn, topic=TOPIC, key="t-1", type="t.x", data={"v": 2}, event_id="evt-1"
            )
    assert (first.created, again.created) == (True, False)
    assert again.row_id == first.row_id
    stored = rows(dsn)
    assert [(r["event_id"], r["payload"]["data"]) for r in stored] == [("evt-1", {"v": 1})]


async def test_event_ids_default_to_fresh_uuids(dsn: str) -> None:
    ids = await publish_keys(dsn, "a", "a", "b")
    assert len(set(ids)) == 3
    assert all(len(i) == 36 and i.count("-") == 4 for i in ids)


# --- the relay ----------------------------------------------------------------------------------


async def test_the_relay_publishes_in_key_order_with_the_event_id_as_message_id(
    dsn: str, events: PostgresStore
) -> None:
    keys = ["t-1", "t-2", "t-1", "t-3", "t-2", "t-1"] * 4
    ids = await publish_keys(dsn, *keys)
    broker = MemoryBroker()
    stats = await Worker(events, RelayHandler(broker.publisher()), config()).run(drain=True)

    assert stats.dispatched == len(keys)
    expected: dict[str, list[str]] = {}
    for key, event_id in zip(keys, ids, strict=True):
        expected.setdefault(key, []).append(event_id)
    assert broker_order(broker) == expected
    message = broker.messages[0]
    event = decode_event(message.body)
    assert (message.subject, message.key, message.message_id) == (TOPIC, "t-1", ids[0])
    assert (event.id, event.key, event.type, event.data) == (
        ids[0],
        "t-1",
        "tenant.provisioned",
        {"n": 0},
    )
    assert message.headers == {
        "content-type": CONTENT_TYPE, "ce-id": ids[0], "ce-type": "tenant.provisioned",
        "ce-source": "app",
    }  # fmt: skip
    for row in rows(dsn):
        assert row["status"] == Status.DISPATCHED
        assert row["published_at"] == row["resolved_at"] is not None
        assert row["attempts"] == 1


class Watching:
    """A publisher that, while the broker is asked, reads the row's state from PostgreSQL."""

    def __init__(self, broker: MemoryBroker, dsn: str) -> None:
        self.inner = broker.publisher()
        self.dsn = dsn
        self.seen_during_publish: list[tuple[str, Any]] = []

    async def publish(self, message: BrokerMessage, *, budget: timedelta) -> Outcome:
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT status, published_at FROM outbox_event WHERE event_id = %s",
                (message.message_id,),
            )
            self.seen_during_publish.append(await cur.fetchone())  # type: ignore[arg-type]
        return await self.inner.publish(message, budget=budget)


async def test_published_at_is_set_only_after_the_broker_acknowledged(
    dsn: str, events: PostgresStore
) -> None:
    ids = await publish_keys(dsn, "t-1", "t-1", "t-2")
    broker = MemoryBroker()
    broker.available = False
    publisher = Watching(broker, dsn)
    worker = Worker(events, RelayHandler(publisher), config())

    report = await worker.run_once()
    # No acknowledgement: nothing is published, every row keeps waiting with the attempt recorded.
    assert report.claimed == 3
    assert broker.messages == []
    for row in rows(dsn):
        assert (row["status"], row["published_at"], row["attempts"]) == ("pending", None, 1)
        assert row["last_error"] in {"broker unavailable (no acknowledgement)", EARLIER_UNPUBLISHED}
    # t-1's second event was not even offered to the broker: its first had failed in the batch.
    assert broker.refused == 2

    broker.available = True
    before = datetime.now(UTC)
    await asyncio.sleep(0.2)  # the retry wait
    await worker.run(drain=True)
    # t-1's two in order (t-2's went out beside them: the relay publishes a window at once).
    assert broker_order(broker) == {"t-1": ids[:2], "t-2": ids[2:]}
    # While the broker was being asked, no row was recorded as published.
    assert all(seen == ("pending", None) for seen in publisher.seen_during_publish)
    for row in rows(dsn):
        assert row["status"] == "dispatched"
        assert row["published_at"] is not None
        assert row["published_at"] >= before - timedelta(seconds=5)


async def test_a_broker_outage_leaves_writes_alone_and_the_events_go_out_in_order_after_it(
    dsn: str, events: PostgresStore
) -> None:
    broker = MemoryBroker()
    broker.available = False
    worker = Worker(events, RelayHandler(broker.publisher()), config())
    written: list[tuple[str, str]] = []
    for tick in range(5):
        # The host's writes go on during the outage, each committing with no wait on the broker.
        keys = [f"t-{tick % 2}", "t-9"]
        written += zip(keys, await publish_keys(dsn, *keys), strict=True)
        await worker.run_once()
        await asyncio.sleep(0.12)
    assert broker.messages == []
    stored = rows(dsn)
    assert len(stored) == 10
    assert all(r["status"] == "pending" and r["published_at"] is None for r in stored)
    # Attempts are recorded: the oldest rows have been tried on several ticks.
    assert stored[0]["attempts"] >= 3
    assert stored[0]["last_error"] == "broker unavailable (no acknowledgement)"

    broker.available = True
    await asyncio.sleep(0.12)
    await worker.run(drain=True)
    expected: dict[str, list[str]] = {}
    for key, event_id in written:
        expected.setdefault(key, []).append(event_id)
    assert broker_order(broker) == expected
    assert all(r["status"] == "dispatched" for r in rows(dsn))


async def test_a_replayed_publish_after_a_crash_between_ack_and_mark_is_stored_once(
    dsn: str, events: PostgresStore
) -> None:
    (event_id,) = await publish_keys(dsn, "t-1")
    broker = MemoryBroker()
    handler = RelayHandler(broker.publisher())
    # A relay claims the row, publishes it (the broker acknowledges), and dies before its mark.
    token = ClaimToken.from_entropy(secrets.token_bytes(16))
    lease = timedelta(seconds=1)
    (row,) = await events.claim_due(ClaimRequest(RELAY_LANE, 10, lease, token))
    assert (await handler(row, budget=timedelta(seconds=1))).kind == "sent"
    assert await events.claim_due(ClaimRequest(RELAY_LANE, 10, lease, token)) == []

    await asyncio.sleep(1.1)  # the lease ends; the next relay publishes the row again
    await Worker(events, RelayHandler(broker.publisher()), config()).run(drain=True)
    assert [m.message_id for m in broker.messages] == [event_id]  # de-duplicated on the id
    (stored,) = rows(dsn)
    assert (stored["status"], stored["attempts"]) == ("dispatched", 2)


async def test_one_key_s_order_holds_across_a_relay_crash(dsn: str, events: PostgresStore) -> None:
    ids = await publish_keys(dsn, *["t-1"] * 5)
    broker = MemoryBroker()
    handler = RelayHandler(broker.publisher())
    token = ClaimToken.from_entropy(secrets.token_bytes(16))
    lease = timedelta(seconds=2)
    claimed = await events.claim_due(ClaimRequest(RELAY_LANE, 10, lease, token))
    assert len(claimed) == 5
    # The crashed relay published and marked the first two, published the third, then died.
    for row in claimed[:2]:
        assert (await handler(row, budget=timedelta(seconds=1))).kind == "sent"
        sent = Mark(row.id, row.token, Status.DISPATCHED)
        assert await events.mark_if_pending(sent) is MarkResult.APPLIED
    await handler(claimed[2], budget=timedelta(seconds=1))

    # Meanwhile the host writes more: a later event of t-1 and one of another key.
    later, other = await publish_keys(dsn, "t-1", "t-2")
    relay = Worker(events, RelayHandler(broker.publisher()), config())
    await relay.run_once()
    # t-2 goes out at once; none of t-1's rows while its earlier rows are leased to the dead relay.
    assert [m.message_id for m in broker.messages] == [*ids[:3], other]

    await asyncio.sleep(2.1)  # the dead relay's lease ends
    await relay.run(drain=True)
    assert broker_order(broker) == {"t-1": [*ids, later], "t-2": [other]}
    assert all(r["status"] == "dispatched" for r in rows(dsn))


async def test_an_undecodable_row_fails_at_once_with_its_reason_and_does_not_block_its_key(
    dsn: str, events: PostgresStore
) -> None:
    (first,) = await publish_keys(dsn, "t-1")
    # A row whose stored event was damaged around publish (here: its time lost its zone).
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE outbox_event SET payload = jsonb_set(payload, '{time}', '\"2031-01-01T00:00:00\"')"
        )
    (second,) = await publish_keys(dsn, "t-1")
    broker = MemoryBroker()
    await Worker(events, RelayHandler(broker.publisher()), config()).run(drain=True)
    bad, good = rows(dsn)
    assert (bad["status"], bad["attempts"]) == ("failed", 1)
    assert bad["last_error"] == "undeliverable: the event's time has no time zone"
    assert good["status"] == "dispatched"
    assert [m.message_id for m in broker.messages] == [second]
    assert first != second


def test_the_relay_lane_and_its_warning() -> None:
    lane = relay_lane()
    assert (lane.lane, lane.timing, lane.backoff) == (RELAY_LANE, RelayTiming(), RELAY_BACKOFF)
    # The window is the whole batch: published at once, one grouped mark (ADR 0023).
    assert (lane.rows_in_flight, lane.group_marks) == (500, True)
    strict = relay_lane(timing=RelayTiming(batch_size=50, window=1))
    assert (strict.rows_in_flight, strict.group_marks) == (1, False)
    with pytest.raises(ConfigurationError, match=r"rows_in_flight follows the timing's window"):
        relay_lane(rows_in_flight=8)
    # Broker trouble is never given up on: a second, then doubling to 30 s apart.
    waits = [RELAY_BACKOFF.delay(n, jitter=0.5) for n in (1, 2, 3, 6, 10_000)]
    assert waits == [timedelta(seconds=s) for s in (1, 2, 4, 30, 30)]
    assert relay_disabled_warning().startswith("event relay disabled: no broker configured.")
    assert "writes are unaffected" in relay_disabled_warning()
    assert json.dumps(relay_disabled_warning())
