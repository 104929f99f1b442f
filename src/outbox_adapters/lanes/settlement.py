"""What a consumer channel and :class:`~outbox_adapters.lanes.consumer.ChannelConsumer` exchange
(ADR 0021): the :class:`Channel` and :class:`ParkLedger` protocols, a channel's :class:`Settlement`
of one event and the kinds it parks (:class:`Parked`), the ack rule (:func:`should_ack`), the
dead-letter publish of a park (:func:`dlq_message`) and the consumer's counters
(:class:`ConsumerStats`). ``outbox_adapters.lanes.consumer`` re-exports every name.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final, Protocol

import attrs

from outbox_core.brokers import park_message
from outbox_core.events import EventEnvelope
from outbox_core.mail import clean_line
from outbox_core.ports import BrokerMessage, ReceivedMessage

__all__ = [
    "EVENT_DEADLINE",
    "FAILING",
    "REFUSED",
    "UNDECODABLE",
    "Channel",
    "ConsumerStats",
    "ParkLedger",
    "Parked",
    "Settlement",
    "dlq_message",
    "should_ack",
]

#: The kind under which a message that is no event is parked.
UNDECODABLE: Final = "undecodable"
#: The kind under which an event whose handling failed ``max_failures`` times is parked.
FAILING: Final = "failing"
#: The kind under which an event holding a value the store cannot hold is parked.
REFUSED: Final = "refused"
#: Each event is processed within this long (deliver + parking), else nak'd and retried.
EVENT_DEADLINE: Final = timedelta(seconds=60)


@attrs.frozen
class Parked:
    """One recipient kind to park on the dead-letter destination."""

    kind: str
    reason: str
    #: Delivery attempts made for it (0: refused before any attempt, e.g. an invalid address).
    attempts: int = 0


@attrs.frozen
class Settlement:
    """Where one event's recipients stand after :meth:`Channel.deliver`."""

    #: Every recipient is sent, parked or was already done: the event may be acknowledged.
    terminal: bool
    #: Recipients that will never be delivered: the machinery parks each (once per kind).
    parked: tuple[Parked, ...] = ()
    #: When not terminal: redeliver after this long (None: the consumer's ``retry_delay``).
    retry_after: timedelta | None = None

    @classmethod
    def done(cls, *parked: Parked) -> Settlement:
        """Every recipient terminal (``parked`` among them)."""
        return cls(terminal=True, parked=parked)

    @classmethod
    def later(cls, retry_after: timedelta | None, *parked: Parked) -> Settlement:
        """Some recipient still in progress: look again after ``retry_after``."""
        return cls(terminal=False, parked=parked, retry_after=retry_after)


class Channel(Protocol):
    """What a channel does with one event. ``name`` is its consumer group."""

    @property
    def name(self) -> str: ...

    async def deliver(self, event: EventEnvelope, message: ReceivedMessage) -> Settlement: ...


class ParkLedger(Protocol):
    """Which kinds of which event a channel has parked (``postgres.channels.PostgresParkLedger``)."""

    async def parked(self, channel: str, event_id: str) -> frozenset[str]: ...

    async def record(
        self, channel: str, event_id: str, kind: str, *, reason: str, attempts: int
    ) -> None: ...


def should_ack(settlement: Settlement) -> bool:
    """Acknowledge only when every recipient is terminal."""
    return settlement.terminal


def dlq_message(
    message: ReceivedMessage, *, group: str, parked: Parked, key: str | None = None
) -> BrokerMessage:
    """The dead-letter message for ``parked``: the RAW body on ``<subject>.dlq`` with the
    ``outbox-dlq-*`` headers (:func:`outbox_core.brokers.park_message`, the one definition of a
    park: its message id is unique per (event, group, kind), so a repeated park is dropped by a
    de-duplicating broker and two kinds are two entries)."""
    return park_message(
        source=message.subject,
        key=key or message.message_id,
        event_id=message.message_id,
        body=bytes(message.body),
        headers=message.headers,
        group=group,
        kind=parked.kind,
        reason=clean_line(parked.reason) or "no reason given",
        attempts=parked.attempts,
    )


@attrs.define
class ConsumerStats:
    """What a :class:`ChannelConsumer` did."""

    delivered: int = 0
    acked: int = 0
    naked: int = 0
    #: Kinds published to the dead-letter destination (undecodable messages included).
    parked: int = 0
    undecodable: int = 0
    #: Events that overran the per-event deadline.
    overruns: int = 0
    #: Dead-letter publishes that failed (the event was nak'd).
    dlq_failures: int = 0
    #: Channel or broker errors (the event was nak'd when it could be).
    errors: int = 0
    #: Events parked at their ``max_failures``-th failed handling (kind ``failing``).
    exhausted: int = 0
    #: Events whose values the store refused (``StoreDataError``).
    refused: int = 0
    #: Messages acknowledged without a park: even parking them was refused (reason logged).
    unparkable: int = 0
