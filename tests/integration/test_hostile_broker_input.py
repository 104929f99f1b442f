"""Hostile broker input against the real servers (docs/reliability.md, hostile input): a Kafka
record with a null header value, ids too long or unprintable for the store, terminal escapes in a
DLQ listing, and the store's data errors told apart from its outages."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from psycopg_pool import AsyncConnectionPool
from tests.support.channels import tenant_event
from tests.support.cli import outbox
from tests.support.postgres import query

from outbox_adapters.brokers import KafkaBroker, broker_from_url
from outbox_adapters.postgres.channels import PostgresParkLedger
from outbox_core.brokers import DLQ_KIND, DLQ_SOURCE, EVENT_ID_HEADER
from outbox_core.errors import StoreDataError, StoreUnavailable
from outbox_core.untrusted import MAX_ID

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("kafka_leftovers")]

ESCAPES = "\x1b[2J\x1b]0;pwned\x07\r\nforged: line"


@pytest.fixture
async def pool(dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    made: AsyncConnectionPool[Any] = AsyncConnectionPool(dsn, min_size=1, max_size=2, open=False)
    await made.open()
    yield made
    await made.close()


@pytest.mark.parametrize(
    "event_id", [secrets.token_hex(3000), "nul\x00byte"], ids=["6kb-id", "nul-id"]
)
async def test_a_value_the_ledger_cannot_hold_is_a_data_error_not_an_outage(
    pool: AsyncConnectionPool[Any], event_id: str
) -> None:
    ledger = PostgresParkLedger(pool)
    with pytest.raises(StoreDataError) as caught:
        await ledger.record("p7", event_id, "undecodable", reason="r", attempts=1)
    assert not isinstance(caught.value, StoreUnavailable)
    assert "unavailable" not in str(caught.value)
    assert event_id not in str(caught.value)


async def _produce(broker: KafkaBroker, topic: str, records: list[tuple[bytes, list[Any]]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, **broker.security)
    await producer.start()
    try:
        for body, headers in records:
            await producer.send_and_wait(topic, body, key=b"k", headers=headers)
    finally:
        await producer.stop()


def test_a_kafka_record_with_a_null_header_does_not_stop_outbox_consume(
    dsn: str, kafka_url: str
) -> None:
    """The poison pill: a null header value (legal in Kafka) used to crash the consumer before
    the message's handling, so the offset was never committed and every restart died on it."""
    topic = f"p7-null-{secrets.token_hex(4)}"
    before, after = tenant_event(), tenant_event()
    pill = [("x-note", None), (EVENT_ID_HEADER, b"pill-" + secrets.token_hex(4).encode())]
    broker = broker_from_url(kafka_url)
    assert isinstance(broker, KafkaBroker)
    asyncio.run(
        _produce(
            broker,
            topic,
            [
                (before.encode(), [(EVENT_ID_HEADER, before.id.encode())]),
                (b"{}", pill),
                (after.encode(), [(EVENT_ID_HEADER, after.id.encode()), ("x-null", None)]),
            ],
        )
    )
    feed = outbox(
        "consume", "--channel", "inapp", "--database-url", dsn, "--broker", kafka_url,
        "--topic", topic, "--drain",
    )  # fmt: skip
    assert feed.exit_code == 0, feed.output
    rows = query(
        dsn,
        "SELECT DISTINCT event_id FROM outbox_notification WHERE event_id = ANY(%s) ORDER BY 1",
        [before.id, after.id],
    )
    assert rows == sorted([(before.id,), (after.id,)])
    listed = outbox("dlq", "list", "--broker", kafka_url, "--topic", topic, "--json")
    assert listed.exit_code == 0, listed.output
    letters = json.loads(listed.stdout)["dead_letters"]
    assert [(d["kind"], d["message_id"].startswith("pill-")) for d in letters] == [
        ("undecodable", True)
    ]


def test_dlq_list_and_redrive_read_null_headers_and_escape_what_they_print(kafka_url: str) -> None:
    topic = f"p7-dlq-{secrets.token_hex(4)}"
    broker = broker_from_url(kafka_url)
    assert isinstance(broker, KafkaBroker)
    headers = [
        (EVENT_ID_HEADER, ESCAPES.encode()),
        (DLQ_KIND, b"undecodable\x1b[31m"),
        (DLQ_SOURCE, topic.encode()),
        ("x-null", None),
    ]
    asyncio.run(_produce(broker, f"{topic}.dlq", [(b"raw", headers)]))
    shown = outbox("dlq", "list", "--broker", kafka_url, "--topic", topic)
    assert shown.exit_code == 0, shown.output
    assert "\x1b" not in shown.output
    assert "\r" not in shown.output
    assert len(shown.output.strip().splitlines()) == 1
    assert "\\x1b[2J" in shown.output
    redriven = outbox("dlq", "redrive", "--broker", kafka_url, "--topic", topic)
    assert redriven.exit_code == 0, redriven.output
    assert "1 event(s)" in redriven.output


def test_messages_with_ids_the_store_cannot_hold_are_parked_once_not_redelivered(
    dsn: str, kafka_url: str
) -> None:
    """Two messages that are no events, one with a 6 KB ``ce-id`` (too big for the park ledger's
    index as it is) and one holding a NUL: before, each was nak'd and redelivered without end
    (22 deliveries in 25 s, 22 DLQ copies). Now each is parked once, under its bounded id, and
    ``outbox consume --drain`` ends."""
    topic = f"p7-ids-{secrets.token_hex(4)}"
    broker = broker_from_url(kafka_url)
    assert isinstance(broker, KafkaBroker)
    long_id, nul_id = "L" * 6000, "nul\x00" + secrets.token_hex(4)
    asyncio.run(
        _produce(
            broker,
            topic,
            [
                (b"not json", [(EVENT_ID_HEADER, long_id.encode())]),
                (b"not json", [(EVENT_ID_HEADER, nul_id.encode())]),
            ],
        )
    )
    consumed = outbox(
        "consume", "--channel", "inapp", "--database-url", dsn, "--broker", kafka_url,
        "--topic", topic, "--drain",
    )  # fmt: skip
    assert consumed.exit_code == 0, consumed.output
    listed = outbox("dlq", "list", "--broker", kafka_url, "--topic", topic, "--json")
    assert listed.exit_code == 0, listed.output
    letters = json.loads(listed.stdout)["dead_letters"]
    assert sorted(d["kind"] for d in letters) == ["undecodable", "undecodable"]
    ids = sorted(d["message_id"] for d in letters)
    assert all(len(i) <= MAX_ID and i.isprintable() for i in ids)
    assert ids[0].startswith("LLLL")
    assert "~sha256:" in ids[0]
    assert ids[1].startswith("nul\\x00")
    parked = query(
        dsn, "SELECT count(*) FROM outbox_channel_parked WHERE event_id = ANY(%s)", [ids]
    )
    assert parked == [(2,)]
