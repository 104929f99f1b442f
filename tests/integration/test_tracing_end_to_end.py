"""Traces across real servers (ADR 0028): the enqueue's span context is stored in the row on
PostgreSQL, the worker's delivery span links to it, and through NATS the relay's headers carry it to
a consumer channel, whose delivery links to the original enqueue too; a webhook fan-out hands the
event's context to every delivery, whose attempts link to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool
from tests.support.postgres import query
from tests.support.receivers import HttpReceiver
from tests.support.telemetry import Recorded, context_of, recording
from tests.support.webhooks import Webhooks, new_secret

from outbox_adapters.brokers import NatsBroker, StreamSpec, broker_from_url
from outbox_adapters.http import DestinationGuard, HttpxWebhookSender
from outbox_adapters.lanes.consumer import ChannelConsumer, Settlement
from outbox_adapters.lanes.email import email_lane
from outbox_adapters.lanes.relay import RelayHandler, relay_lane
from outbox_adapters.lanes.webhook_workers import WebhookWorkers
from outbox_adapters.lanes.webhooks import delivery_lane, drain_lane
from outbox_adapters.memory import RecordingHandler
from outbox_adapters.postgres import PostgresStore, enqueue_async
from outbox_adapters.postgres.channels import PostgresParkLedger
from outbox_adapters.postgres.events import outbox_event, publish_async
from outbox_adapters.runtime import Worker
from outbox_core.events import EventEnvelope
from outbox_core.messages import NewMessage
from outbox_core.ports import ReceivedMessage
from outbox_core.timing import RelayTiming

pytestmark = pytest.mark.integration


def traceparent(otel: Recorded, name: str) -> str:
    context = context_of(otel.span(name))
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def assert_linked(otel: Recorded, delivery: str, enqueue: str) -> None:
    span = otel.span(delivery)
    produced = context_of(otel.span(enqueue))
    assert span.parent is None
    [link] = span.links
    assert (link.context.trace_id, link.context.span_id) == (produced.trace_id, produced.span_id)


async def test_postgres_enqueue_then_worker_the_delivery_span_links_to_the_stored_context(
    dsn: str, store: PostgresStore, lane: str
) -> None:
    with recording() as otel:
        async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
            result = await enqueue_async(conn, NewMessage(lane, {"to": "a@example.org"}))
        [(stored,)] = query(
            dsn, "SELECT trace_context FROM outbox_message WHERE id = %s", result.row_id
        )
        assert stored == traceparent(otel, f"send {lane}")

        handler = RecordingHandler()
        worker = Worker(store, handler, email_lane(lane=lane, poll_interval=0.05))
        stats = await worker.run(drain=True)
        assert stats.dispatched == 1
        assert handler.calls[0].row.trace_context == stored
        assert_linked(otel, f"process {lane}", f"send {lane}")
        assert otel.total("outbox.sent", **{"outbox.lane": lane}) == 1


class Settled:
    """A host channel that settles every event at once and remembers what it saw."""

    name = f"trace-{secrets.token_hex(3)}"

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def deliver(self, event: EventEnvelope, message: ReceivedMessage) -> Settlement:
        del message
        self.seen.append(event.id)
        return Settlement.done()


@pytest.fixture
async def nats(nats_url: str) -> AsyncIterator[tuple[NatsBroker, str]]:
    broker = broker_from_url(nats_url, ack_wait=timedelta(seconds=2))
    assert isinstance(broker, NatsBroker)
    topic = f"trace-{secrets.token_hex(4)}"
    await broker.declare(StreamSpec(name=topic, subjects=(topic,)))
    yield broker, topic
    js = await broker.jetstream()
    for name in (topic, f"{topic}-dlq"):
        with contextlib.suppress(Exception):  # the DLQ stream exists only if something parked
            await js.delete_stream(name)
    await broker.aclose()


@pytest.mark.usefixtures("empty_outbox")
async def test_the_relay_carries_the_context_through_nats_to_the_consumer_channel(
    dsn: str, nats: tuple[NatsBroker, str]
) -> None:
    broker, topic = nats
    timing = RelayTiming(publish=timedelta(seconds=2), mark=timedelta(seconds=1), batch_size=10)
    with recording() as otel:
        async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
            published = await publish_async(
                conn, topic=topic, key="k-1", type="order.placed", data={"n": 1}
            )
        async with await PostgresStore.open(dsn, table=outbox_event, max_size=2) as events:
            relay = Worker(
                events,
                RelayHandler(broker.publisher()),
                relay_lane(timing=timing, poll_interval=0.05),
            )
            assert (await relay.run(drain=True)).dispatched >= 1

        js = await broker.jetstream()
        stored = await js.get_msg(topic, seq=1)
        assert stored.headers is not None
        assert stored.headers["traceparent"] == traceparent(otel, "send events")

        channel = Settled()
        async with AsyncConnectionPool(dsn, min_size=1, max_size=2, open=False) as pool:
            consumer = ChannelConsumer(
                broker.consumer(channel.name, [topic]),
                channel,
                dlq=broker.publisher(),
                parks=PostgresParkLedger(pool),
                drain_idle=timedelta(seconds=1),
            )
            await asyncio.wait_for(consumer.run(drain=True), timeout=30)
        assert channel.seen == [published.event.id]
        # The relay's own delivery and the channel's both link to the original publish.
        assert_linked(otel, "process events", "send events")
        assert_linked(otel, f"process {topic}", "send events")
        attributes: dict[str, Any] = dict(otel.span(f"process {topic}").attributes or {})
        assert attributes["messaging.consumer.group.name"] == channel.name
        assert attributes["messaging.message.id"] == published.event.id


@pytest.mark.usefixtures("empty_outbox")
async def test_a_webhook_fan_out_hands_the_context_to_each_delivery(wh: Webhooks) -> None:
    guard = DestinationGuard(allow=("127.0.0.0/8",), require_https=False)
    with recording() as otel, HttpReceiver() as hook, HttpReceiver() as other:
        for receiver in (hook, other):
            await wh.repo.add_endpoint(
                receiver.url(), ["invoice.paid"], secret=new_secret(), tenant="acme"
            )
        row_id = await wh.enqueue("invoice.paid", invoice=1)
        [(stored,)] = await wh.rows(
            "SELECT trace_context FROM outbox_webhook WHERE id = %s", row_id
        )
        assert stored == traceparent(otel, "send webhooks")
        async with HttpxWebhookSender(guard) as sender:
            workers = WebhookWorkers(
                wh.pool,
                sender,
                drain_config=drain_lane(poll_interval=0.05),
                delivery_config=delivery_lane(poll_interval=0.05),
            )
            stats = await workers.run(drain=True)
        assert stats.first_attempts.dispatched == 2
        # Both deliveries carry the event's context, and each attempt's span links to its enqueue.
        assert await wh.rows("SELECT DISTINCT trace_context FROM outbox_webhook_delivery") == [
            (stored,)
        ]
        attempts = [s for s in otel.spans() if s.name == "process webhook_deliveries"]
        assert len(attempts) == 2
        produced = context_of(otel.span("send webhooks"))
        for span in attempts:
            [link] = span.links
            assert (link.context.trace_id, link.context.span_id) == (
                produced.trace_id,
                produced.span_id,
            )
