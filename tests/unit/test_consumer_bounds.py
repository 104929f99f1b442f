"""No message is redelivered without end (docs/reliability.md, hostile input): the bound on failed
handlings (and what it does not count: rechecks of recipients in progress, outages), a store data
error, a park the store refuses, hostile ids in log lines; and the broker adapters' edges (a NATS
fetch's late timeout, rate-limited connection warnings)."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from email.header import Header
from types import SimpleNamespace
from typing import Any

import attrs
import nats.errors
import pytest

from outbox_adapters.brokers.kafka.consumer import record_headers
from outbox_adapters.brokers.nats.broker import NatsBroker
from outbox_adapters.brokers.nats.consumer import NatsConsumer, _public_headers, header_value
from outbox_adapters.lanes.consumer import FAILING, REFUSED, ChannelConsumer, Settlement
from outbox_adapters.memory import MemoryBroker
from outbox_core.brokers import DLQ_KIND, DLQ_REASON
from outbox_core.errors import StoreDataError, StoreUnavailable
from outbox_core.events import EventEnvelope
from outbox_core.ports import BrokerMessage, ReceivedMessage
from outbox_core.untrusted import MAX_ID

TOPIC = "platform-events"


@attrs.define
class Ledger:
    refuse: bool = False
    records: dict[tuple[str, str], set[str]] = attrs.Factory(dict)

    async def parked(self, channel: str, event_id: str) -> frozenset[str]:
        return frozenset(self.records.get((channel, event_id), set()))

    async def record(
        self, channel: str, event_id: str, kind: str, *, reason: str, attempts: int
    ) -> None:
        del attempts
        if self.refuse:
            raise StoreDataError("PostgreSQL store refused a value during record: (SQLSTATE 54000)")
        assert reason.isprintable()
        self.records.setdefault((channel, event_id), set()).add(kind)


class Raising:
    """A channel whose step raises ``error`` on every delivery."""

    name = "raising"

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def deliver(self, event: EventEnvelope, message: ReceivedMessage) -> Settlement:
        raise self.error


class Later:
    """Recipients in progress for the first ``rechecks`` deliveries, then terminal (``rechecks``
    None: never terminal)."""

    name = "later"

    def __init__(self, rechecks: int | None = None) -> None:
        self.rechecks = rechecks
        self.calls = 0

    async def deliver(self, event: EventEnvelope, message: ReceivedMessage) -> Settlement:
        self.calls += 1
        if self.rechecks is not None and self.calls > self.rechecks:
            return Settlement.done()
        return Settlement.later(timedelta(milliseconds=5))


class FailingThenFine:
    """Raises ``error`` on the first ``failures`` deliveries, then every recipient is terminal."""

    name = "flaky"

    def __init__(self, error: Exception, failures: int) -> None:
        self.error = error
        self.failures = failures
        self.calls = 0

    async def deliver(self, event: EventEnvelope, message: ReceivedMessage) -> Settlement:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return Settlement.done()


def _event() -> bytes:
    return (
        b'{"specversion": "1.0", "id": "evt-1", "source": "auth", "type": "tenant.provisioned",'
        b' "subject": "t-1", "time": "2026-12-01T00:00:00+00:00", "data": {}}'
    )


async def _run(
    channel: Any, ledger: Ledger, *, body: bytes = b"", message_id: str = "evt-1"
) -> Any:
    broker = MemoryBroker()
    message = BrokerMessage(
        subject=TOPIC, key="k", message_id=message_id, body=body or _event(), headers={}
    )
    await broker.publisher().publish(message, budget=timedelta(seconds=1))
    consumer = broker.consumer(channel.name, [TOPIC])
    machinery = ChannelConsumer(
        consumer,
        channel,
        dlq=broker.publisher(),
        parks=ledger,
        retry_delay=timedelta(milliseconds=5),
        drain_idle=timedelta(milliseconds=100),
        max_failures=3,
    )
    async with asyncio.timeout(20):  # a message redelivered without end fails here, not hangs
        stats = await machinery.run(drain=True)
    return stats, consumer, broker.on(f"{TOPIC}.dlq")


async def test_a_failing_step_is_parked_at_the_bound_and_acknowledged() -> None:
    stats, consumer, dlq = await _run(Raising(RuntimeError("boom")), Ledger())
    assert (stats.delivered, stats.errors, stats.naked, stats.acked, stats.exhausted) == (
        3,
        3,
        2,
        1,
        1,
    )
    assert consumer.acked == ["evt-1"]
    (parked,) = dlq
    assert parked.headers[DLQ_KIND] == FAILING
    assert "failed 3 times" in parked.headers[DLQ_REASON]
    assert "RuntimeError: boom" in parked.headers[DLQ_REASON]


async def test_failures_below_the_bound_are_retried_and_the_event_is_delivered() -> None:
    channel = FailingThenFine(RuntimeError("blip"), failures=2)
    stats, consumer, dlq = await _run(channel, Ledger())
    assert (stats.errors, stats.exhausted, stats.acked) == (2, 0, 1)
    assert consumer.acked == ["evt-1"]
    assert dlq == []


async def test_recipients_in_progress_are_rechecked_past_the_bound_until_terminal() -> None:
    """Rechecks are no failures: 10 deliveries with recipients in progress (more than the bound
    of 3), then terminal: acknowledged, never parked."""
    channel = Later(rechecks=10)
    stats, consumer, dlq = await _run(channel, Ledger())
    assert (stats.delivered, stats.naked, stats.acked, stats.exhausted) == (11, 10, 1, 0)
    assert consumer.acked == ["evt-1"]
    assert dlq == []


async def test_an_outage_is_retried_past_the_bound_and_never_parked() -> None:
    """The store unreachable for 6 deliveries (twice the bound): retried until it is back."""
    channel = FailingThenFine(StoreUnavailable("PostgreSQL store unavailable"), failures=6)
    stats, consumer, dlq = await _run(channel, Ledger())
    assert (stats.errors, stats.exhausted, stats.acked) == (6, 0, 1)
    assert consumer.acked == ["evt-1"]
    assert dlq == []


async def test_a_store_data_error_is_parked_at_once_not_retried() -> None:
    stats, consumer, dlq = await _run(Raising(StoreDataError("refused (SQLSTATE 22021)")), Ledger())
    assert (stats.delivered, stats.refused, stats.naked, stats.acked) == (1, 1, 0, 1)
    assert consumer.acked == ["evt-1"]
    assert [d.headers[DLQ_KIND] for d in dlq] == [REFUSED]


async def test_a_park_the_store_refuses_is_acknowledged_logged_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR):
        stats, consumer, _ = await _run(Later(), Ledger(refuse=True), body=b"not json")
    assert (stats.delivered, stats.unparkable, stats.acked) == (1, 1, 1)
    assert consumer.acked == ["evt-1"]
    assert "acknowledged unparked" in caplog.text


async def test_hostile_ids_reach_the_log_bounded_and_escaped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hostile = "\x1b[2J\r\nforged: line\x00" + "x" * 6000
    with caplog.at_level(logging.WARNING):
        channel = Raising(RuntimeError("bad \x1b[31mvalue\r\nforged: line"))
        stats, consumer, dlq = await _run(channel, Ledger(), message_id=hostile)
    assert stats.acked == 1
    (acked,) = consumer.acked
    assert len(acked) <= MAX_ID
    assert acked.isprintable()
    assert all(r.getMessage().isprintable() for r in caplog.records)
    assert len(dlq) == 1


def test_a_kafka_record_s_null_and_binary_headers_read_as_text() -> None:
    record = SimpleNamespace(headers=[("a", None), ("b", b"\xff"), ("c", b"ok")])
    assert record_headers(record) == {"a": "", "b": "\ufffd", "c": "ok"}


class _LateFetch:
    def __init__(self, error: Exception) -> None:
        self.error = error

    async def fetch(self, batch: int, timeout: float) -> list[Any]:  # noqa: ASYNC109 - nats-py's
        raise self.error


@pytest.mark.parametrize("error", [TimeoutError(), nats.errors.TimeoutError()])
async def test_a_late_empty_fetch_is_no_warning(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    """nats-py raises asyncio's TimeoutError when the server's "no messages" answer comes late
    (a busy event loop): an idle consumer, not a failure."""
    nats_consumer = NatsConsumer(SimpleNamespace(closed=False), "g", ("s",))
    with caplog.at_level(logging.WARNING):
        assert await nats_consumer._fetch(_LateFetch(error)) == []
    assert caplog.records == []


async def test_an_unreachable_nats_warns_once_per_interval_and_counts_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker = NatsBroker(["nats://127.0.0.1:1"])
    with caplog.at_level(logging.WARNING):
        for _ in range(10):
            await broker._on_error(ConnectionRefusedError(111, "refused"))
    assert broker.connection_error_count == 10
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_a_nats_direct_read_s_header_objects_read_as_text() -> None:
    """nats-py hands a direct read's non-ASCII header value as an ``email.header.Header``, which
    has no ``len()``: found by the P7 fuzzer in ``dlq list``."""
    raw = {"ce-id": Header("caf\u00e9", "utf-8"), "Nats-Msg-Id": "n-1", b"k": None}
    assert _public_headers(raw) == {"ce-id": "caf\u00e9", "k": ""}
    assert header_value(Header("caf\u00e9", "utf-8")) == "caf\u00e9"
