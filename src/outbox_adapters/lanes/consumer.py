"""The consumer machinery every channel shares (ADR 0021): decode, deliver under a deadline, park on
the dead-letter destination, and acknowledge only when every recipient is terminal.

A :class:`Channel` turns one event into its recipients' deliveries and says where they stand (a
:class:`Settlement`); :class:`ChannelConsumer` does the rest, the same for the library's e-mail and
in-app channels and for a host's own channel::

    delivery ──► decode_event ── undecodable ──► park the raw body (kind "undecodable") ──► ack
                     │
                     ▼          (the whole step under the per-event deadline, 60 s)
             channel.deliver(event) ──► Settlement(terminal, parked, retry_after)
                     │
                     ├── each parked kind not parked before: publish the RAW event to
                     │   <subject>.dlq with outbox-dlq-* headers, then record it in the ledger
                     │   (a publish that fails: nak, retried; never ack an unparked event)
                     ├── terminal ──► ack
                     └── otherwise ──► nak(delay = what the channel asks)

    deadline overrun ──► nak(overrun_delay)      an error (database down, ...) ──► nak(retry_delay)

"Terminal" means every recipient is sent, parked or was found already done (deduplicated). The
broker redelivers a nak'd event; the channel finds its recipients' rows and reports again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta
from typing import Any, Final, Protocol

import attrs

from outbox_adapters.telemetry.metrics import LaneMetrics
from outbox_adapters.telemetry.tracing import consuming
from outbox_core.brokers import DLQ_REASON, park_message
from outbox_core.errors import InvalidPayload
from outbox_core.events import EventEnvelope, decode_event
from outbox_core.mail import clean_line
from outbox_core.outcomes import OutcomeKind
from outbox_core.ports import BrokerMessage, Consumer, Publisher, ReceivedMessage

__all__ = [
    "EVENT_DEADLINE",
    "UNDECODABLE",
    "Channel",
    "ChannelConsumer",
    "ConsumerStats",
    "ParkLedger",
    "Parked",
    "Settlement",
    "dlq_message",
    "should_ack",
]

_log = logging.getLogger("outbox_adapters.lanes.consumer")

#: The kind under which a message that is no event is parked.
UNDECODABLE: Final = "undecodable"
#: Each event is processed within this long (deliver + parking), else nak'd and retried.
EVENT_DEADLINE: Final = timedelta(seconds=60)
#: Longest reason written to a DLQ header.
_MAX_REASON: Final = 500


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


class _NotParked(Exception):
    """A dead-letter publish failed: the event must not be acknowledged."""


class ChannelConsumer:
    """Runs one :class:`Channel` over one broker consumer. See the module docstring."""

    def __init__(  # noqa: PLR0913 - keyword-only knobs, each with a default
        self,
        consumer: Consumer,
        channel: Channel,
        *,
        dlq: Publisher,
        parks: ParkLedger,
        event_deadline: timedelta = EVENT_DEADLINE,
        retry_delay: timedelta = timedelta(seconds=5),
        overrun_delay: timedelta = timedelta(seconds=10),
        publish_budget: timedelta = timedelta(seconds=5),
        drain_idle: timedelta = timedelta(seconds=1),
    ) -> None:
        self.consumer = consumer
        self.channel = channel
        self.dlq = dlq
        self.parks = parks
        self.event_deadline = event_deadline
        self.retry_delay = retry_delay
        self.overrun_delay = overrun_delay
        self.publish_budget = publish_budget
        self.drain_idle = drain_idle
        self.stats = ConsumerStats()
        #: The channel's figures (a no-op without OpenTelemetry): its deadline overruns.
        self.metrics = LaneMetrics(channel.name)
        self._stopping = asyncio.Event()
        #: Messages nak'd and not acknowledged since (a drain waits for them).
        self._outstanding: set[str] = set()

    def request_stop(self) -> None:
        """Stop taking deliveries; the event in progress is settled first."""
        self._stopping.set()

    async def run(self, *, drain: bool = False) -> ConsumerStats:
        """Handle deliveries until :meth:`request_stop` or the consumer ends; with ``drain``, also
        stop once every delivered event is acknowledged and nothing arrived for ``drain_idle``."""
        messages = aiter(self.consumer.messages())
        stop: asyncio.Future[Any] = asyncio.ensure_future(self._stopping.wait())
        following: asyncio.Future[ReceivedMessage] | None = None
        try:
            while not self._stopping.is_set():
                if following is None:
                    following = asyncio.ensure_future(anext(messages))
                idle = self.drain_idle.total_seconds() if drain else None
                waiting: set[asyncio.Future[Any]] = {following, stop}
                done, _ = await asyncio.wait(
                    waiting, timeout=idle, return_when=asyncio.FIRST_COMPLETED
                )
                if following not in done:
                    if not done and not self._outstanding:
                        break  # drained: everything acknowledged, nothing more arrived
                    continue
                try:
                    message = following.result()
                except StopAsyncIteration:
                    break
                finally:
                    following = None
                await self.handle(message)
        finally:
            stop.cancel()
            if following is not None:
                following.cancel()
                with contextlib.suppress(BaseException):
                    await following
            closer = getattr(messages, "aclose", None)
            if closer is not None:
                with contextlib.suppress(Exception):
                    await closer()
        return self.stats

    async def handle(self, message: ReceivedMessage) -> None:
        """Settle one delivery: ack, or nak with a delay. Never raises for the event's trouble.

        It runs in a CONSUMER span linked to the enqueue whose W3C context the relay put in the
        message's headers (ADR 0028); the rows a channel writes meanwhile carry this span's context.
        """
        with consuming(
            subject=message.subject,
            message_id=message.message_id,
            headers=message.headers,
            group=self.channel.name,
        ):
            await self._handle(message)

    async def _handle(self, message: ReceivedMessage) -> None:
        self.stats.delivered += 1
        try:
            async with asyncio.timeout(self.event_deadline.total_seconds()):
                delay = await self._settle(message)
        except TimeoutError:
            self.stats.overruns += 1
            self.metrics.overran()
            _log.warning(
                "channel %s: event %s overran its %gs deadline; retried in %gs",
                self.channel.name,
                message.message_id,
                self.event_deadline.total_seconds(),
                self.overrun_delay.total_seconds(),
            )
            delay = self.overrun_delay
        except _NotParked:
            self.stats.dlq_failures += 1
            delay = self.retry_delay
        except Exception as exc:  # noqa: BLE001 - a channel's failure is this event's, retried
            self.stats.errors += 1
            _log.warning(
                "channel %s: event %s failed (%s: %s); retried in %gs",
                self.channel.name,
                message.message_id,
                type(exc).__name__,
                exc,
                self.retry_delay.total_seconds(),
            )
            delay = self.retry_delay
        await self._finish(message, delay)

    async def _settle(self, message: ReceivedMessage) -> timedelta | None:
        """``None`` when the message was acknowledged-worthy; else the nak delay."""
        try:
            event = decode_event(message.body)
        except InvalidPayload as exc:
            self.stats.undecodable += 1
            parked = Parked(UNDECODABLE, str(exc), attempts=message.deliveries)
            await self._park(message, message.message_id, None, (parked,))
            return None
        settlement = await self.channel.deliver(event, message)
        await self._park(message, event.id, event.key, settlement.parked)
        if should_ack(settlement):
            return None
        return settlement.retry_after or self.retry_delay

    async def _park(
        self,
        message: ReceivedMessage,
        event_id: str,
        key: str | None,
        parked: tuple[Parked, ...],
    ) -> None:
        if not parked:
            return
        group = self.channel.name
        already = await self.parks.parked(group, event_id)
        for item in parked:
            if item.kind in already:
                continue
            dead = dlq_message(message, group=group, parked=item, key=key)
            outcome = await self.dlq.publish(dead, budget=self.publish_budget)
            if outcome.kind is not OutcomeKind.SENT:
                _log.warning(
                    "channel %s: parking %s of event %s on %s failed (%s); retried",
                    group,
                    item.kind,
                    event_id,
                    dead.subject,
                    outcome.reason,
                )
                raise _NotParked
            await self.parks.record(
                group, event_id, item.kind, reason=item.reason, attempts=item.attempts
            )
            self.stats.parked += 1
            _log.warning(
                "channel %s: parked %s of event %s on %s after %d attempt(s): %s",
                group,
                item.kind,
                event_id,
                dead.subject,
                item.attempts,
                dead.headers[DLQ_REASON],
            )

    async def _finish(self, message: ReceivedMessage, delay: timedelta | None) -> None:
        try:
            if delay is None:
                await message.ack()
                self.stats.acked += 1
                self._outstanding.discard(message.message_id)
            else:
                await message.nak(delay=delay)
                self.stats.naked += 1
                self._outstanding.add(message.message_id)
        except Exception as exc:  # noqa: BLE001 - the broker redelivers an unsettled message
            self.stats.errors += 1
            self._outstanding.add(message.message_id)
            _log.warning(
                "channel %s: settling event %s failed (%s: %s); the broker will redeliver it",
                self.channel.name,
                message.message_id,
                type(exc).__name__,
                exc,
            )
