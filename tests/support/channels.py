"""The consumer channels as a test drives them: events on a ``MemoryBroker``, the channels on a real
PostgreSQL pool and, for e-mail, a real SMTP server (the sink)."""

from __future__ import annotations

import asyncio
import inspect
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg_pool import AsyncConnectionPool

from outbox_adapters.lanes.channel_workers import ChannelTiming, EmailChannelWorkers
from outbox_adapters.lanes.email_channel import email_channel_lane, platform_recipes
from outbox_adapters.memory import MemoryBroker
from outbox_adapters.smtp import SmtpMailer
from outbox_core.backoff import ExponentialBackoff
from outbox_core.events import CONTENT_TYPE, EventEnvelope
from outbox_core.ports import BrokerMessage

TOPIC = "platform-events"
DLQ = f"{TOPIC}.dlq"
PUBLIC_URL = "https://app.example"
OWNER = "owner@platform.example"
EMAIL_GROUP = "notification-email"
INAPP_GROUP = "notification-inapp"

#: The consumer's figures, shrunk.
FAST = ChannelTiming(
    retry_delay=timedelta(milliseconds=100),
    overrun_delay=timedelta(milliseconds=100),
    drain_idle=timedelta(milliseconds=400),
    recheck=timedelta(milliseconds=50),
    recheck_cap=timedelta(milliseconds=300),
)
#: CONSUMER_BACKOFF's shape (5 attempts, doubling), in milliseconds.
FAST_BACKOFF = ExponentialBackoff(
    max_attempts=5, base=timedelta(milliseconds=20), cap=timedelta(milliseconds=160)
)


def tenant_event(**data: Any) -> EventEnvelope:
    """A ``tenant.provisioned`` event; ``data`` overrides its fields."""
    tenant = f"t-{secrets.token_hex(4)}"
    fields = {
        "tenant_id": tenant,
        "tenant_name": "Acme",
        "tenant_slug": "acme",
        "status": "active",
        "admin_user_id": "u-1",
        "admin_email": "admin@acme.example",
        "admin_display_name": "Ada",
        "signup_source": "self-serve",
        **data,
    }
    return EventEnvelope(
        id=f"evt-{secrets.token_hex(8)}",
        type="tenant.provisioned",
        source="auth",
        key=tenant,
        time=datetime.now(UTC),
        data=fields,
    )


def wire(event: EventEnvelope, *, message_id: str | None = None) -> BrokerMessage:
    """The broker message the relay publishes for ``event``."""
    return BrokerMessage(
        subject=TOPIC,
        key=event.key,
        message_id=message_id or event.id,
        body=event.encode(),
        headers={
            "content-type": CONTENT_TYPE,
            "ce-id": event.id,
            "ce-type": event.type,
            "ce-source": event.source,
        },
    )


async def publish(broker: MemoryBroker, *messages: BrokerMessage) -> None:
    for message in messages:
        outcome = await broker.publisher().publish(message, budget=timedelta(seconds=1))
        assert outcome.kind.value == "sent"


@asynccontextmanager
async def channel_pool(dsn: str) -> AsyncIterator[AsyncConnectionPool[Any]]:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        dsn,
        min_size=1,
        max_size=4,
        kwargs={"autocommit": True, "options": "-c lock_timeout=2000"},
        open=False,
    )
    async with pool:
        yield pool


def email_workers(
    pool: AsyncConnectionPool[Any],
    broker: MemoryBroker,
    mailer: SmtpMailer,
    lane: str,
    *,
    dlq: MemoryBroker | None = None,
    owner: str | None = OWNER,
    sender: str = "noreply@shop.example",
) -> EmailChannelWorkers:
    """The e-mail channel on a fresh consumer of its group (a process that just started)."""
    return EmailChannelWorkers(
        pool,
        broker.consumer(EMAIL_GROUP, [TOPIC]),
        (dlq or broker).publisher(),
        mailer,
        sender=sender,
        recipes=platform_recipes(PUBLIC_URL, owner),
        lane_config=email_channel_lane(lane=lane, backoff=FAST_BACKOFF, poll_interval=0.05),
        timing=FAST,
    )


async def rows_of(pool: AsyncConnectionPool[Any], lane: str) -> list[tuple[Any, ...]]:
    """(idempotency_key, status, attempts, last_error) of the lane's rows, by key."""
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT idempotency_key, status, attempts, last_error FROM outbox_message"
            " WHERE lane = %s ORDER BY idempotency_key",
            (lane,),
        )
        return list(await cursor.fetchall())


async def until(condition: Callable[[], Awaitable[bool] | bool], *, within: float = 10) -> None:
    """Wait until ``condition()`` (awaited when it is a coroutine) holds, polling."""
    async with asyncio.timeout(within):
        while True:
            found = condition()
            if await found if inspect.isawaitable(found) else found:
                return
            await asyncio.sleep(0.02)
