"""What every broker adapter shares: the stream/topic declaration, the dead-letter conventions,
and the ``Broker`` protocol (ADR 0019).

Pure values and rules: the adapters (``outbox_adapters.brokers`` for NATS JetStream and Kafka,
``outbox_adapters.memory.MemoryBroker`` for tests) do the I/O.

Dead-letter queue (DLQ) convention: an event a consumer group gives up on is parked, as its raw
body, on ``<topic>.dlq`` with the headers below; an operator lists the DLQ without consuming it and
redrives chosen events back to their source subject, which removes them from the listing.
:func:`park_message` builds the parking publish so every channel writes the same headers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Final, Protocol, runtime_checkable

import attrs

from outbox_core.errors import ConfigurationError
from outbox_core.ports import BrokerMessage, Consumer, Publisher

__all__ = [
    "DEFAULT_DUPLICATE_WINDOW",
    "DEFAULT_MAX_AGE",
    "DLQ_ATTEMPTS",
    "DLQ_GROUP",
    "DLQ_KIND",
    "DLQ_REASON",
    "DLQ_SOURCE",
    "DLQ_SUFFIX",
    "EVENT_ID_HEADER",
    "Broker",
    "ConsumerLag",
    "DeadLetter",
    "StreamSpec",
    "dlq_subject",
    "park_message",
    "source_of",
]

#: How long a stream keeps an event: events carry personal data (an admin's e-mail address), so
#: the default is short, a week, enough to outlive any outage a consumer is expected to catch up on.
DEFAULT_MAX_AGE: Final = timedelta(days=7)
#: How long the broker remembers a message id to drop a replayed publish (JetStream's default).
DEFAULT_DUPLICATE_WINDOW: Final = timedelta(minutes=2)

DLQ_SUFFIX: Final = ".dlq"
#: The CloudEvents binding header carrying the event id (Kafka; NATS keeps it too).
EVENT_ID_HEADER: Final = "ce-id"
DLQ_KIND: Final = "outbox-dlq-kind"
DLQ_REASON: Final = "outbox-dlq-reason"
DLQ_ATTEMPTS: Final = "outbox-dlq-attempts"
DLQ_GROUP: Final = "outbox-dlq-group"
DLQ_SOURCE: Final = "outbox-dlq-source"
_DLQ_HEADERS: Final = (DLQ_KIND, DLQ_REASON, DLQ_ATTEMPTS, DLQ_GROUP, DLQ_SOURCE)

# Stream names: NATS refuses '.', '*', '>' and spaces in them; Kafka topic names allow '.', '_',
# '-'. Subjects and topics: dotted names without wildcards (a wildcard would swallow the DLQ).
_STREAM_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,100}")
_SUBJECT: Final = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")
_MAX_SUBJECT: Final = 200
_MAX_REASON: Final = 300


def dlq_subject(topic: str) -> str:
    """The DLQ of ``topic`` (``platform-events`` → ``platform-events.dlq``); a DLQ name as is."""
    return topic if topic.endswith(DLQ_SUFFIX) else topic + DLQ_SUFFIX


def source_of(dlq: str) -> str:
    """The source topic a DLQ belongs to (``platform-events.dlq`` → ``platform-events``)."""
    return dlq.removesuffix(DLQ_SUFFIX)


def _subjects(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        subjects: tuple[object, ...] = (value,)
    elif isinstance(value, list | tuple):
        subjects = tuple(value)
    else:
        raise ConfigurationError(f"stream subjects must be a list of names, got {value!r:.80}")
    if not subjects:
        raise ConfigurationError("a stream needs at least one subject")
    for subject in subjects:
        if (
            not isinstance(subject, str)
            or len(subject) > _MAX_SUBJECT
            or not _SUBJECT.fullmatch(subject)
            or subject.endswith(DLQ_SUFFIX)
        ):
            raise ConfigurationError(
                f"stream subject {subject!r:.80} must be a dotted name of letters, digits, '_' and '-'"
                " without wildcards, not ending in '.dlq' (each subject's DLQ is declared with it)"
            )
    return tuple(str(s) for s in subjects)


def _check_spec(inst: StreamSpec, _attribute: object, _value: object) -> None:
    if not isinstance(inst.name, str) or not _STREAM_NAME.fullmatch(inst.name):
        raise ConfigurationError(
            f"stream name {inst.name!r} must be 1 to 100 letters, digits, '_' or '-'"
        )
    for what, value in (("max_age", inst.max_age), ("duplicate_window", inst.duplicate_window)):
        if not isinstance(value, timedelta) or value <= timedelta(0):
            raise ConfigurationError(f"stream {inst.name} {what} must be a duration above 0s")
    if inst.duplicate_window > inst.max_age:
        raise ConfigurationError(
            f"stream {inst.name} duplicate_window ({inst.duplicate_window}) must not exceed its"
            f" max_age ({inst.max_age})"
        )
    if not isinstance(inst.partitions, int) or not 1 <= inst.partitions <= 1000:
        raise ConfigurationError(f"stream {inst.name} partitions must be 1 to 1000")
    if not isinstance(inst.replicas, int) or not 1 <= inst.replicas <= 5:
        raise ConfigurationError(f"stream {inst.name} replicas must be 1 to 5")


@attrs.frozen
class StreamSpec:
    """A stream (NATS JetStream) or a set of topics (Kafka), declared explicitly by the library:
    brokers are never left to auto-create them. Each subject's DLQ (``<subject>.dlq``) is declared
    with it, under the same limits."""

    #: The JetStream stream name (the DLQ stream is ``<name>-dlq``); unused by Kafka.
    name: str
    #: The subjects (NATS) or topics (Kafka) it stores.
    subjects: tuple[str, ...] = attrs.field(converter=_subjects)
    #: How long a message is kept (JetStream ``max_age``, Kafka ``retention.ms``).
    max_age: timedelta = DEFAULT_MAX_AGE
    #: How long a message id is remembered to drop a replay (JetStream only: Kafka has no such
    #: window, its idempotent producer de-duplicates one producer's retries only).
    duplicate_window: timedelta = DEFAULT_DUPLICATE_WINDOW
    #: Kafka partitions per topic (events of one key always go to one partition).
    partitions: int = 6
    #: Copies kept (JetStream replicas, Kafka replication factor), capped by the cluster's size.
    replicas: int = attrs.field(default=1, validator=_check_spec)

    @property
    def dlq_subjects(self) -> tuple[str, ...]:
        return tuple(dlq_subject(s) for s in self.subjects)


@attrs.frozen
class DeadLetter:
    """One parked event, as an operator's listing shows it (never its body: only its size)."""

    #: The event id (``ce-id``).
    message_id: str
    #: The DLQ it sits on (``platform-events.dlq``).
    subject: str
    #: Where a redrive puts it back (``outbox-dlq-source``, else the DLQ's source topic).
    source: str
    headers: Mapping[str, str]
    #: The raw body's size in bytes.
    size: int
    #: When it was parked (the broker's timestamp).
    time: datetime
    #: The broker's position of it (NATS stream sequence; Kafka ``partition:offset``).
    position: str = ""

    @property
    def kind(self) -> str:
        return self.headers.get(DLQ_KIND, "")

    @property
    def reason(self) -> str:
        return self.headers.get(DLQ_REASON, "")

    @property
    def group(self) -> str:
        return self.headers.get(DLQ_GROUP, "")

    @property
    def attempts(self) -> int | None:
        text = self.headers.get(DLQ_ATTEMPTS, "")
        return int(text) if text.isdigit() else None


def _one_line(text: str) -> str:
    flat = "".join(c if c.isprintable() else " " for c in text).strip()
    return flat if len(flat) <= _MAX_REASON else flat[: _MAX_REASON - 1] + "…"


def park_message(  # noqa: PLR0913 - the plan's five headers, each named
    *,
    source: str,
    key: str,
    event_id: str,
    body: bytes,
    headers: Mapping[str, str],
    group: str,
    kind: str,
    reason: str,
    attempts: int,
) -> BrokerMessage:
    """The publish that parks the raw event ``body`` (received on ``source``) on its DLQ.

    Its broker message id is ``<event id>/<group>/<kind>``: two recipients of one event parked
    by two groups (or two kinds) are two DLQ entries, not one dropped as a replay. ``ce-id`` stays
    the event id. The original headers are kept, minus any earlier DLQ headers."""
    kept = {k: v for k, v in headers.items() if k.lower() not in _DLQ_HEADERS}
    kept.update(
        {
            EVENT_ID_HEADER: event_id,
            DLQ_KIND: _one_line(kind) or "event",
            DLQ_REASON: _one_line(reason) or "unspecified",
            DLQ_ATTEMPTS: str(attempts),
            DLQ_GROUP: _one_line(group),
            DLQ_SOURCE: source_of(source),
        }
    )
    return BrokerMessage(
        subject=dlq_subject(source_of(source)),
        key=key,
        message_id=f"{event_id}/{group}/{kind or 'event'}",
        body=body,
        headers=kept,
    )


@attrs.frozen
class ConsumerLag:
    """How far one consumer group is behind on one subject, as the broker counts it (``outbox
    top --broker``): the consumer channels' backlog lives in the broker, not in a table."""

    group: str
    subject: str
    #: Messages of the subject the group has not been handed yet (None: the group is unknown).
    waiting: int | None
    #: Handed out and not acknowledged yet (None where the broker has no such count: Kafka
    #: commits offsets, it does not acknowledge messages one by one).
    unacknowledged: int | None = None

    @property
    def known(self) -> bool:
        """Whether the broker knows the group on this subject (it has consumed or committed)."""
        return self.waiting is not None


@runtime_checkable
class Broker(Protocol):
    """A broker connection: publishers, consumer groups, explicit declaration, the DLQ."""

    def publisher(self) -> Publisher: ...

    def consumer(self, group: str, subjects: Sequence[str]) -> Consumer: ...

    async def declare(self, spec: StreamSpec) -> None:
        """Create or update the stream/topics of ``spec`` and their DLQs (idempotent)."""
        ...

    async def dead_letters(self, topic: str, *, limit: int = 100) -> list[DeadLetter]:
        """The parked events of ``topic``'s DLQ (``topic`` or ``topic.dlq``), oldest first,
        without consuming them."""
        ...

    async def redrive(self, topic: str, ids: Sequence[str] | None = None) -> int:
        """Put the parked events ``ids`` (all when ``None``) back on their source subject, once
        per event id, and remove them from the DLQ; how many events were redriven."""
        ...

    async def lag(self, group: str, subject: str) -> ConsumerLag:
        """How far ``group`` is behind on ``subject`` (``waiting`` None: the group is unknown
        there)."""
        ...

    async def aclose(self) -> None: ...
