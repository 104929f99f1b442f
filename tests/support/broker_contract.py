"""The broker contract suite's harness (tests/contract/test_broker_contract.py).

A harness holds a broker (memory, NATS, Kafka) with a topic of its own declared, and offers:

- ``another_client()``: a second, independent client of the same broker (a restarted relay);
- ``restarted_consumer(group)``: a consumer of ``group`` on a new client (a restarted process);
- ``unavailable_broker()``: a broker of the same kind that cannot be reached (a closed port).

NATS runs with ``ack_wait`` = 1 s so that a crashed consumer's message comes back quickly. On the
Kafka mock cluster (no CreateTopics), ``declare`` must refuse with a clear error naming the topics;
the harness then lets the mock auto-create them by asking for their metadata.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Self

import pytest
from aiokafka import AIOKafkaProducer
from tests.support.brokers import free_port

from outbox_adapters.brokers import KafkaBroker, NatsBroker, broker_from_url
from outbox_adapters.memory import MemoryBroker
from outbox_core.brokers import StreamSpec
from outbox_core.errors import ConfigurationError
from outbox_core.events import CONTENT_TYPE, EventEnvelope
from outbox_core.ports import BrokerMessage, Consumer, ReceivedMessage

__all__ = ["BACKENDS", "BrokerHarness", "Reader", "message", "open_harness"]

BACKENDS = [
    "memory",
    pytest.param("nats", marks=pytest.mark.integration),
    pytest.param("kafka", marks=pytest.mark.integration),
]
TAKE_TIMEOUT = 30.0


def message(
    topic: str, key: str, n: int, *, headers: Mapping[str, str] | None = None
) -> BrokerMessage:
    """The ``n``-th event of ``topic`` as the relay publishes it (a CloudEvents body)."""
    event = EventEnvelope(
        id=f"{topic}-{n}",
        type="tenant.provisioned",
        source="contract",
        key=key,
        time=datetime(2026, 3, 1, 9, 0, n % 60, tzinfo=UTC),
        data={"n": n, "admin_email": f"admin{n}@example.com"},
    )
    return BrokerMessage(
        subject=topic,
        key=key,
        message_id=event.id,
        body=event.encode(),
        headers={
            "content-type": CONTENT_TYPE,
            "ce-id": event.id,
            "ce-source": event.source,
            **(headers or {"ce-type": event.type}),
        },
    )


class Reader:
    """A consumer's message iterator kept open across ``take`` calls."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self._it = consumer.messages()

    async def take(self, n: int, *, ack: bool = False) -> list[ReceivedMessage]:
        got: list[ReceivedMessage] = []
        async with asyncio.timeout(TAKE_TIMEOUT):
            while len(got) < n:
                received = await anext(self._it)
                if ack:
                    await received.ack()
                got.append(received)
        return got

    async def take_until(self, message_id: str) -> list[ReceivedMessage]:
        got: list[ReceivedMessage] = []
        async with asyncio.timeout(TAKE_TIMEOUT):
            while not got or got[-1].message_id != message_id:
                got.append(await anext(self._it))
        return got

    async def crash(self) -> None:
        """Stop reading without settling anything (a killed process)."""
        await self._it.aclose()  # type: ignore[attr-defined]

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        close = getattr(self.consumer, "close", None)
        if close is not None:
            close()
        await self._it.aclose()  # type: ignore[attr-defined]


class BrokerHarness:
    def __init__(self, name: str, broker: Any, topic: str, url: str = "") -> None:
        self.name = name
        self.broker = broker
        self.topic = topic
        self.url = url
        self.spec = StreamSpec(name=topic, subjects=(topic,), partitions=3)
        self.clients: list[Any] = []

    def _client(self) -> Any:
        if self.name == "memory":
            return self.broker
        extra = {"ack_wait": timedelta(seconds=1)} if self.name == "nats" else {}
        made = broker_from_url(self.url, **extra)  # type: ignore[arg-type]
        self.clients.append(made)
        return made

    async def another_client(self) -> Any:
        return self._client()

    def restarted_consumer(self, group: str) -> Consumer:
        return self._client().consumer(group, [self.topic])  # type: ignore[no-any-return]

    async def unavailable_broker(self) -> Any:
        if self.name == "memory":
            down = MemoryBroker()
            down.available = False
            return down
        port = free_port()  # nothing listens there
        if self.name == "nats":
            made: Any = NatsBroker([f"nats://127.0.0.1:{port}"], connect_timeout=1.0)
        else:
            made = KafkaBroker([f"127.0.0.1:{port}"], request_timeout=timedelta(seconds=2))
        self.clients.append(made)
        return made


async def _touch_kafka_topics(broker: KafkaBroker, topics: tuple[str, ...]) -> None:
    """The mock cluster creates a topic when a client asks for its metadata."""
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, **broker.security)
    await producer.start()
    try:
        for topic in topics:
            await producer.partitions_for(topic)
    finally:
        await producer.stop()


@contextlib.asynccontextmanager
async def open_harness(request: pytest.FixtureRequest) -> AsyncIterator[BrokerHarness]:
    name: str = request.param
    topic = f"ct-{secrets.token_hex(4)}"
    if name == "memory":
        harness = BrokerHarness(name, MemoryBroker(), topic)
        await harness.broker.declare(harness.spec)
        yield harness
        return
    if name == "nats":
        url: str = request.getfixturevalue("nats_url")
        harness = BrokerHarness(
            name, broker_from_url(url, ack_wait=timedelta(seconds=1)), topic, url
        )
        await harness.broker.declare(harness.spec)
    else:
        url = request.getfixturevalue("kafka_url")
        harness = BrokerHarness(name, broker_from_url(url), topic, url)
        if request.getfixturevalue("kafka_is_mock"):
            with pytest.raises(ConfigurationError, match="does not offer CreateTopics"):
                await harness.broker.declare(harness.spec)
            await _touch_kafka_topics(harness.broker, (topic, f"{topic}.dlq"))
        else:
            await harness.broker.declare(harness.spec)
    try:
        yield harness
    finally:
        for client in harness.clients:
            await client.aclose()
        if name == "nats":
            js = await harness.broker.jetstream()
            for stream in (topic, f"{topic}-dlq"):
                with contextlib.suppress(Exception):
                    await js.delete_stream(stream)
        await harness.broker.aclose()
