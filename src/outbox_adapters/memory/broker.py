"""An in-memory broker for tests: a publisher that de-duplicates on the message id (as JetStream
does within its duplicate window) and consumers per group that redeliver what they did not get
acknowledged. Shipped for hosts' tests, like the other fakes; the broker contract suite runs it
beside the real NATS JetStream and Kafka adapters.

``MemoryBroker.available = False`` makes every publish a transient failure ("broker unavailable")
and stops delivering, as a broker outage would.

It is an :class:`outbox_core.brokers.Broker`: ``declare`` records the spec, the DLQ of a topic is
its ``<topic>.dlq`` subject, listed without being consumed and redriven back to the source subject
(which removes the parked copies), as the real adapters do.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta

import attrs

from outbox_core.brokers import (
    DLQ_SOURCE,
    EVENT_ID_HEADER,
    ConsumerLag,
    DeadLetter,
    StreamSpec,
    dlq_subject,
    source_of,
)
from outbox_core.outcomes import Outcome
from outbox_core.ports import BrokerMessage
from outbox_core.untrusted import bounded_id

__all__ = ["MemoryBroker", "MemoryConsumer", "MemoryMessage", "MemoryPublisher"]


@attrs.define
class MemoryMessage:
    """One delivery of a stored message to one consumer group (``ReceivedMessage``)."""

    stored: BrokerMessage
    deliveries: int
    _consumer: MemoryConsumer
    _settled: bool = False

    @property
    def message_id(self) -> str:
        return bounded_id(self.stored.message_id)  # as the real brokers' edges bound it

    @property
    def body(self) -> bytes:
        return self.stored.body

    @property
    def subject(self) -> str:
        return self.stored.subject

    @property
    def headers(self) -> Mapping[str, str]:
        return self.stored.headers

    async def ack(self) -> None:
        if not self._settled:
            self._settled = True
            self._consumer.in_flight -= 1
            self._consumer.acked.append(self.message_id)

    async def nak(self, *, delay: timedelta | None = None) -> None:
        if not self._settled:
            self._settled = True
            self._consumer.in_flight -= 1
            self._consumer.redeliver(self, delay)


class MemoryBroker:
    """Subjects holding messages in publish order; each consumer group reads them all."""

    def __init__(self) -> None:
        self.messages: list[BrokerMessage] = []
        self._seen: set[str] = set()
        self._consumers: list[MemoryConsumer] = []
        self.available = True
        #: Publishes refused so far because the broker was unavailable.
        self.refused = 0
        #: What ``declare`` was given, in order.
        self.declared: list[StreamSpec] = []
        self._stored_at: dict[int, datetime] = {}

    def publisher(self) -> MemoryPublisher:
        return MemoryPublisher(self)

    def consumer(self, group: str, subjects: Sequence[str]) -> MemoryConsumer:
        consumer = MemoryConsumer(self, group, tuple(subjects))
        self._consumers.append(consumer)
        for message in self.messages:
            consumer.offer(message)
        return consumer

    def on(self, subject: str) -> list[BrokerMessage]:
        """The stored messages of ``subject``, in order."""
        return [m for m in self.messages if m.subject == subject]

    async def declare(self, spec: StreamSpec) -> None:
        self.declared.append(spec)

    def _parked(self, topic: str) -> list[BrokerMessage]:
        return self.on(dlq_subject(topic))

    async def dead_letters(self, topic: str, *, limit: int = 100) -> list[DeadLetter]:
        dlq = dlq_subject(topic)
        return [
            DeadLetter(
                message_id=bounded_id(m.headers.get(EVENT_ID_HEADER, m.message_id)),
                subject=dlq,
                source=m.headers.get(DLQ_SOURCE) or source_of(dlq),
                headers=dict(m.headers),
                size=len(m.body),
                time=self._stored_at.get(id(m), datetime.now(UTC)),
                position=str(self.messages.index(m)),
            )
            for m in self._parked(dlq)[:limit]
        ]

    async def redrive(self, topic: str, ids: Sequence[str] | None = None) -> int:
        done: set[str] = set()
        for letter, message in zip(
            await self.dead_letters(topic, limit=len(self.messages)),
            self._parked(topic),
            strict=True,
        ):
            if ids is not None and letter.message_id not in ids:
                continue
            if letter.message_id not in done:
                headers = {
                    k: v for k, v in message.headers.items() if not k.startswith("outbox-dlq-")
                }
                again = attrs.evolve(
                    message, subject=letter.source, message_id=letter.message_id, headers=headers
                )
                self._store(again, replay=True)
                done.add(letter.message_id)
            self.messages.remove(message)
        return len(done)

    async def lag(self, group: str, subject: str) -> ConsumerLag:
        mine = [c for c in self._consumers if c.group == group and subject in c.subjects]
        if not mine:
            return ConsumerLag(group, subject, waiting=None)
        return ConsumerLag(
            group,
            subject,
            waiting=sum(c.pending() for c in mine),
            unacknowledged=sum(c.in_flight for c in mine),
        )

    async def aclose(self) -> None:
        for consumer in self._consumers:
            consumer.close()

    def _store(self, message: BrokerMessage, *, replay: bool = False) -> None:
        if message.message_id in self._seen and not replay:
            return  # a replayed publish: the broker keeps one copy
        self._seen.add(message.message_id)
        self.messages.append(message)
        self._stored_at[id(message)] = datetime.now(UTC)
        for consumer in self._consumers:
            consumer.offer(message)


class MemoryPublisher:
    """``ports.Publisher``: sent only once the message is stored (a positive acknowledgement)."""

    def __init__(self, broker: MemoryBroker) -> None:
        self.broker = broker

    async def publish(self, message: BrokerMessage, *, budget: timedelta) -> Outcome:
        del budget
        await asyncio.sleep(0)
        if not self.broker.available:
            self.broker.refused += 1
            return Outcome.transient("broker unavailable (no acknowledgement)")
        self.broker._store(message)  # noqa: SLF001 - the broker's own publisher
        return Outcome.sent()


class MemoryConsumer:
    """``ports.Consumer`` of one group: at-least-once, in order, redelivering naks."""

    def __init__(self, broker: MemoryBroker, group: str, subjects: tuple[str, ...]) -> None:
        self.broker = broker
        self.group = group
        self.subjects = subjects
        self.acked: list[str] = []
        #: Handed out and not settled yet.
        self.in_flight = 0
        self._queue: asyncio.Queue[tuple[BrokerMessage, int]] = asyncio.Queue()
        self._closed = False

    def offer(self, message: BrokerMessage) -> None:
        if message.subject in self.subjects:
            self._queue.put_nowait((message, 1))

    def redeliver(self, message: MemoryMessage, delay: timedelta | None) -> None:
        """Deliver ``message`` again (after ``delay``), as a broker does after a nak."""
        again = (message.stored, message.deliveries + 1)
        if delay:
            asyncio.get_running_loop().call_later(
                delay.total_seconds(), self._queue.put_nowait, again
            )
        else:
            self._queue.put_nowait(again)

    def close(self) -> None:
        """End :meth:`messages` once what is queued now has been delivered."""
        self._closed = True

    def pending(self) -> int:
        """Deliveries queued and not yet handed out."""
        return self._queue.qsize()

    async def messages(self) -> AsyncIterator[MemoryMessage]:
        while not (self._closed and self._queue.empty()):
            if not self.broker.available:
                await asyncio.sleep(0.01)
                continue
            try:
                stored, count = await asyncio.wait_for(self._queue.get(), timeout=0.05)
            except TimeoutError:
                continue
            self.in_flight += 1
            yield MemoryMessage(stored, count, self)
