"""Kafka behind the broker ports (aiokafka).

- **Declaration**: :meth:`KafkaBroker.declare` creates each topic of a
  :class:`~outbox_core.brokers.StreamSpec` and its ``.dlq`` through the admin API (CreateTopics)
  with ``partitions``, the replication factor and ``retention.ms`` = ``max_age``. A topic that exists
  is left as it is. A cluster that does not offer CreateTopics (librdkafka's mock cluster) is a
  :class:`~outbox_core.errors.ConfigurationError` naming the topics to create by hand. Set
  ``auto.create.topics.enable=false`` on the brokers: a client cannot forbid auto-creation.
- **Publish**: an idempotent producer (``enable_idempotence=True``, ``acks="all"``), the record key
  = the partition key (one key, one partition, in order), header ``ce-id`` = the message id.
  ``sent`` only once the send's future resolves (every in-sync replica has it). The idempotent
  producer drops its *own* retries; a replay by another producer (a relay restarted) is stored
  again: Kafka has no id-based de-duplication window, the consumers de-duplicate on ``ce-id``.
- **Consume**: :mod:`.consumer`.
- **DLQ**: listed by reading the ``.dlq`` topic from the beginning without a group (nothing is
  committed, nothing consumed). Kafka cannot delete one record, so a redrive appends a *marker*
  record (header ``outbox-dlq-redriven``, same key, so the same partition, after the parked
  records) once the event is back on its source topic; the listing leaves out every parked record
  followed by a marker of its id. Retention removes both in time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import aiokafka.errors as kafka_errors
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.protocol.admin import CreateTopicsRequest

from outbox_adapters.brokers.errors import BrokerUnavailable, log
from outbox_adapters.brokers.kafka.config import KafkaClientConfig
from outbox_adapters.brokers.kafka.consumer import KafkaConsumer, record_headers
from outbox_adapters.brokers.kafka.errors import describe, operation, publish_outcome
from outbox_core.brokers import (
    DLQ_SOURCE,
    EVENT_ID_HEADER,
    ConsumerLag,
    DeadLetter,
    StreamSpec,
    dlq_subject,
    source_of,
)
from outbox_core.errors import ConfigurationError
from outbox_core.outcomes import Outcome
from outbox_core.ports import BrokerMessage
from outbox_core.untrusted import bounded_id

__all__ = ["REDRIVEN", "KafkaBroker", "KafkaPublisher"]

#: The header of a DLQ marker record: this event id was redriven.
REDRIVEN = "outbox-dlq-redriven"
_DLQ_PREFIX = "outbox-dlq-"
_CREATE_TOPICS = 19  # the Kafka API key of CreateTopics


class KafkaBroker:
    """A Kafka cluster: an idempotent producer, consumer groups, declaration, the DLQ."""

    def __init__(
        self,
        bootstrap: Sequence[str],
        *,
        streams: Sequence[StreamSpec] = (),
        client_id: str = "leased-outbox",
        request_timeout: timedelta = timedelta(seconds=10),
        security: Mapping[str, object] | None = None,
    ) -> None:
        #: What every client of this cluster is given (the consumers' too).
        self.config = KafkaClientConfig(
            bootstrap=",".join(bootstrap),
            client_id=client_id,
            security=security or {},
            request_timeout_ms=int(request_timeout.total_seconds() * 1000),
        )
        self._pending = list(streams)
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()

    @property
    def bootstrap(self) -> str:
        """The bootstrap servers, comma-separated."""
        return self.config.bootstrap

    @property
    def security(self) -> Mapping[str, object]:
        """aiokafka's TLS/SASL keywords (``BrokerUrl.kafka_security``), given to every client."""
        return self.config.security

    async def producer(self) -> AIOKafkaProducer:
        """The started producer (declaring ``streams`` first, on first use)."""
        async with self._lock:
            while self._pending:
                try:
                    await self.declare(self._pending[0])
                except ConfigurationError as exc:  # a cluster without CreateTopics
                    log.warning("%s", exc)
                self._pending.pop(0)
            if self._producer is None:
                producer = AIOKafkaProducer(
                    **self.config.client_options(),
                    acks="all",
                    enable_idempotence=True,
                    linger_ms=0,
                )
                try:
                    async with operation(f"connecting to Kafka at {self.bootstrap}"):
                        await producer.start()
                except BaseException:  # an outage, or cancelled (a budget): close what it opened
                    await producer.stop()
                    raise
                self._producer = producer
            return self._producer

    def publisher(self) -> KafkaPublisher:
        return KafkaPublisher(self)

    def consumer(self, group: str, subjects: Sequence[str]) -> KafkaConsumer:
        return KafkaConsumer(self.config, group, tuple(subjects))

    async def declare(self, spec: StreamSpec) -> None:
        admin = AIOKafkaAdminClient(**self.config.client_options())
        topics = (*spec.subjects, *spec.dlq_subjects)
        async with operation(f"declaring Kafka topics {', '.join(topics)}"):
            await admin.start()
            try:
                await self._create(admin, spec, topics)
            finally:
                await admin.close()

    async def _create(
        self, admin: AIOKafkaAdminClient, spec: StreamSpec, topics: tuple[str, ...]
    ) -> None:
        client = admin._client  # noqa: SLF001 - aiokafka has no public "ready/any node" call
        brokers = client.cluster.brokers()
        node = next(iter(brokers)).nodeId
        await client.ready(node)
        versions = client._conns[(node, 0)]._versions  # noqa: SLF001
        retention = str(int(spec.max_age.total_seconds() * 1000))
        if _CREATE_TOPICS not in versions:
            raise ConfigurationError(
                f"the Kafka cluster at {self.bootstrap} does not offer CreateTopics: create the"
                f" topics {', '.join(topics)} yourself ({spec.partitions} partitions,"
                f" retention.ms={retention})"
            )
        replicas = min(spec.replicas, len(brokers))
        new = [
            NewTopic(t, spec.partitions, replicas, topic_configs={"retention.ms": retention})
            for t in topics
        ]
        if client.cluster.controller is None:
            # No controller in the metadata (KRaft forwards CreateTopics from any broker).
            request = admin._convert_new_topic_request  # noqa: SLF001
            response = await admin._send_request_to_node(  # noqa: SLF001
                node,
                CreateTopicsRequest(
                    create_topic_requests=[request(t) for t in new],
                    timeout=self.config.request_timeout_ms,
                    validate_only=False,
                ),
            )
        else:
            response = await admin.create_topics(new)
        for topic, code, *rest in response.topic_errors:
            error = kafka_errors.for_code(code)
            if code and error is not kafka_errors.TopicAlreadyExistsError:
                raise error(f"creating topic {topic}: {rest[0] if rest else ''}")

    def _reader(self) -> AIOKafkaConsumer:
        """A consumer outside any group (reads positions and records, commits nothing)."""
        return AIOKafkaConsumer(
            **self.config.client_options(), group_id=None, enable_auto_commit=False
        )

    async def dead_letters(self, topic: str, *, limit: int = 100) -> list[DeadLetter]:
        return [letter for letter, _, _ in await self._parked(dlq_subject(topic))][:limit]

    async def _parked(self, dlq: str) -> list[tuple[DeadLetter, bytes, bytes | None]]:
        """Every parked record of ``dlq`` not redriven since, oldest first per partition."""
        reader = self._reader()
        parked: dict[str, list[tuple[DeadLetter, bytes, bytes | None]]] = {}
        producer = await self.producer()
        async with operation(f"listing {dlq}"):
            partitions = await producer.partitions_for(dlq)
            await reader.start()
            try:
                assigned = [TopicPartition(dlq, p) for p in sorted(partitions)]
                remaining = set()
                if assigned:
                    reader.assign(assigned)
                    await reader.seek_to_beginning(*assigned)
                    ends = await reader.end_offsets(assigned)
                    remaining = {tp for tp in assigned if ends[tp] > 0}
                while remaining:
                    batches = await reader.getmany(*remaining, timeout_ms=1000)
                    for tp, records in batches.items():
                        for record in records:
                            self._read(dlq, record, parked)
                        if records and records[-1].offset + 1 >= ends[tp]:
                            remaining.discard(tp)
            finally:
                await reader.stop()
        letters = [entry for entries in parked.values() for entry in entries]
        return sorted(letters, key=lambda e: e[0].time)

    @staticmethod
    def _read(dlq: str, record: Any, parked: dict[str, list[Any]]) -> None:  # noqa: ANN401
        headers = record_headers(record)  # a null or binary header value never raises
        if REDRIVEN in headers:
            parked.pop(bounded_id(headers[REDRIVEN]), None)
            return
        position = f"{record.partition}:{record.offset}"
        message_id = bounded_id(headers.get(EVENT_ID_HEADER) or position)
        letter = DeadLetter(
            message_id=message_id,
            subject=dlq,
            source=headers.get(DLQ_SOURCE) or source_of(dlq),
            headers=headers,
            size=len(record.value or b""),
            time=datetime.fromtimestamp(record.timestamp / 1000, UTC),
            position=position,
        )
        parked.setdefault(message_id, []).append((letter, record.value or b"", record.key))

    async def redrive(self, topic: str, ids: Sequence[str] | None = None) -> int:
        dlq = dlq_subject(topic)
        wanted = None if ids is None else set(ids)
        producer = await self.producer()
        done: set[str] = set()
        for letter, body, key in await self._parked(dlq):
            if (
                wanted is not None and letter.message_id not in wanted
            ) or letter.message_id in done:
                continue
            headers = [
                (k, v.encode()) for k, v in letter.headers.items() if not k.startswith(_DLQ_PREFIX)
            ]
            async with operation(f"redriving {letter.message_id} from {dlq}"):
                await (await producer.send(letter.source, body, key=key, headers=headers))
                marker = [(REDRIVEN, letter.message_id.encode())]
                await (await producer.send(dlq, b"", key=key, headers=marker))
            done.add(letter.message_id)
        return len(done)

    async def lag(self, group: str, subject: str) -> ConsumerLag:
        """The end offsets of ``subject``'s partitions minus ``group``'s committed offsets (a
        partition it never committed counts from its first offset, as the channels start there)."""
        admin = AIOKafkaAdminClient(**self.config.client_options())
        reader = self._reader()
        producer = await self.producer()
        async with operation(f"reading the lag of {group} on {subject}"):
            partitions = [
                TopicPartition(subject, p) for p in sorted(await producer.partitions_for(subject))
            ]
            await admin.start()
            try:
                offsets = await admin.list_consumer_group_offsets(group, partitions=partitions)
            finally:
                await admin.close()
            await reader.start()
            try:
                ends = await reader.end_offsets(partitions)
                firsts = await reader.beginning_offsets(partitions)
            finally:
                await reader.stop()
        committed = {
            tp: meta.offset
            for tp, meta in offsets.items()
            if tp.topic == subject and meta.offset >= 0
        }
        if not committed:
            return ConsumerLag(group, subject, waiting=None)
        waiting = sum(max(0, ends[tp] - committed.get(tp, firsts[tp])) for tp in partitions)
        return ConsumerLag(group, subject, waiting=waiting)

    async def aclose(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                await producer.stop()
            except Exception as exc:  # noqa: BLE001 - closing: report, never raise
                log.warning("closing the Kafka producer: %s", describe(exc))


class KafkaPublisher:
    """``ports.Publisher`` on Kafka: ``sent`` only once the send's future resolves (acks=all)."""

    def __init__(self, broker: KafkaBroker) -> None:
        self.broker = broker

    async def publish(self, message: BrokerMessage, *, budget: timedelta) -> Outcome:
        headers = {EVENT_ID_HEADER: message.message_id, **message.headers}
        connected = False
        try:
            async with asyncio.timeout(budget.total_seconds()):
                producer = await self.broker.producer()
                connected = True
                delivery = await producer.send(
                    message.subject,
                    message.body,
                    key=message.key.encode("utf-8"),
                    headers=[(k, v.encode("utf-8")) for k, v in headers.items()],
                )
                await delivery
        except BrokerUnavailable as exc:
            return Outcome.transient(str(exc))
        except Exception as exc:
            outcome = publish_outcome(exc, message.subject, sending=connected)
            if outcome is None:
                raise
            return outcome
        return Outcome.sent()
