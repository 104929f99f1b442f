"""The e-mail channel end to end: events on a MemoryBroker, the channel's rows in real PostgreSQL,
sent over STARTTLS to a real SMTP server (the sink) by the lane's Worker.

Each test is one promise of ADR 0021 (issue 11, item 4): one e-mail per recipient kind however
often the event is delivered; a consumer killed between writing a row and its send loses nothing;
one recipient failing permanently doesn't affect the other; the DLQ after 5 attempts; the broker
message acknowledged only when every recipient is terminal; an invalid recipient parked.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from datetime import timedelta
from email import message_from_bytes, policy
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool
from tests.support import smtp as smtp_support
from tests.support.channels import (
    DLQ,
    EMAIL_GROUP,
    OWNER,
    channel_pool,
    email_workers,
    publish,
    rows_of,
    tenant_event,
    until,
    wire,
)

from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.lanes.email import EMAIL_LANE, email_message
from outbox_adapters.memory import MemoryBroker
from outbox_adapters.postgres import PostgresStore
from outbox_adapters.postgres.channels import RecipientRows
from outbox_adapters.smtp import SmtpMailer
from outbox_core.delivery import Status
from outbox_core.messages import ClaimToken
from outbox_core.ports import ClaimRequest

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]


@pytest.fixture
async def pool(dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    async with channel_pool(dsn) as made:
        yield made


@pytest.fixture
async def mailer(sink: SmtpSink) -> AsyncIterator[SmtpMailer]:
    made = smtp_support.mailer_for(sink)
    yield made
    await made.aclose()


def mails_to(sink: SmtpSink, address: str) -> list[Any]:
    return [
        message_from_bytes(mail.data, policy=policy.default)
        for mail in sink.handler.snapshot()
        if address in mail.recipients
    ]


async def test_an_event_delivered_three_times_sends_one_email_per_recipient_kind(
    pool: AsyncConnectionPool[Any], sink: SmtpSink, mailer: SmtpMailer, lane: str
) -> None:
    broker = MemoryBroker()
    event = tenant_event()
    # Three copies on the broker (relay replays past its duplicate window), then a restarted
    # consumer that gets all three again.
    await publish(broker, *(wire(event, message_id=f"{event.id}#{n}") for n in range(3)))
    first = await email_workers(pool, broker, mailer, lane).run(drain=True)
    again = await email_workers(pool, broker, mailer, lane).run(drain=True)

    assert len(mails_to(sink, "admin@acme.example")) == 1
    assert len(mails_to(sink, OWNER)) == 1
    assert len(sink.handler.snapshot()) == 2
    keys = [(key, status) for key, status, *_ in await rows_of(pool, lane)]
    assert keys == [
        (f"{event.id}:owner_notify", "dispatched"),
        (f"{event.id}:tenant_welcome", "dispatched"),
    ]
    assert (first.consumer.acked, again.consumer.acked) == (3, 3)
    assert first.sender.dispatched == 2
    assert again.sender.dispatched == 0
    welcome = mails_to(sink, "admin@acme.example")[0]
    assert "https://app.example/login" in welcome.get_content()


async def test_a_consumer_killed_between_writing_its_rows_and_the_send_loses_no_mail(
    pool: AsyncConnectionPool[Any], sink: SmtpSink, mailer: SmtpMailer, lane: str
) -> None:
    broker = MemoryBroker()
    event = tenant_event()
    await publish(broker, wire(event))
    # Process 1: the consumer writes the rows, then dies before anything is sent (its task is
    # cancelled and its state dropped; its lane worker never ran).
    doomed = email_workers(pool, broker, mailer, lane)
    consuming = asyncio.create_task(doomed.consumer.run())

    async def written() -> bool:
        return len(await rows_of(pool, lane)) == 2

    await until(written)
    consuming.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consuming
    # ... and a worker of that process had claimed the rows and died mid-send (a short lease).
    store = PostgresStore(pool)
    claim = ClaimRequest(
        lane=lane, limit=10, lease=timedelta(seconds=1), token=ClaimToken(secrets.token_hex(8))
    )
    assert len(await store.claim_due(claim)) == 2
    await store.close()
    assert sink.handler.snapshot() == []

    # Process 2: the broker redelivers the unacknowledged event.
    stats = await email_workers(pool, broker, mailer, lane).run(drain=True)

    assert len(mails_to(sink, "admin@acme.example")) == 1
    assert len(mails_to(sink, OWNER)) == 1
    assert [(status, attempts) for _, status, attempts, _ in await rows_of(pool, lane)] == [
        ("dispatched", 2),
        ("dispatched", 2),
    ]
    assert stats.consumer.acked >= 1
    assert broker.on(DLQ) == []


async def test_one_recipient_refused_permanently_is_parked_and_the_other_is_sent(
    pool: AsyncConnectionPool[Any], sink: SmtpSink, mailer: SmtpMailer, lane: str
) -> None:
    broker = MemoryBroker()
    event = tenant_event(admin_email="bounce-admin@acme.example")  # the sink answers 550
    await publish(broker, wire(event))
    stats = await email_workers(pool, broker, mailer, lane).run(drain=True)

    assert len(mails_to(sink, OWNER)) == 1
    assert mails_to(sink, "bounce-admin@acme.example") == []
    (parked,) = broker.on(DLQ)
    assert parked.body == event.encode()  # the RAW event
    assert parked.headers["outbox-dlq-kind"] == "tenant_welcome"
    assert parked.headers["outbox-dlq-attempts"] == "1"  # a 550 is final at once
    assert "550" in parked.headers["outbox-dlq-reason"]
    assert parked.headers["outbox-dlq-group"] == EMAIL_GROUP
    assert parked.headers["outbox-dlq-source"] == "platform-events"
    assert parked.headers["ce-id"] == event.id
    assert stats.consumer.acked == 1
    assert stats.consumer.parked == 1


async def test_a_recipient_failing_five_times_is_parked_with_kind_reason_and_attempts_once(
    pool: AsyncConnectionPool[Any], sink: SmtpSink, mailer: SmtpMailer, lane: str
) -> None:
    broker = MemoryBroker()
    event = tenant_event(admin_email="transient-admin@acme.example")  # the sink answers 451
    await publish(broker, wire(event))
    stats = await email_workers(pool, broker, mailer, lane).run(drain=True)

    (parked,) = broker.on(DLQ)
    assert parked.headers["outbox-dlq-kind"] == "tenant_welcome"
    assert parked.headers["outbox-dlq-attempts"] == "5"
    assert "451" in parked.headers["outbox-dlq-reason"]
    assert [(status, attempts) for _, status, attempts, _ in await rows_of(pool, lane)] == [
        ("dispatched", 1),
        ("failed", 5),
    ]
    assert len(mails_to(sink, OWNER)) == 1
    assert stats.consumer.acked == 1
    assert stats.consumer.naked >= 1  # the event waited for the retries, it was not acked early

    # Redelivered after parking (a restarted consumer): the kind is not parked a second time.
    again = await email_workers(pool, broker, mailer, lane).run(drain=True)
    assert again.consumer.parked == 0
    assert again.consumer.acked == 1
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT kind, attempts FROM outbox_channel_parked WHERE event_id = %s", (event.id,)
        )
        assert await cursor.fetchall() == [("tenant_welcome", 5)]


async def test_the_broker_message_is_acked_only_when_every_recipient_is_terminal(
    pool: AsyncConnectionPool[Any], sink: SmtpSink, mailer: SmtpMailer, lane: str
) -> None:
    broker = MemoryBroker()
    event = tenant_event()
    await publish(broker, wire(event))
    workers = email_workers(pool, broker, mailer, lane)
    consumer = broker._consumers[-1]

    # The rows are written but nothing is sent yet (the lane's worker is not running): nak.
    delivery = await anext(aiter(consumer.messages()))
    await workers.consumer.handle(delivery)
    assert consumer.acked == []
    assert workers.consumer.stats.naked == 1
    assert sink.handler.snapshot() == []

    # With the worker sending, the redelivered event settles once both mails are out.
    await workers.run(drain=True)
    assert consumer.acked == [event.id]
    assert len(sink.handler.snapshot()) == 2


async def test_a_dlq_that_refuses_the_park_keeps_the_event_unacknowledged_until_it_works(
    pool: AsyncConnectionPool[Any], sink: SmtpSink, mailer: SmtpMailer, lane: str
) -> None:
    broker, dead = MemoryBroker(), MemoryBroker()
    dead.available = False
    event = tenant_event(admin_email="bounce-admin@acme.example")
    await publish(broker, wire(event))
    workers = email_workers(pool, broker, mailer, lane, dlq=dead)
    consumer = broker._consumers[-1]
    running = asyncio.create_task(workers.run())
    await until(lambda: workers.consumer.stats.dlq_failures >= 2)
    assert consumer.acked == []
    dead.available = True
    await until(lambda: bool(consumer.acked))
    workers.request_stop()
    await running
    assert [m.headers["outbox-dlq-kind"] for m in dead.on(DLQ)] == ["tenant_welcome"]
    assert len(mails_to(sink, OWNER)) == 1


async def test_an_invalid_recipient_is_terminal_and_parked_and_free_text_is_cleaned(
    pool: AsyncConnectionPool[Any], sink: SmtpSink, mailer: SmtpMailer, lane: str
) -> None:
    broker = MemoryBroker()
    event = tenant_event(
        admin_email="a@b.example\r\nRCPT TO:<x@evil.example>",
        tenant_name="Acme\r\nBcc: spy@evil.example\x00",
    )
    await publish(broker, wire(event))
    stats = await email_workers(pool, broker, mailer, lane).run(drain=True)

    (parked,) = broker.on(DLQ)
    assert parked.headers["outbox-dlq-kind"] == "tenant_welcome"
    assert parked.headers["outbox-dlq-attempts"] == "0"
    assert "\n" not in parked.headers["outbox-dlq-reason"]
    assert [key for key, *_ in await rows_of(pool, lane)] == [f"{event.id}:owner_notify"]
    (notice,) = mails_to(sink, OWNER)
    assert notice["Bcc"] is None
    assert notice["Subject"] == "New tenant: Acme  Bcc: spy@evil.example"  # CR LF -> spaces
    assert all("evil" not in r for mail in sink.handler.snapshot() for r in mail.recipients)
    assert stats.consumer.acked == 1


async def test_a_new_events_rows_are_written_without_reading_them(pool, monkeypatch):
    """PostgreSQL's recipient rows: a new event's rows are written and not read at all (created
    in this transaction, their state is known); a row another process wrote first is the only one
    read back; an event's rows that all exist are read once and nothing is written."""
    rows = RecipientRows(pool, lane=EMAIL_LANE)
    reads: list[list[str]] = []
    read = RecipientRows._read

    async def counted(self: RecipientRows, conn: Any, keys: list[str]) -> Any:
        reads.append(keys)
        return await read(self, conn, keys)

    monkeypatch.setattr(RecipientRows, "_read", counted)

    def made(event: str) -> list[Any]:
        return [
            email_message(
                to=f"{kind}@example.org", subject="s", text="t", idempotency_key=f"{event}:{kind}"
            )
            for kind in ("welcome", "notify")
        ]

    first = await rows.ensure(made("e9"), new=True)
    assert reads == []
    assert {key: (row.status, row.attempts, row.wait) for key, row in first.items()} == {
        "e9:welcome": (Status.PENDING, 0, timedelta(0)),
        "e9:notify": (Status.PENDING, 0, timedelta(0)),
    }
    again = await rows.ensure(made("e9"))
    assert reads == [["e9:welcome", "e9:notify"]]  # one read, and no write: every row was there
    assert again == first

    await rows.ensure(made("e8")[:1])  # another process wrote one of e8's rows
    reads.clear()
    mixed = await rows.ensure(made("e8"), new=True)
    assert reads == [["e8:welcome"]]  # only the row that was there is read back
    assert set(mixed) == {"e8:welcome", "e8:notify"}
