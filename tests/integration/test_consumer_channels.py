"""The consumer machinery every channel shares, the in-app channel, and a host's own channel: real
PostgreSQL and a MemoryBroker (ADR 0021).

- an undecodable message is parked (raw body, kind ``undecodable``) and acknowledged, never a stall;
- an event that overruns its deadline is nak'd with a delay, and the consumer goes on;
- the in-app channel writes one row per audience, and a redelivery writes nothing new;
- a host's channel over rows of its own lane gets the same per-recipient dedup, retries, DLQ and ack.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import attrs
import pytest
from psycopg_pool import AsyncConnectionPool
from tests.support.channels import (
    DLQ,
    FAST,
    FAST_BACKOFF,
    INAPP_GROUP,
    TOPIC,
    channel_pool,
    publish,
    tenant_event,
    wire,
)

from outbox_adapters.lanes.channel_workers import inapp_consumer
from outbox_adapters.lanes.consumer import ChannelConsumer, Settlement
from outbox_adapters.lanes.email import email_lane
from outbox_adapters.lanes.row_channel import Recipient, RowChannel
from outbox_adapters.memory import MemoryBroker
from outbox_adapters.postgres import PostgresStore
from outbox_adapters.postgres.channels import PostgresParkLedger, RecipientRows
from outbox_adapters.runtime import Worker
from outbox_core.events import EventEnvelope
from outbox_core.messages import ClaimedRow, NewMessage
from outbox_core.outcomes import Outcome
from outbox_core.ports import BrokerMessage, ReceivedMessage

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]


@pytest.fixture
async def pool(dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with channel_pool(dsn) as made:
        yield made


async def feed(pool: AsyncConnectionPool[Any]) -> list[tuple[Any, ...]]:
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT event_id, audience, tenant_id, title, body, read_at FROM outbox_notification"
            " ORDER BY audience"
        )
        return list(await cursor.fetchall())


async def test_an_undecodable_message_is_parked_raw_and_acknowledged(
    pool: AsyncConnectionPool[Any],
) -> None:
    broker = MemoryBroker()
    garbage = BrokerMessage(subject=TOPIC, key="k", message_id="m-1", body=b"\xffnot an event")
    event = tenant_event()
    await publish(broker, garbage, wire(event))
    consumer = inapp_consumer(
        pool, broker.consumer(INAPP_GROUP, [TOPIC]), broker.publisher(), timing=FAST
    )
    stats = await consumer.run(drain=True)

    (parked,) = broker.on(DLQ)
    assert parked.body == garbage.body
    assert parked.headers["outbox-dlq-kind"] == "undecodable"
    assert parked.headers["outbox-dlq-group"] == INAPP_GROUP
    assert "not JSON" in parked.headers["outbox-dlq-reason"]
    assert (stats.undecodable, stats.parked, stats.acked) == (1, 1, 2)
    assert len(await feed(pool)) == 2  # the event behind it was not held up


async def test_the_in_app_channel_writes_one_row_per_audience_and_a_redelivery_nothing_new(
    pool: AsyncConnectionPool[Any],
) -> None:
    broker = MemoryBroker()
    event = tenant_event(tenant_name="Acme\x1b[31m\r\nInc")
    await publish(broker, *(wire(event, message_id=f"{event.id}#{n}") for n in range(3)))
    for _ in range(2):  # a restarted consumer gets all three copies again
        consumer = broker.consumer(INAPP_GROUP, [TOPIC])
        stats = await inapp_consumer(pool, consumer, broker.publisher(), timing=FAST).run(
            drain=True
        )
        assert stats.acked == 3

    rows = await feed(pool)
    assert [(r[0], r[1], r[2], r[5]) for r in rows] == [
        (event.id, "platform", None, None),
        (event.id, "tenant", event.data["tenant_id"], None),
    ]
    assert rows[0][3] == "New tenant: Acme[31m  Inc"  # control characters out
    assert broker.on(DLQ) == []


@attrs.define
class Slow:
    """A channel that takes longer than the deadline the first time."""

    name: str = "slow"
    calls: int = 0

    async def deliver(self, event: EventEnvelope, message: ReceivedMessage) -> Settlement:
        del event, message
        self.calls += 1
        if self.calls == 1:
            await asyncio.sleep(10)
        return Settlement.done()


async def test_an_event_overrunning_its_deadline_is_nakd_with_a_delay_not_a_stall(
    pool: AsyncConnectionPool[Any],
) -> None:
    broker = MemoryBroker()
    await publish(broker, wire(tenant_event()))
    consumer = broker.consumer("slow", [TOPIC])
    machinery = ChannelConsumer(
        consumer,
        Slow(),
        dlq=broker.publisher(),
        parks=PostgresParkLedger(pool),
        event_deadline=timedelta(milliseconds=200),
        overrun_delay=timedelta(milliseconds=100),
        drain_idle=timedelta(milliseconds=300),
    )
    async with asyncio.timeout(5):
        stats = await machinery.run(drain=True)
    assert (stats.overruns, stats.naked, stats.acked) == (1, 1, 1)
    assert len(consumer.acked) == 1


@attrs.define
class Sms:
    """A host's SMS lane handler: records what it sends; the first attempt of each row fails."""

    sent: list[str] = attrs.Factory(list)

    async def __call__(self, row: ClaimedRow, *, budget: timedelta) -> Outcome:
        del budget
        assert isinstance(row.payload, dict)
        if row.attempts == 1:
            return Outcome.transient("gateway busy")
        if row.payload["to"] == "+000":
            return Outcome.permanent("no such number")
        self.sent.append(str(row.payload["to"]))
        return Outcome.sent()


async def test_a_host_channel_gets_the_same_dedup_dlq_and_ack_machinery(
    pool: AsyncConnectionPool[Any], lane: str
) -> None:
    def texts(event: EventEnvelope) -> list[Recipient]:
        phone = str(event.data["admin_email"]).replace("admin@acme.example", "+100")
        return [
            Recipient("admin_sms", message=NewMessage(lane, {"to": phone})),
            Recipient("ops_sms", message=NewMessage(lane, {"to": "+000"})),
            Recipient("legal_sms", refusal="no legal number configured"),
        ]

    broker = MemoryBroker()
    event = tenant_event()
    await publish(broker, *(wire(event, message_id=f"{event.id}#{n}") for n in range(3)))
    channel = RowChannel(
        "host-sms", RecipientRows(pool, lane=lane), texts, recheck=timedelta(milliseconds=50)
    )
    handler = Sms()
    store = PostgresStore(pool)
    worker = Worker(store, handler, email_lane(lane=lane, backoff=FAST_BACKOFF, poll_interval=0.05))
    consumer = FAST.consumer(
        broker.consumer("host-sms", [TOPIC]),
        channel,
        dlq=broker.publisher(),
        parks=PostgresParkLedger(pool),
    )
    sending = asyncio.create_task(worker.run())
    stats = await consumer.run(drain=True)
    worker.request_stop()
    await sending
    await store.close()

    assert handler.sent == ["+100"]  # one send for the kind, three deliveries
    assert sorted(m.headers["outbox-dlq-kind"] for m in broker.on(DLQ)) == [
        "legal_sms",
        "ops_sms",
    ]
    assert stats.acked == 3
    assert stats.parked == 2  # each kind parked once across the three copies
