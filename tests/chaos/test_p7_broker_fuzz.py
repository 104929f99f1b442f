"""P7, the broker fuzzer: hostile messages into every broker, through the consumer channel and the
CLI's ``dlq list`` (docs/reliability.md, hostile input).

Hypothesis draws batches of messages: ids and header values that are null (Kafka), binary,
kilobytes long, or hold NUL, CR/LF and terminal escape sequences; bodies that are truncated,
deeply nested, not JSON, or JSON of the wrong shape (an event whose fields a careless host step
trips on, an event whose tenant id the store cannot hold); valid events among them. Each batch goes
into one broker (the in-memory broker, NATS JetStream, the Kafka mock cluster) with an in-app
:class:`~outbox_adapters.lanes.consumer.ChannelConsumer` on it (its real PostgreSQL feed and park
ledger) behind a host step that trusts the event's shape. The promises:

- the consumer never dies (``crashes=0``) and every message is acknowledged (``stuck=0``): each is
  delivered, parked once, or, when even parking is refused, acknowledged with a logged reason;
- every valid event is delivered (``valid_delivered=V/V``);
- no parked message is on the DLQ twice (``dlq_copies_max=1``);
- no control character reaches a log line or the ``dlq list`` output (``raw_control_chars_out=0``),
  and no log line carries a kilobytes-long id.

Short by default; ``OUTBOX_CHAOS=full`` (``nox -s chaos``) draws more and larger batches.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
from aiokafka import AIOKafkaProducer
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from psycopg_pool import AsyncConnectionPool
from tests.support.cli import outbox

from outbox_adapters.brokers import KafkaBroker, NatsBroker, broker_from_url
from outbox_adapters.lanes.channel_workers import ChannelTiming
from outbox_adapters.lanes.consumer import ChannelConsumer, ConsumerStats
from outbox_adapters.lanes.inapp import InAppChannel, platform_notifications
from outbox_adapters.memory import MemoryBroker
from outbox_adapters.postgres.channels import NotificationWriter, PostgresParkLedger
from outbox_core.brokers import DLQ_GROUP, DLQ_KIND, EVENT_ID_HEADER, StreamSpec
from outbox_core.events import EventEnvelope
from outbox_core.ports import BrokerMessage, ReceivedMessage

pytestmark = [pytest.mark.chaos, pytest.mark.integration]

FULL = os.environ.get("OUTBOX_CHAOS", "").strip().lower() == "full"
GROUP = "p7-fuzz"
TIMING = ChannelTiming(
    retry_delay=timedelta(milliseconds=50),
    overrun_delay=timedelta(milliseconds=50),
    publish_budget=timedelta(seconds=5),
    max_failures=4,
)
#: No log line may be longer: a 6 KB id must not reach one.
LONGEST_LOG_LINE = 2000

# --- what is drawn ----------------------------------------------------------------------------

_NASTY = "\x00\r\n\x1b\x07\x7f\x9b\u2028\ufeff"
_ESCAPES = ("\x1b[2J\x1b]0;pwned\x07", "\x1b[31mred", "line\r\nforged: record", "nul\x00byte")


def _hostile_text(*, wire_safe: bool) -> st.SearchStrategy[str]:
    """Ids and header values; ``wire_safe``: without NUL/CR/LF, which the NATS protocol forbids."""
    parts = [
        st.text(max_size=30),
        st.sampled_from(_ESCAPES),
        st.text(alphabet=st.sampled_from(_NASTY + "ab"), min_size=1, max_size=12),
        st.integers(5000, 8000).map(lambda n: "h" * n),
    ]
    text = st.one_of(parts)
    if wire_safe:
        text = text.map(lambda s: "".join(c for c in s if c not in "\x00\r\n") or "x")
    return text


def _event(**data: Any) -> EventEnvelope:
    tenant = f"t-{secrets.token_hex(4)}"
    fields = {"tenant_id": tenant, "tenant_name": "Acme", "admin_email": "a@acme.example", **data}
    return EventEnvelope(
        id=f"evt-{secrets.token_hex(8)}",
        type="tenant.provisioned",
        source="auth",
        key=tenant,
        time=datetime.now(UTC),
        data=fields,
    )


def _unstorable(kind: str) -> str:
    """A tenant id the feed could not hold: with a NUL, or too long (incompressible) for its index."""
    return kind if kind != "long" else secrets.token_hex(4000)


@attrs.frozen
class Fuzzed:
    """One drawn message: its ``ce-id`` (None: a null value; absent: not set), extra headers, body."""

    ce_id: str | bytes | None
    headers: tuple[tuple[str, str | bytes | None], ...]
    body: bytes
    #: The event id when the body is a valid event the channel must deliver.
    valid_id: str | None = None
    has_ce_id: bool = True

    def __repr__(self) -> str:
        """Short: a drawn body or id may be kilobytes (Hypothesis prints a failing batch)."""

        def short(value: object) -> str:
            text = repr(value)
            return text if len(text) <= 80 else f"{text[:60]}...({len(text)} chars)"

        headers = ", ".join(f"{short(k)}: {short(v)}" for k, v in self.headers)
        ce_id = short(self.ce_id) if self.has_ce_id else "absent"
        return f"Fuzzed(ce_id={ce_id}, headers={{{headers}}}, body={short(self.body)})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """Hypothesis's pretty printer uses this, not ``__repr__``."""
        del cycle
        printer.text(repr(self))


def _valid() -> tuple[bytes, str | None]:
    event = _event()
    return event.encode(), event.id


def _valid_unstorable(kind: str) -> tuple[bytes, str | None]:
    event = _event(tenant_id=_unstorable(kind))
    return event.encode(), event.id


def _body_kinds() -> list[st.SearchStrategy[tuple[bytes, str | None]]]:
    """Each kind of body, drawn as a body and, when it is a valid event, its id."""
    truncated = st.tuples(st.builds(lambda: _event().encode()), st.integers(0, 60)).map(
        lambda pair: (pair[0][: pair[1]], None)
    )
    deep = st.integers(500, 200_000).map(lambda n: (b"[" * n + b"]" * n, None))
    binary = st.binary(max_size=200).map(lambda b: (b, None))
    wrong_json = st.sampled_from(
        [b"[]", b"42", b'"text"', b"null", b'{"specversion": "1.0", "id": 7}']
    ).map(lambda b: (b, None))
    # Decodes as an event, then trips a host step that trusts the shape of data.
    shapes: list[dict[str, Any]] = [{"admin_email": 42}, {"admin_email": None}, {"admin_email": []}]
    wrong_shape = st.sampled_from(shapes)
    tripping = wrong_shape.map(lambda data: (_event(**data).encode(), None))
    # Decodes, with a tenant id the feed could not hold as it is (a NUL; 8,000 characters): the
    # channel cleans and cuts it, the event is delivered.
    unstorable = st.sampled_from(["t\x00nul", "long"]).map(_valid_unstorable)
    return [st.builds(_valid), truncated, deep, binary, wrong_json, tripping, unstorable]


@st.composite
def _message(
    draw: st.DrawFn,
    bodies: st.SearchStrategy[tuple[bytes, str | None]],
    *,
    wire_safe: bool,
    nullable: bool,
) -> Fuzzed:
    body, valid_id = draw(bodies)
    value: st.SearchStrategy[Any] = _hostile_text(wire_safe=wire_safe)
    if nullable:
        value = st.one_of(value, st.none(), st.binary(max_size=40))
    names = st.sampled_from(["ce-type", "x-trace", "x-note", "ce-source"])
    headers = tuple(draw(st.dictionaries(names, value, max_size=3)).items())
    if valid_id is not None:
        return Fuzzed(valid_id, headers, body, valid_id)
    has = draw(st.booleans())
    return Fuzzed(draw(value), headers, body, None, has)


def _zoo(*, wire_safe: bool, nullable: bool) -> list[Fuzzed]:
    """The ids every batch holds, whatever is drawn: escapes, CR/LF, NUL, 6 KB, null."""
    ids: list[str | bytes | None] = [*_ESCAPES, "i" * 6000]
    if nullable:
        ids += [None, b"\xff\xfe\x00"]
    if wire_safe:
        ids = [i for i in ids if not (isinstance(i, str) and any(c in i for c in "\x00\r\n"))]
    return [Fuzzed(i, (("x-note", i),), b"not json \x1b[2J") for i in ids]


def _batches(*, wire_safe: bool = False, nullable: bool = False) -> st.SearchStrategy[list[Fuzzed]]:
    kinds = _body_kinds()
    each = [_message(kind, wire_safe=wire_safe, nullable=nullable) for kind in kinds]
    extra = st.lists(
        _message(st.one_of(kinds), wire_safe=wire_safe, nullable=nullable),
        max_size=50 if FULL else 8,
    )
    zoo = _zoo(wire_safe=wire_safe, nullable=nullable)
    return st.tuples(st.tuples(*each), extra).map(lambda pair: [*zoo, *pair[0], *pair[1]])


FUZZ_SETTINGS = settings(
    max_examples=4 if FULL else 1,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    # No shrinking: a failing batch is reported whole; shrinking it would re-run a broker round
    # trip (up to its ``within`` seconds) for every smaller candidate.
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
)

# --- the run ----------------------------------------------------------------------------------


class HostStep:
    """A host's channel: a careless step that trusts the event's shape, then the in-app feed."""

    def __init__(self, inner: InAppChannel) -> None:
        self.inner = inner

    @property
    def name(self) -> str:
        return self.inner.name

    async def deliver(self, event: EventEnvelope, message: ReceivedMessage) -> Any:
        event.data["admin_email"].lower()  # AttributeError / TypeError on a wrong shape
        return await self.inner.deliver(event, message)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@attrs.define
class Figures:
    messages: int = 0
    crashes: int = 0
    stuck: int = 0
    valid: int = 0
    delivered: int = 0
    parked: int = 0
    dlq_copies_max: int = 0
    raw_out: int = 0
    longest_log: int = 0
    stats: ConsumerStats | None = None
    valid_ids: list[str] = attrs.Factory(list)

    def line(self, broker: str) -> str:
        return (
            f"P7 broker_fuzz broker={broker} messages={self.messages} crashes={self.crashes}"
            f" stuck={self.stuck} valid_delivered={self.delivered}/{self.valid}"
            f" parked={self.parked} dlq_copies_max={self.dlq_copies_max}"
            f" raw_control_chars_out={self.raw_out}"
        )


def _raw_controls(text: str) -> int:
    return sum(1 for line in text.split("\n") for c in line if not c.isprintable())


async def _consume(dsn: str, broker: Any, topic: str, figures: Figures, *, within: float) -> None:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(dsn, min_size=1, max_size=4, open=False)
    await pool.open()
    try:
        channel = HostStep(
            InAppChannel(NotificationWriter(pool), platform_notifications(), name=GROUP)
        )
        machinery: ChannelConsumer = TIMING.consumer(
            broker.consumer(GROUP, [topic]),
            channel,
            dlq=broker.publisher(),
            parks=PostgresParkLedger(pool),
        )
        running = asyncio.ensure_future(machinery.run())
        ends = time.monotonic() + within
        while time.monotonic() < ends and not running.done():
            if machinery.stats.acked >= figures.messages:
                break
            await asyncio.sleep(0.1)
        machinery.request_stop()
        try:
            await asyncio.wait_for(running, 15)
        except Exception:  # noqa: BLE001 - the figure: a message killed the consumer
            figures.crashes += 1
        stats = machinery.stats
        figures.stats = stats
        figures.stuck = max(0, figures.messages - stats.acked)
        figures.parked = stats.parked
        async with pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT count(DISTINCT event_id) FROM outbox_notification WHERE event_id = ANY(%s)",
                (list(figures.valid_ids),),
            )
            row = await cursor.fetchone()
            figures.delivered = int(row[0]) if row else 0
    finally:
        await pool.close()


async def _copies(broker: Any, topic: str) -> int:
    letters = await broker.dead_letters(topic, limit=10_000)
    counted = Counter(
        (d.message_id, d.headers.get(DLQ_GROUP), d.headers.get(DLQ_KIND)) for d in letters
    )
    return max(counted.values(), default=0)


def _fuzz(  # noqa: PLR0917 - the broker's name, batch, fixtures and hooks, each used once
    name: str,
    batch: list[Fuzzed],
    dsn: str,
    report: Callable[[str], None],
    connect: Callable[[], Any],
    publish: Callable[[Any, str, list[Fuzzed]], Any],
    *,
    url: str | None,
    within: float,
) -> Figures:
    topic = f"p7-{name}-{secrets.token_hex(4)}"
    figures = Figures(messages=len(batch))
    figures.valid_ids = [m.valid_id for m in batch if m.valid_id]
    figures.valid = len(figures.valid_ids)
    lines = _Lines()
    loggers = [logging.getLogger("outbox"), logging.getLogger("outbox_adapters")]
    for logger in loggers:
        logger.addHandler(lines)
    try:

        async def scenario() -> None:
            broker = connect()
            try:
                await publish(broker, topic, batch)
                await _consume(dsn, broker, topic, figures, within=within)
                figures.dlq_copies_max = await _copies(broker, topic)
            finally:
                await broker.aclose()

        asyncio.run(scenario())
    finally:
        for logger in loggers:
            logger.removeHandler(lines)
    printed = ""
    if url is not None:  # the operator's view: `outbox dlq list`, text and JSON
        shown = outbox("dlq", "list", "--broker", url, "--topic", topic, "--limit", "10000")
        assert shown.exit_code == 0, shown.output
        as_json = outbox("dlq", "list", "--broker", url, "--topic", topic, "--json")
        assert as_json.exit_code == 0, as_json.output
        json.loads(as_json.output)
        printed = shown.output + as_json.output
    figures.raw_out = sum(_raw_controls(line) for line in lines.lines) + _raw_controls(printed)
    figures.longest_log = max((len(line) for line in lines.lines), default=0)
    report(figures.line(name))
    assert figures.crashes == 0, figures.stats
    assert figures.stuck == 0, figures.stats
    assert figures.delivered == figures.valid, figures.stats
    assert figures.dlq_copies_max <= 1
    assert figures.raw_out == 0, [line for line in lines.lines if _raw_controls(line)][:3]
    assert figures.longest_log <= LONGEST_LOG_LINE
    return figures


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _unique(i: int, value: str | bytes | None) -> str | bytes | None:
    """Each message's id distinct (two hostile ids alike would rightly share one park)."""
    if value is None:
        return None
    return (b"%d-" % i + value) if isinstance(value, bytes) else f"{i}-{value}"


# --- the brokers ------------------------------------------------------------------------------


async def _publish_memory(broker: MemoryBroker, topic: str, batch: list[Fuzzed]) -> None:
    await broker.declare(StreamSpec(name="p7", subjects=(topic,)))
    publisher = broker.publisher()
    for i, m in enumerate(batch):
        headers = {k: _text(v) for k, v in m.headers}
        ce_id = _text(_unique(i, m.ce_id)) if m.valid_id is None else m.valid_id
        if m.has_ce_id:
            headers[EVENT_ID_HEADER] = ce_id
        message = BrokerMessage(
            subject=topic, key="k", message_id=ce_id or f"m{i}", body=m.body, headers=headers
        )
        outcome = await publisher.publish(message, budget=timedelta(seconds=5))
        assert outcome.kind.value == "sent", outcome


@given(batch=_batches())
@FUZZ_SETTINGS
def test_p7_memory_broker_fuzz(
    batch: list[Fuzzed], dsn: str, report: Callable[[str], None]
) -> None:
    _fuzz("memory", batch, dsn, report, MemoryBroker, _publish_memory, url=None, within=30)


async def _publish_nats(broker: NatsBroker, topic: str, batch: list[Fuzzed]) -> None:
    await broker.declare(StreamSpec(name=topic.replace(".", "_"), subjects=(topic,)))
    js = await broker.jetstream()
    for i, m in enumerate(batch):
        headers = {k: _text(v) or "-" for k, v in m.headers}
        if m.has_ce_id:
            headers[EVENT_ID_HEADER] = m.valid_id or _text(_unique(i, m.ce_id))
        headers["Nats-Msg-Id"] = f"p7-{i}"
        await js.publish(topic, m.body, headers=headers)


@given(batch=_batches(wire_safe=True))
@FUZZ_SETTINGS
def test_p7_nats_fuzz(
    batch: list[Fuzzed], dsn: str, nats_url: str, report: Callable[[str], None]
) -> None:
    def connect() -> Any:
        return broker_from_url(nats_url)

    _fuzz("nats", batch, dsn, report, connect, _publish_nats, url=nats_url, within=60)


async def _publish_kafka(broker: KafkaBroker, topic: str, batch: list[Fuzzed]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, **broker.security)
    await producer.start()
    try:
        await producer.partitions_for(topic)  # the mock cluster creates it
        await producer.partitions_for(f"{topic}.dlq")
        for i, m in enumerate(batch):
            headers: list[tuple[str, bytes | None]] = [
                (k, v.encode("utf-8", "surrogatepass") if isinstance(v, str) else v)
                for k, v in m.headers
            ]
            if m.has_ce_id:
                raw = m.valid_id or _unique(i, m.ce_id)
                value = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
                headers.append((EVENT_ID_HEADER, value))
            await producer.send_and_wait(topic, m.body, key=b"k", headers=headers)
    finally:
        await producer.stop()


@given(batch=_batches(nullable=True))
@FUZZ_SETTINGS
def test_p7_kafka_fuzz(
    batch: list[Fuzzed], dsn: str, kafka_url: str, report: Callable[[str], None]
) -> None:
    def connect() -> Any:
        return broker_from_url(kafka_url)

    _fuzz("kafka", batch, dsn, report, connect, _publish_kafka, url=kafka_url, within=90)
