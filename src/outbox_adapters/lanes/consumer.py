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

No message ends the consumer and none is redelivered without end (docs/reliability.md, hostile
input): a message whose handling *failed* (the channel raised, or overran the deadline) for the
``max_failures``-th time is parked instead (kind ``failing``) and acknowledged
(:class:`outbox_core.failures.FailureTally`); a recheck of recipients still in progress and an
outage (``StoreUnavailable``) are no failures. A value the store cannot hold (``StoreDataError``:
a data error, not an outage) parks the event at once (kind ``refused``), and when even parking is
refused the message is acknowledged with a logged reason and counted (``unparkable``). Ids come
bounded from the broker adapters (``outbox_core.untrusted``); every text a log line quotes is
escaped.

"Terminal" means every recipient is sent, parked or was found already done (deduplicated). The
broker redelivers a nak'd event; the channel finds its recipients' rows and reports again.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any, Final

from outbox_adapters.lanes.in_flight import InFlight
from outbox_adapters.lanes.settlement import (
    EVENT_DEADLINE,
    FAILING,
    REFUSED,
    UNDECODABLE,
    Channel,
    ConsumerStats,
    Parked,
    ParkLedger,
    Settlement,
    dlq_message,
    should_ack,
)
from outbox_adapters.lanes.wind_down import STOP_GRACE, wound_down
from outbox_adapters.telemetry.metrics import LaneMetrics
from outbox_adapters.telemetry.tracing import consuming
from outbox_core.brokers import DLQ_REASON
from outbox_core.errors import InvalidPayload, StoreDataError, StoreUnavailable
from outbox_core.events import EventEnvelope, decode_event
from outbox_core.failures import MAX_FAILURES, FailureTally
from outbox_core.outcomes import OutcomeKind
from outbox_core.ports import Consumer, Publisher, ReceivedMessage
from outbox_core.untrusted import printable

__all__ = [
    "DEFAULT_IN_FLIGHT",
    "EVENT_DEADLINE",
    "FAILING",
    "MAX_FAILURES",
    "REFUSED",
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

#: Deliveries a consumer handles at once by default (one key's one after the other).
DEFAULT_IN_FLIGHT: Final = 8


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
        max_failures: int = MAX_FAILURES,
        in_flight: int = DEFAULT_IN_FLIGHT,
        stop_grace: timedelta = STOP_GRACE,
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
        #: How long a stop waits for the broker consumer's cancelled fetch, then for its close.
        self.stop_grace = stop_grace
        #: Failed handlings per message; at ``max_failures`` the message is parked.
        self.failures = FailureTally(max_failures)
        self.stats = ConsumerStats()
        #: The channel's figures (a no-op without OpenTelemetry): its deadline overruns.
        self.metrics = LaneMetrics(channel.name)
        self._stopping = asyncio.Event()
        #: The deliveries being handled (at most ``in_flight``; one key's one after the other).
        self._slots = InFlight(in_flight)
        #: Messages nak'd and not acknowledged since (a drain waits for them).
        self._outstanding: set[str] = set()

    def request_stop(self) -> None:
        """Stop taking deliveries; the event in progress is settled first."""
        self._stopping.set()

    async def run(self, *, drain: bool = False) -> ConsumerStats:
        """Handle deliveries until :meth:`request_stop` or the consumer ends; with ``drain``, also
        stop once every delivered event is acknowledged and nothing arrived for ``drain_idle``.

        Up to ``in_flight`` deliveries are handled at once, those of one event key one after the
        other in the order they arrived (an undecodable body has no key: it waits for nothing).
        A drain first waits for a consumer that has to join a group (its ``ready()``, Kafka's)
        to be given partitions.
        A stop takes no new delivery and settles every one in progress before returning; a broker
        consumer that does not end its cancelled fetch, or its close, within ``stop_grace`` is
        left behind with a warning (:mod:`~outbox_adapters.lanes.wind_down`)."""
        if drain:
            await self._joined()
        messages = aiter(self.consumer.messages())
        stop: asyncio.Future[Any] = asyncio.ensure_future(self._stopping.wait())
        following: asyncio.Future[ReceivedMessage] | None = None
        try:
            while not self._stopping.is_set():
                if following is None:
                    if not await self._slots.taken(stop):
                        break
                    following = asyncio.ensure_future(anext(messages))
                idle = self.drain_idle.total_seconds() if drain else None
                waiting: set[asyncio.Future[Any]] = {following, stop}
                done, _ = await asyncio.wait(
                    waiting, timeout=idle, return_when=asyncio.FIRST_COMPLETED
                )
                if following not in done:
                    if not done and not self._outstanding and not self._slots.busy:
                        break  # drained: everything acknowledged, nothing more arrived
                    continue
                try:
                    message = following.result()
                except StopAsyncIteration:
                    break
                finally:
                    following = None
                decoded = _decoded(message)
                key = decoded.key if isinstance(decoded, EventEnvelope) else None
                self._slots.start(key, self.handle(message, decoded=decoded))
        except asyncio.CancelledError:
            self._slots.cancel()  # cancelled from outside: so are the handlings in progress
            raise
        finally:
            await wound_down(
                channel=self.channel.name,
                stop=stop,
                following=following,
                messages=messages,
                slots=self._slots,
                grace=self.stop_grace,
            )
        return self.stats

    async def _joined(self) -> None:
        """A consumer that joins a group first (Kafka's ``ready()``): wait until it holds
        partitions, so a drain's idle time counts from the join."""
        ready = getattr(self.consumer, "ready", None)
        if ready is not None:
            await ready()

    async def handle(
        self, message: ReceivedMessage, *, decoded: EventEnvelope | InvalidPayload | None = None
    ) -> None:
        """Settle one delivery: ack, or nak with a delay. Never raises for the event's trouble.
        ``decoded``: the body's event (or why it is none) when the caller decoded it already.

        It runs in a CONSUMER span linked to the enqueue whose W3C context the relay put in the
        message's headers (ADR 0028); the rows a channel writes meanwhile carry this span's context.
        """
        with consuming(
            subject=message.subject,
            message_id=message.message_id,
            headers=message.headers,
            group=self.channel.name,
        ):
            await self._handle(message, decoded or _decoded(message))

    async def _handle(
        self, message: ReceivedMessage, decoded: EventEnvelope | InvalidPayload
    ) -> None:
        self.stats.delivered += 1
        delay, failed = await self._attempt(message, decoded)
        if failed and self.failures.failed(message.message_id):
            self.stats.exhausted += 1
            count = self.failures.count(message.message_id)
            why = f"handling failed {count} times; last: {failed}"
            delay = await self._give_up(message, FAILING, why, delay or self.retry_delay)
        await self._finish(message, delay)

    async def _attempt(
        self, message: ReceivedMessage, decoded: EventEnvelope | InvalidPayload
    ) -> tuple[timedelta | None, str]:
        """The per-message guard: whatever the event does, ``None`` (ack) or a nak delay, and
        what failed when this handling counts as a failure (else ``""``)."""
        try:
            async with asyncio.timeout(self.event_deadline.total_seconds()):
                return await self._settle(message, decoded), ""
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
            return (
                self.overrun_delay,
                f"overran its {self.event_deadline.total_seconds():g}s deadline",
            )
        except _NotParked:  # the dead-letter destination unavailable: retried, not counted
            self.stats.dlq_failures += 1
            return self.retry_delay, ""
        except StoreDataError as exc:  # the same on every delivery: park it, never retry it
            self.stats.refused += 1
            return await self._give_up(message, REFUSED, str(exc), self.retry_delay), ""
        except Exception as exc:  # noqa: BLE001 - a channel's failure is this event's, retried
            self.stats.errors += 1
            said = f"{type(exc).__name__}: {printable(str(exc))}"
            _log.warning(
                "channel %s: event %s failed (%s); retried in %gs",
                self.channel.name,
                message.message_id,
                said,
                self.retry_delay.total_seconds(),
            )
            # An outage is retried until it ends; any other failure counts toward the bound.
            return self.retry_delay, "" if isinstance(exc, StoreUnavailable) else said

    async def _give_up(
        self, message: ReceivedMessage, kind: str, why: str, otherwise: timedelta
    ) -> timedelta | None:
        """Park ``message`` as ``kind`` and acknowledge it (``None``); when the park's publish
        fails, nak with ``otherwise``; when the store refuses even the park, acknowledge it with a
        logged reason (counted as ``unparkable``): never a message redelivered without end."""
        parked = Parked(kind, why, attempts=message.deliveries)
        try:
            async with asyncio.timeout(self.event_deadline.total_seconds()):
                await self._park(message, message.message_id, None, (parked,))
        except StoreDataError as exc:
            self.stats.unparkable += 1
            _log.error(
                "channel %s: event %s acknowledged unparked: %s; parking it was refused too (%s)",
                self.channel.name,
                message.message_id,
                printable(why),
                printable(str(exc)),
            )
            return None
        except _NotParked:
            self.stats.dlq_failures += 1
            return otherwise
        except Exception as exc:  # noqa: BLE001 - the DLQ or the ledger unavailable: retried
            self.stats.errors += 1
            _log.warning(
                "channel %s: parking event %s as %s failed (%s: %s); retried",
                self.channel.name,
                message.message_id,
                kind,
                type(exc).__name__,
                printable(str(exc)),
            )
            return otherwise
        return None

    async def _settle(
        self, message: ReceivedMessage, event: EventEnvelope | InvalidPayload
    ) -> timedelta | None:
        """``None`` when the message was acknowledged-worthy; else the nak delay."""
        if isinstance(event, InvalidPayload):
            self.stats.undecodable += 1
            parked = Parked(UNDECODABLE, str(event), attempts=message.deliveries)
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
                    printable(outcome.reason or ""),
                )
                raise _NotParked
            await self.parks.record(
                group,
                event_id,
                item.kind,
                reason=printable(item.reason),  # no NUL nor control character reaches the store
                attempts=item.attempts,
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
                self.failures.settled(message.message_id)
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
                printable(str(exc)),
            )


def _decoded(message: ReceivedMessage) -> EventEnvelope | InvalidPayload:
    """The delivery's event, or why its body is none (decoded once: its key orders the handling,
    the event is what the channel delivers)."""
    try:
        return decode_event(message.body)
    except InvalidPayload as exc:
        return exc
