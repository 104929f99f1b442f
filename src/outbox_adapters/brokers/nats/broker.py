"""NATS JetStream behind the broker ports (nats-py).

- **Declaration**: :meth:`NatsBroker.declare` creates (or updates) a file-backed stream per
  :class:`~outbox_core.brokers.StreamSpec` with its subjects, ``max_age`` and duplicate window, and
  a companion stream ``<name>-dlq`` for the subjects' DLQs. Streams are never auto-created: a
  publish to a subject no stream stores is a transient failure naming the missing declaration.
- **Publish**: ``Nats-Msg-Id`` = the message id; ``sent`` only on a PubAck (JetStream stored it,
  or had stored it: a duplicate PubAck within the window is sent too).
- **Consume**: one durable pull consumer per (group, subject), explicit ack, ``nak(delay)``; the
  delivery count is JetStream's (``num_delivered``), so it survives restarts. A message not acked
  within ``ack_wait`` (a crashed consumer) is redelivered.
- **DLQ**: listed with the stream's direct message reads (no consumer: listing consumes nothing),
  redriven by a publish to the source subject under a new ``Nats-Msg-Id`` (the original id may still
  be in the duplicate window) followed by deleting the parked copies.

The connection is made on first use and re-made by nats-py after a loss, so a relay starts while the
broker is down and its publishes report ``transient`` until it is back.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import attrs
import nats
import nats.errors
import nats.js
import nats.js.errors
from nats.aio.client import Client
from nats.js import api

from outbox_adapters.brokers.errors import BrokerUnavailable, log
from outbox_adapters.brokers.nats.consumer import (
    MSG_ID,
    NatsConsumer,
    NatsMessage,
    _public_headers,
    durable_name,
    header_value,
)
from outbox_adapters.brokers.nats.errors import describe, operation, publish_outcome
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

__all__ = ["NatsBroker", "NatsConsumer", "NatsMessage", "NatsPublisher"]

_DLQ_PREFIX = "outbox-dlq-"
#: How many distinct connection errors an outcome quotes.
_KEPT_ERRORS: Final = 3
_RECONNECTS = 3
#: At most one "NATS connection error" warning this often; the others are counted.
CONNECTION_WARNING_EVERY: Final = 30.0
#: The outcome of every acknowledged publish (frozen: one value shared, not one built per event).
_SENT: Final = Outcome.sent()


class NatsBroker:
    """A JetStream connection: publishers, durable consumer groups, declaration, the DLQ."""

    def __init__(  # noqa: PLR0913 - keyword-only connection settings
        self,
        servers: Sequence[str],
        *,
        streams: Sequence[StreamSpec] = (),
        ack_wait: timedelta = timedelta(minutes=2),
        connect_timeout: float = 2.0,
        request_timeout: float = 5.0,
        tls: ssl.SSLContext | None = None,
        user: str | None = None,
        password: str | None = None,
    ) -> None:
        self.servers = list(servers)
        #: The TLS context for ``tls://`` servers (None: plaintext ``nats://``).
        self.tls = tls
        self._credentials = {"user": user, "password": password} if user is not None else {}
        #: What the current connection attempts were refused with, each once, in order (a TLS or
        #: authorization refusal reaches nats-py's error callback, not the exception its connect
        #: finally raises).
        self.connection_errors: list[str] = []
        self.ack_wait = ack_wait
        #: Connection errors seen (nats-py reports one per reconnect attempt, every 0.5 s while
        #: the server is unreachable); a warning is logged at most every
        #: :data:`CONNECTION_WARNING_EVERY` seconds and says how many it stands for.
        self.connection_error_count = 0
        self._warned_at: float | None = None
        self._unwarned = 0
        self._pending = list(streams)
        self._connect_timeout = connect_timeout
        self._request_timeout = request_timeout
        self._client: Client | None = None
        #: The JetStream context of ``_client`` (one per connection: it holds the asynchronous
        #: publishes' reply subscription).
        self._js: nats.js.JetStreamContext | None = None
        self._lock = asyncio.Lock()

    async def jetstream(self) -> nats.js.JetStreamContext:
        """The JetStream context, connecting (and declaring ``streams``) on first use."""
        async with self._lock:
            if self._client is None or self._client.is_closed:
                self.connection_errors = []
                async with operation(f"connecting to NATS at {', '.join(self._where())}", self.why):
                    self._client = await nats.connect(
                        servers=self.servers,
                        connect_timeout=self._connect_timeout,
                        tls=self.tls,
                        **self._credentials,
                        # A few tries, then the client closes: the next use connects anew
                        # (a publish meanwhile is transient, a consumer waits and re-binds).
                        allow_reconnect=True,
                        max_reconnect_attempts=_RECONNECTS,
                        reconnect_time_wait=0.5,
                        error_cb=self._on_error,
                        disconnected_cb=self._on_disconnect,
                    )
                self._js = self._client.jetstream(timeout=self._request_timeout)
            js = self._js
            assert js is not None  # noqa: S101 - set with the client
            while self._pending:
                await self._declare(js, self._pending[0])
                self._pending.pop(0)
            return js

    def ready(self) -> nats.js.JetStreamContext | None:
        """The JetStream context while connected with every stream declared, else ``None``: the
        publish path's look-up, without the lock or an await (:meth:`jetstream` connects)."""
        client = self._client
        if client is None or client.is_closed or self._pending:
            return None
        return self._js

    @property
    def closed(self) -> bool:
        """No live connection (never made, or nats-py gave up reconnecting)."""
        return self._client is None or self._client.is_closed

    def _where(self) -> list[str]:
        return [re.sub(r"//[^@/]*@", "//", s) for s in self.servers]  # never a password

    def why(self) -> str:
        """``"; connection errors: ..."`` when connection attempts failed, else ``""``."""
        errors = self.connection_errors
        return f"; connection errors: {'; '.join(errors)}" if errors else ""

    async def _on_error(self, exc: Exception) -> None:
        said = describe(exc)
        if said not in self.connection_errors and len(self.connection_errors) < _KEPT_ERRORS:
            self.connection_errors.append(said)
        self.connection_error_count += 1
        now = time.monotonic()
        if self._warned_at is not None and now - self._warned_at < CONNECTION_WARNING_EVERY:
            self._unwarned += 1
            log.debug("NATS connection error: %s", said)
            return
        more = f" ({self._unwarned} more since the last warning)" if self._unwarned else ""
        self._warned_at, self._unwarned = now, 0
        log.warning("NATS connection error: %s%s", said, more)

    async def _on_disconnect(self) -> None:
        if self._client is not None:  # not our own aclose()
            log.warning("NATS connection lost; reconnecting")

    def publisher(self) -> NatsPublisher:
        return NatsPublisher(self)

    def consumer(self, group: str, subjects: Sequence[str]) -> NatsConsumer:
        return NatsConsumer(self, group, tuple(subjects))

    async def declare(self, spec: StreamSpec) -> None:
        await self._declare(await self.jetstream(), spec)

    async def _declare(self, js: nats.js.JetStreamContext, spec: StreamSpec) -> None:
        for name, subjects in ((spec.name, spec.subjects), (f"{spec.name}-dlq", spec.dlq_subjects)):
            config = api.StreamConfig(
                name=name,
                subjects=list(subjects),
                retention=api.RetentionPolicy.LIMITS,
                storage=api.StorageType.FILE,
                discard=api.DiscardPolicy.OLD,
                max_age=spec.max_age.total_seconds(),
                duplicate_window=spec.duplicate_window.total_seconds(),
                num_replicas=spec.replicas,
            )
            async with operation(f"declaring stream {name}"):
                try:
                    await js.stream_info(name)
                except nats.js.errors.NotFoundError:
                    await js.add_stream(config)
                else:
                    await js.update_stream(config)

    async def stream_of(self, subject: str) -> str:
        """The stream that stores ``subject``; :class:`ConfigurationError` when none does."""
        js = await self.jetstream()
        async with operation(f"looking up the stream of {subject}"):
            try:
                return await js.find_stream_name_by_subject(subject)
            except nats.js.errors.NotFoundError:
                raise ConfigurationError(
                    f"no JetStream stream stores subject {subject!r}: declare it (StreamSpec)"
                ) from None

    async def dead_letters(self, topic: str, *, limit: int = 100) -> list[DeadLetter]:
        return [letter for letter, _ in await self._parked(dlq_subject(topic), limit)]

    async def _parked(self, dlq: str, limit: int | None) -> list[tuple[DeadLetter, bytes]]:
        stream = await self.stream_of(dlq)
        js = await self.jetstream()
        found: list[tuple[DeadLetter, bytes]] = []
        seq = 1
        async with operation(f"listing {dlq}"):
            while limit is None or len(found) < limit:
                try:
                    raw = await js.get_msg(stream, seq=seq, subject=dlq, next=True)
                except nats.js.errors.NotFoundError:
                    break
                if raw.seq is None:
                    break
                seq = raw.seq + 1
                headers = _public_headers(raw.headers)
                body = raw.data or b""
                found.append(
                    (
                        DeadLetter(
                            message_id=bounded_id(
                                headers.get(EVENT_ID_HEADER)
                                or header_value((raw.headers or {}).get(MSG_ID))
                                or f"{stream}:{raw.seq}"
                            ),
                            subject=raw.subject or dlq,
                            source=headers.get(DLQ_SOURCE) or source_of(dlq),
                            headers=headers,
                            size=len(body),
                            time=raw.time or datetime.now(UTC),
                            position=str(raw.seq),
                        ),
                        body,
                    )
                )
        return found

    async def redrive(self, topic: str, ids: Sequence[str] | None = None) -> int:
        dlq = dlq_subject(topic)
        wanted = None if ids is None else set(ids)
        parked = [
            (d, b)
            for d, b in await self._parked(dlq, None)
            if wanted is None or d.message_id in wanted
        ]
        stream = await self.stream_of(dlq)
        js = await self.jetstream()
        done: set[str] = set()
        for letter, body in parked:
            async with operation(f"redriving {letter.message_id} from {dlq}"):
                if letter.message_id not in done:
                    headers = {
                        k: v for k, v in letter.headers.items() if not k.startswith(_DLQ_PREFIX)
                    }
                    # A new id: the original may still be in the source's duplicate window.
                    headers[MSG_ID] = f"{letter.message_id}/redrive/{letter.position}"
                    await js.publish(letter.source, body, headers=headers)
                    done.add(letter.message_id)
                await js.delete_msg(stream, int(letter.position))
        return len(done)

    async def lag(self, group: str, subject: str) -> ConsumerLag:
        """The durable consumer's ``num_pending`` (not yet delivered) and ``num_ack_pending``."""
        stream = await self.stream_of(subject)
        js = await self.jetstream()
        async with operation(f"reading the lag of {group} on {subject}"):
            try:
                info = await js.consumer_info(stream, durable_name(group, subject))
            except nats.js.errors.NotFoundError:
                return ConsumerLag(group, subject, waiting=None)
        return ConsumerLag(
            group, subject, waiting=info.num_pending or 0, unacknowledged=info.num_ack_pending or 0
        )

    async def aclose(self) -> None:
        client, self._client, self._js = self._client, None, None
        if client is not None and not client.is_closed:
            try:
                await client.drain()
            except Exception as exc:  # noqa: BLE001 - closing: report, never raise
                log.warning("closing the NATS connection: %s", describe(exc))
                await client.close()


class NatsPublisher:
    """``ports.Publisher`` on JetStream: ``sent`` only on a PubAck.

    The message goes out with nats-py's asynchronous publish (one reply subscription per
    connection, a future per message) and the PubAck is awaited within ``budget``: several
    publishes of one process (a relay window's keys) are on the wire at once, each answered by its
    own acknowledgement. While connected, the budget is one loop timer that fails the PubAck's
    future with :class:`TimeoutError` (no cancel scope per publish); a publish that must connect
    first runs under a time limit around the connect and the publish.
    """

    def __init__(self, broker: NatsBroker) -> None:
        self.broker = broker

    async def publish(self, message: BrokerMessage, *, budget: timedelta) -> Outcome:
        headers = {EVENT_ID_HEADER: message.message_id, **message.headers}
        headers[MSG_ID] = message.message_id
        js = self.broker.ready()
        connected = js is not None
        try:
            if js is None:
                async with asyncio.timeout(budget.total_seconds()):
                    js = await self.broker.jetstream()
                    connected = True
                    await (await js.publish_async(message.subject, message.body, headers=headers))
            else:
                await _acknowledged_within(js, message, headers, budget.total_seconds())
        except BrokerUnavailable as exc:
            return Outcome.transient(str(exc))
        except Exception as exc:
            outcome = publish_outcome(exc, message.subject, sending=connected)
            if outcome is None:
                raise
            if not connected and self.broker.why():
                return attrs.evolve(outcome, reason=f"{outcome.reason}{self.broker.why()}")
            return outcome
        # Stored (the PubAck's seq), or a duplicate of a stored one (its duplicate flag): sent
        # either way.
        return _SENT


async def _acknowledged_within(
    js: nats.js.JetStreamContext, message: BrokerMessage, headers: dict[str, str], seconds: float
) -> None:
    """Publish ``message`` with nats-py's asynchronous publish and wait for its PubAck, for at most
    ``seconds`` in all; :class:`TimeoutError` when the publish (a full pending buffer) or its
    acknowledgement is late. One loop timer (:class:`_Expiry`) instead of a cancel scope."""
    task = asyncio.current_task()
    assert task is not None  # noqa: S101 - a coroutine of a task
    expiry = _Expiry(task)
    timer = asyncio.get_running_loop().call_later(seconds, expiry.fire)
    try:
        acknowledged = await js.publish_async(message.subject, message.body, headers=headers)
        expiry.future = acknowledged
        await acknowledged
    except asyncio.CancelledError:
        # The timer cancelled the publish itself: a timeout, unless the task was cancelled too.
        if expiry.cancelled_task:
            expiry.cancelled_task = False
            if task.uncancel() == 0:
                raise TimeoutError from None
        raise
    finally:
        timer.cancel()
        if expiry.cancelled_task:
            # The timer's cut ended in something else than a CancelledError (nats-py answers a
            # cancelled wait for a pending slot with TooManyStalledMsgsError): it is taken back
            # all the same, so the task carries no cancellation of ours.
            task.uncancel()


class _Expiry:
    """What a publish's timer does when it fires: fail the PubAck's future with
    :class:`TimeoutError` once there is one, else cancel the task still in the publish call."""

    __slots__ = ("cancelled_task", "future", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.future: asyncio.Future[api.PubAck] | None = None
        self.cancelled_task = False

    def fire(self) -> None:
        if self.future is None:
            self.cancelled_task = True
            self.task.cancel()
        elif not self.future.done():
            self.future.set_exception(TimeoutError())
