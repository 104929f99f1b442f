"""A Kafka consumer group behind ``ports.Consumer``: explicit acks over Kafka's offsets.

Auto-commit is off. Each assigned partition keeps the offsets it handed out, in order; an ack
marks one, and the group's committed offset moves only over an unbroken run of acked offsets from
the front (contiguous commits): a message not yet acked, however far behind, is never skipped, so
a crash or a rebalance redelivers it (and the acked ones after it: duplicates the consumers drop).

``nak(delay)`` keeps the record in a local retry list and hands it out again after the delay with
the delivery count + 1; its offset stays un-acked, so the commit waits for it. Chosen over seeking
back, which would refetch and redeliver every later record of the partition as well. Its limits:

- the retry list lives in this process: a crash forgets it, and the record comes back from the
  committed offset with a delivery count of 1 again (Kafka keeps no delivery count; the count is
  per consumer instance, a lower bound);
- a long-naked record holds the partition's commit back: everything after it is redelivered after
  a crash (bounded by ``max_in_flight``: past it, no new records are fetched until acks catch up);
- a revoked partition drops its retries and un-acked offsets: the new owner gets them again from
  the committed offset.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener

from outbox_adapters.brokers.errors import BrokerUnavailable, log
from outbox_adapters.brokers.kafka.config import KafkaClientConfig
from outbox_adapters.brokers.kafka.errors import describe, is_broker_error, operation
from outbox_core.brokers import EVENT_ID_HEADER
from outbox_core.errors import ConfigurationError
from outbox_core.untrusted import bounded_id, header_text

__all__ = ["KafkaConsumer", "KafkaMessage", "PartitionOffsets", "record_headers"]


def record_headers(record: Any) -> dict[str, str]:  # noqa: ANN401 - an aiokafka ConsumerRecord
    """A record's headers as text: a null value is ``""``, bytes are decoded (invalid UTF-8
    replaced), a key that is bytes as well; never an exception, whatever the producer sent."""
    return {header_text(k): header_text(v) for k, v in (record.headers or ())}


class PartitionOffsets:
    """The offsets of one partition handed out and not yet committed, and which are acked."""

    def __init__(self) -> None:
        self._acked: dict[int, bool] = {}  # offset -> acked, in the order handed out
        self.committable: int | None = None  # the next offset to commit, when it moved

    def handed_out(self, offset: int) -> None:
        self._acked.setdefault(offset, False)

    def ack(self, offset: int) -> bool:
        """Mark ``offset`` acked; True when the contiguous front moved (a commit is due)."""
        if offset not in self._acked:
            return False
        self._acked[offset] = True
        moved = False
        for front, done in list(self._acked.items()):
            if not done:
                break
            del self._acked[front]
            self.committable = front + 1
            moved = True
        return moved

    def __len__(self) -> int:
        return len(self._acked)


class KafkaMessage:
    """One delivery of a Kafka record (``ports.ReceivedMessage``)."""

    def __init__(self, consumer: KafkaConsumer, record: Any, deliveries: int) -> None:  # noqa: ANN401
        self._consumer = consumer
        self.record = record
        self.deliveries = deliveries
        # A null header value is legal in Kafka (aiokafka hands None): read as "" (ADR 0019).
        self.headers: Mapping[str, str] = record_headers(record)
        self.message_id: str = bounded_id(
            self.headers.get(EVENT_ID_HEADER)
            or f"{record.topic}:{record.partition}:{record.offset}"
        )
        self.subject: str = record.topic
        self.body: bytes = record.value or b""
        self._settled = False
        self._offsets = consumer.offsets.get(TopicPartition(record.topic, record.partition))

    async def ack(self) -> None:
        if self._settled:
            return
        self._settled = True
        await self._consumer.acked(self)

    async def nak(self, *, delay: timedelta | None = None) -> None:
        if self._settled:
            return
        self._settled = True
        self._consumer.retry(self, delay or timedelta(0))


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, consumer: KafkaConsumer) -> None:
        self.consumer = consumer

    async def on_partitions_revoked(self, revoked: Any) -> None:  # noqa: ANN401
        for tp in revoked:
            self.consumer.offsets.pop(tp, None)
        self.consumer.drop_retries(set(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:  # noqa: ANN401
        for tp in assigned:
            self.consumer.offsets[tp] = PartitionOffsets()


class KafkaConsumer:
    """``ports.Consumer`` of one consumer group on Kafka: at least once, commits after acks."""

    def __init__(
        self,
        config: KafkaClientConfig,
        group: str,
        subjects: tuple[str, ...],
        *,
        max_in_flight: int = 10_000,
    ) -> None:
        if not subjects:
            raise ConfigurationError(f"consumer group {group!r} needs at least one topic")
        #: The cluster's client settings (``KafkaBroker.config``).
        self.config = config
        self.group = group
        self.subjects = subjects
        self.max_in_flight = max_in_flight
        self.offsets: dict[TopicPartition, PartitionOffsets] = {}
        self._retries: list[tuple[float, int, KafkaMessage]] = []
        self._order = itertools.count()
        self._client: AIOKafkaConsumer | None = None
        self._closed = False

    def close(self) -> None:
        """End :meth:`messages` once nothing is waiting: no record fetched, no retry due."""
        self._closed = True

    def retry(self, message: KafkaMessage, delay: timedelta) -> None:
        due = time.monotonic() + delay.total_seconds()
        again = KafkaMessage(self, message.record, message.deliveries + 1)
        again._offsets = message._offsets  # noqa: SLF001 - the same hand-out
        heapq.heappush(self._retries, (due, next(self._order), again))

    def drop_retries(self, partitions: set[TopicPartition]) -> None:
        self._retries = [
            r
            for r in self._retries
            if TopicPartition(r[2].record.topic, r[2].record.partition) not in partitions
        ]
        heapq.heapify(self._retries)

    async def acked(self, message: KafkaMessage) -> None:
        record = message.record
        tp = TopicPartition(record.topic, record.partition)
        offsets = self.offsets.get(tp)
        if offsets is None or offsets is not message._offsets or not offsets.ack(record.offset):  # noqa: SLF001
            return  # revoked since (the new owner redelivers it), or the front did not move
        if self._client is None or offsets.committable is None:
            return
        try:
            await self._client.commit({tp: offsets.committable})
        except Exception as exc:
            if not is_broker_error(exc):
                raise
            # Not committed: a later ack commits past it, or it is redelivered (at least once).
            log.warning("committing %s for group %s failed: %s", tp, self.group, describe(exc))

    async def _start(self) -> AIOKafkaConsumer:
        client = AIOKafkaConsumer(
            **self.config.client_options(),
            group_id=self.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=100,
        )
        client.subscribe(list(self.subjects), listener=_Listener(self))
        try:
            async with operation(f"joining consumer group {self.group}"):
                await client.start()
        except BaseException:  # an outage, or cancelled while joining: close what it opened
            await client.stop()
            raise
        return client

    async def ready(self, *, within: float = 30.0) -> None:
        """Join the group and wait until this member holds partitions (at most ``within``
        seconds: a member of a group with more members than partitions may get none). A drain
        counts its idle time from then, so a join still in progress is not taken for an empty
        topic."""
        client = await self._connected()
        deadline = time.monotonic() + within
        while client is not None and not client.assignment() and not self._closed:
            if time.monotonic() >= deadline:
                log.warning(
                    "consumer %s holds no partition after %gs; draining anyway", self.group, within
                )
                return
            await asyncio.sleep(0.05)

    def _in_flight(self) -> int:
        return sum(len(o) for o in self.offsets.values())

    async def _connected(self) -> AIOKafkaConsumer | None:
        """The group member, joining when needed (waiting out an outage); None once closed."""
        warned = False
        while self._client is None:
            try:
                self._client = await self._start()
            except BrokerUnavailable as exc:
                if self._closed:
                    return None
                if not warned:
                    log.warning("consumer %s waits for the broker: %s", self.group, exc)
                    warned = True
                await asyncio.sleep(1.0)
        return self._client

    def _due_retry(self) -> KafkaMessage | None:
        if self._retries and self._retries[0][0] <= time.monotonic():
            return heapq.heappop(self._retries)[2]
        return None

    async def _next_records(self, client: AIOKafkaConsumer) -> list[Any]:
        """The next fetched records (each handed out in its partition's offsets), waiting no
        longer than until the next retry is due."""
        wait = 0.5
        if self._retries:
            wait = max(0.0, min(wait, self._retries[0][0] - time.monotonic()))
        if self._in_flight() >= self.max_in_flight:
            await asyncio.sleep(wait)
            return []
        records = []
        for tp, batch in (await self._fetch(client, wait)).items():
            offsets = self.offsets.setdefault(tp, PartitionOffsets())
            for record in batch:
                offsets.handed_out(record.offset)
                records.append(record)
        return records

    async def messages(self) -> AsyncIterator[KafkaMessage]:
        client = await self._connected()
        if client is None:
            return
        try:
            while True:
                due = self._due_retry()
                if due is not None:
                    yield due
                    continue
                records = await self._next_records(client)
                for record in records:
                    yield KafkaMessage(self, record, 1)
                if self._closed and not records and not self._retries:
                    return
        finally:
            self._client = None
            try:
                await client.stop()
            except Exception as exc:  # noqa: BLE001 - closing: report, never raise
                log.debug("stopping the consumer: %s", describe(exc))

    async def _fetch(self, client: AIOKafkaConsumer, wait: float) -> dict[Any, list[Any]]:
        try:
            batches: dict[Any, list[Any]] = await client.getmany(timeout_ms=int(wait * 1000))
        except Exception as exc:
            if not is_broker_error(exc):
                raise
            log.warning("consumer %s: fetching failed, retrying: %s", self.group, describe(exc))
            await asyncio.sleep(1.0)
            return {}
        return batches
