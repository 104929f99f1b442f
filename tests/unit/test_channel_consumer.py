"""The consumer machinery without a database: a MemoryBroker, an in-test park ledger, fake channels."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import attrs
import pytest

from outbox_adapters.lanes.consumer import (
    ChannelConsumer,
    Parked,
    Settlement,
    dlq_message,
)
from outbox_adapters.lanes.email_channel import (
    check_public_url,
    email_channel_disabled_warning,
    email_recipients,
    platform_recipes,
)
from outbox_adapters.lanes.row_channel import Recipient
from outbox_adapters.memory import MemoryBroker
from outbox_core.errors import ConfigurationError
from outbox_core.events import EventEnvelope
from outbox_core.messages import NewMessage
from outbox_core.ports import BrokerMessage, ReceivedMessage

TOPIC = "platform-events"


@attrs.define
class Ledger:
    records: dict[tuple[str, str], set[str]] = attrs.Factory(dict)

    async def parked(self, channel: str, event_id: str) -> frozenset[str]:
        return frozenset(self.records.get((channel, event_id), set()))

    async def record(
        self, channel: str, event_id: str, kind: str, *, reason: str, attempts: int
    ) -> None:
        del reason, attempts
        self.records.setdefault((channel, event_id), set()).add(kind)


@attrs.define
class Scripted:
    """Returns the scripted settlements in turn (the last one for ever)."""

    settlements: list[Settlement]
    name: str = "scripted"
    seen: list[str] = attrs.Factory(list)

    async def deliver(self, event: EventEnvelope, message: ReceivedMessage) -> Settlement:
        del message
        self.seen.append(event.id)
        return self.settlements.pop(0) if len(self.settlements) > 1 else self.settlements[0]


def event() -> EventEnvelope:
    return EventEnvelope(
        id="evt-1",
        type="tenant.provisioned",
        source="auth",
        key="t-1",
        time=datetime(2026, 12, 1, tzinfo=UTC),
        data={"tenant_id": "t-1", "admin_email": "admin@acme.example"},
    )


async def run(broker: MemoryBroker, channel: Scripted, dlq: MemoryBroker | None = None) -> Any:
    consumer = broker.consumer(channel.name, [TOPIC])
    machinery = ChannelConsumer(
        consumer,
        channel,
        dlq=(dlq or broker).publisher(),
        parks=Ledger(),
        retry_delay=timedelta(milliseconds=20),
        drain_idle=timedelta(milliseconds=100),
    )
    return await machinery.run(drain=True), consumer


async def publish(broker: MemoryBroker, body: bytes) -> None:
    message = BrokerMessage(subject=TOPIC, key="t-1", message_id="evt-1", body=body)
    await broker.publisher().publish(message, budget=timedelta(seconds=1))


async def test_not_terminal_is_nakd_with_the_channel_s_delay_then_acked_once_terminal() -> None:
    broker = MemoryBroker()
    await publish(broker, event().encode())
    channel = Scripted([Settlement.later(timedelta(milliseconds=10)), Settlement.done()])
    stats, consumer = await run(broker, channel)
    assert channel.seen == ["evt-1", "evt-1"]
    assert (stats.naked, stats.acked) == (1, 1)
    assert consumer.acked == ["evt-1"]


async def test_a_kind_is_parked_once_however_often_the_channel_reports_it() -> None:
    broker = MemoryBroker()
    await publish(broker, event().encode())
    bad = Parked("tenant_welcome", "550 no such user\r\nX-Injected: 1", attempts=1)
    channel = Scripted([Settlement.later(None, bad), Settlement.done(bad)])
    stats, _ = await run(broker, channel)
    (dead,) = broker.on(f"{TOPIC}.dlq")
    assert dead.headers["outbox-dlq-reason"] == "550 no such user  X-Injected: 1"
    assert stats.parked == 1


async def test_a_failed_park_is_never_acknowledged() -> None:
    broker, dead = MemoryBroker(), MemoryBroker()
    dead.available = False
    await publish(broker, event().encode())
    channel = Scripted([Settlement.done(Parked("k", "r"))])
    consumer = broker.consumer(channel.name, [TOPIC])
    machinery = ChannelConsumer(consumer, channel, dlq=dead.publisher(), parks=Ledger())
    delivery = await anext(aiter(consumer.messages()))
    await machinery.handle(delivery)
    assert consumer.acked == []
    assert machinery.stats.dlq_failures == 1


async def test_a_channel_error_is_nakd_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        name = "broken"

        async def deliver(self, event: EventEnvelope, message: ReceivedMessage) -> Settlement:
            raise RuntimeError("database on fire")

    broker = MemoryBroker()
    await publish(broker, event().encode())
    consumer = broker.consumer("broken", [TOPIC])
    machinery = ChannelConsumer(consumer, Broken(), dlq=broker.publisher(), parks=Ledger())
    with caplog.at_level(logging.WARNING):
        await machinery.handle(await anext(aiter(consumer.messages())))
    assert (machinery.stats.errors, machinery.stats.naked, consumer.acked) == (1, 1, [])
    assert "database on fire" in caplog.text


def test_dlq_message_keeps_the_raw_body_and_names_its_origin() -> None:
    class Delivery:
        message_id = "evt-1"
        body = b"raw"
        subject = TOPIC
        headers: ClassVar[dict[str, str]] = {"ce-id": "evt-1"}
        deliveries = 3

        async def ack(self) -> None: ...
        async def nak(self, *, delay: timedelta | None = None) -> None: ...

    made = dlq_message(Delivery(), group="g", parked=Parked("k", "", attempts=2))
    assert (made.subject, made.body, made.message_id) == (f"{TOPIC}.dlq", b"raw", "evt-1/g/k")
    assert made.headers == {
        "ce-id": "evt-1",
        "outbox-dlq-kind": "k",
        "outbox-dlq-reason": "no reason given",
        "outbox-dlq-attempts": "2",
        "outbox-dlq-group": "g",
        "outbox-dlq-source": TOPIC,
    }


def test_the_recipes_refuse_what_is_no_address_and_the_settings_what_is_no_url() -> None:
    recipients = email_recipients(platform_recipes("https://app.example/", None))
    made = recipients(attrs.evolve(event(), data={"admin_email": "Ada <a@b.example>"}))
    assert [(r.kind, r.message is None) for r in made] == [("tenant_welcome", True)]
    assert "undeliverable" in str(made[0].refusal)
    (ok,) = recipients(event())
    assert ok.message is not None
    assert ok.message.lane == "notification-email"
    assert ok.message.payload["login_url"] == "https://app.example/login"
    with pytest.raises(ConfigurationError, match="public URL"):
        check_public_url("javascript:alert(1)")
    with pytest.raises(ValueError, match="message or a refusal"):
        Recipient("k", message=NewMessage("x", {}), refusal="both")


def test_without_smtp_the_email_channel_says_why_it_is_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        said = email_channel_disabled_warning()
    assert "SMTP is not configured" in said
    assert said in caplog.text
