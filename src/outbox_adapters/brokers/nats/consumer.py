"""NATS JetStream consumption (nats-py): one durable pull consumer per (group, subject).

Explicit ack and ``nak(delay)``; the delivery count is JetStream's (``num_delivered``), so it
survives restarts; a message not acked within the broker's ``ack_wait`` is redelivered. The broker
(:class:`~outbox_adapters.brokers.nats.broker.NatsBroker`) connects and declares; this module
consumes, through what :class:`JetStreamSource` says a consumer needs of it (so it does not import
the broker's module, which imports this one).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from typing import Any, Protocol

import nats.errors
import nats.js
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import api

from outbox_adapters.brokers.errors import BrokerUnavailable, log
from outbox_adapters.brokers.nats.errors import describe, is_broker_error, operation
from outbox_core.brokers import EVENT_ID_HEADER
from outbox_core.errors import ConfigurationError
from outbox_core.untrusted import bounded_id, header_text

__all__ = ["MSG_ID", "JetStreamSource", "NatsConsumer", "NatsMessage", "header_value"]

MSG_ID = "Nats-Msg-Id"
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_-]")


def _public_headers(headers: Mapping[Any, Any] | None) -> dict[str, str]:
    """The message's own headers (JetStream's ``Nats-*`` bookkeeping left out), each key and value
    as text: nats-py hands a direct read's non-ASCII header value as an ``email.header.Header``."""
    text = {header_value(k): header_value(v) for k, v in (headers or {}).items()}
    return {k: v for k, v in text.items() if not k.startswith("Nats-")}


def header_value(value: object) -> str:
    """One header value as nats-py hands it (text, bytes, ``None`` or an ``email.header.Header``)
    as text."""
    if value is None or isinstance(value, bytes | str):
        return header_text(value)
    return str(value)


def durable_name(group: str, subject: str) -> str:
    """The JetStream durable consumer of ``group`` on ``subject``."""
    return _UNSAFE_NAME.sub("_", f"{group}--{subject}")


class JetStreamSource(Protocol):
    """What a consumer needs of its broker (:class:`~outbox_adapters.brokers.nats.broker.NatsBroker`)."""

    #: How long JetStream waits for an ack before it redelivers.
    ack_wait: timedelta

    @property
    def closed(self) -> bool:
        """No live connection: a consumer binds again on the next one."""
        ...

    async def jetstream(self) -> nats.js.JetStreamContext:
        """The JetStream context, connecting (and declaring) on first use."""
        ...

    async def stream_of(self, subject: str) -> str:
        """The stream that stores ``subject``."""
        ...


class NatsMessage:
    """One JetStream delivery (``ports.ReceivedMessage``)."""

    def __init__(self, msg: Msg) -> None:
        self._msg = msg
        self._settled = False
        raw = msg.headers or {}
        self.headers: Mapping[str, str] = _public_headers(raw)
        meta = msg.metadata
        # Bounded: a peer's id may be kilobytes long or hold control characters (ADR 0019).
        self.message_id: str = bounded_id(
            self.headers.get(EVENT_ID_HEADER)
            or header_value(raw.get(MSG_ID))
            or f"{meta.stream}:{meta.sequence.stream}"
        )
        self.deliveries: int = meta.num_delivered
        self.subject: str = msg.subject
        self.body: bytes = msg.data

    async def ack(self) -> None:
        await self._settle(self._msg.ack())

    async def nak(self, *, delay: timedelta | None = None) -> None:
        await self._settle(self._msg.nak(delay=delay.total_seconds() if delay else None))

    async def _settle(self, call: Any) -> None:  # noqa: ANN401 - a nats-py coroutine
        if self._settled:
            call.close()
            return
        self._settled = True
        try:
            await call
        except Exception as exc:
            if not is_broker_error(exc):
                raise
            # The broker redelivers it after ack_wait: at least once still holds.
            log.warning("settling message %s failed: %s", self.message_id, describe(exc))


class NatsConsumer:
    """``ports.Consumer`` of one group: a durable pull consumer per subject, explicit acks."""

    def __init__(
        self, broker: JetStreamSource, group: str, subjects: tuple[str, ...], *, batch: int = 10
    ) -> None:
        if not subjects:
            raise ConfigurationError(f"consumer group {group!r} needs at least one subject")
        self.broker = broker
        self.group = group
        self.subjects = subjects
        self.batch = batch
        self.fetch_wait = 0.5
        self._closed = False
        self._subs: list[Any] = []

    def close(self) -> None:
        """End :meth:`messages` at the next fetch that finds nothing waiting."""
        self._closed = True

    def durable_name(self, subject: str) -> str:
        return durable_name(self.group, subject)

    async def _subscribe(self) -> list[Any]:
        js = await self.broker.jetstream()
        subs = []
        for subject in self.subjects:
            stream = await self.broker.stream_of(subject)
            name = self.durable_name(subject)
            config = api.ConsumerConfig(
                durable_name=name,
                ack_policy=api.AckPolicy.EXPLICIT,
                deliver_policy=api.DeliverPolicy.ALL,
                filter_subject=subject,
                ack_wait=self.broker.ack_wait.total_seconds(),
                # Unlimited on purpose: a redelivery may be a recheck of recipients still in
                # progress, and JetStream past max_deliver drops a message without parking it.
                # The bound is the consumer channel's, on failures (outbox_core.failures).
                max_deliver=-1,
                max_ack_pending=1000,
            )
            async with operation(f"declaring consumer {name} on {stream}"):
                try:
                    await js.add_consumer(stream, config)
                except nats.js.errors.BadRequestError as exc:
                    # It exists with other settings (declared with another ack_wait): keep it.
                    log.warning("consumer %s kept as it is: %s", name, describe(exc))
                subs.append(await js.pull_subscribe_bind(name, stream=stream))
        return subs

    async def messages(self) -> AsyncIterator[NatsMessage]:
        warned = False
        try:
            while True:
                if not self._subs:
                    try:
                        self._subs = await self._subscribe()
                    except BrokerUnavailable as exc:
                        _raise_if_cancelled(exc)
                        if self._closed:
                            return
                        if not warned:
                            log.warning("consumer %s waits for the broker: %s", self.group, exc)
                            warned = True
                        await asyncio.sleep(1.0)
                        continue
                    warned = False
                got = 0
                for sub in list(self._subs):
                    for msg in await self._fetch(sub):
                        got += 1
                        yield NatsMessage(msg)
                if self._closed and not got:
                    return
        finally:
            await self._unsubscribe()

    async def _unsubscribe(self) -> None:
        subs, self._subs = self._subs, []
        for sub in subs:
            try:
                await sub.unsubscribe()
            except Exception as exc:  # noqa: BLE001 - closing: report, never raise
                log.debug("unsubscribing: %s", describe(exc))

    async def _fetch(self, sub: Any) -> list[Msg]:  # noqa: ANN401 - nats-py's pull subscription
        try:
            msgs: list[Msg] = await sub.fetch(self.batch, timeout=self.fetch_wait)
        except TimeoutError as exc:
            _raise_if_cancelled(exc)
            # Nothing waiting. nats-py raises its own TimeoutError, or asyncio's when the server's
            # "no messages" answer comes in late (a busy event loop: an application running other
            # work beside its consumers): both mean an empty fetch, not a failure to warn about.
            return []
        except Exception as exc:
            if not is_broker_error(exc):
                raise
            _raise_if_cancelled(exc)
            log.warning("consumer %s: fetching failed, retrying: %s", self.group, describe(exc))
            if isinstance(exc, nats.errors.ConnectionClosedError) or self.broker.closed:
                await self._unsubscribe()  # bind again on a new connection
            await asyncio.sleep(1.0)
            return []
        return msgs


def _raise_if_cancelled(exc: BaseException) -> None:
    """Raise ``CancelledError`` when the running task is being cancelled: nats-py answers a
    cancelled fetch on a closed connection with its ``ConnectionClosedError`` (and Python 3.11's
    ``wait_for`` may answer one with a timeout), which would otherwise be taken for an empty or a
    failed fetch, and the consumer would fetch on for ever instead of stopping."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError from exc
