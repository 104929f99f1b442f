"""What the event demo found, and what it must show (:class:`EventDemoReport`).

The figures are read back from where the parts left them: the event outbox (published, attempts),
the e-mail channel's rows, the in-app feed's rows, the parking ledger, and the mails the SMTP sink
received. :meth:`EventDemoReport.broken` names every promise they do not keep.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from email.parser import BytesHeaderParser
from email.policy import default as default_policy
from typing import Any, Final

import attrs
from psycopg_pool import AsyncConnectionPool

from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.lanes.email_channel import EMAIL_CHANNEL_LANE

__all__ = [
    "PLATFORM_OWNER",
    "EventDemoReport",
    "EventRow",
    "Outage",
    "event_row",
    "read_report",
    "received_mails",
    "settled",
]

#: Where ``owner_notify`` goes: the recipes send it there, the report counts it from there.
PLATFORM_OWNER: Final = "owner@demo.example"
KINDS: Final = ("tenant_welcome", "owner_notify")
AUDIENCES: Final = ("platform", "tenant")

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


async def event_row(pool: AsyncConnectionPool[Any], event_id: str) -> tuple[Any, ...] | None:
    async with pool.connection() as conn:
        cur = await conn.execute(EVENTS, {"ids": [event_id]})
        row = await cur.fetchone()
    return None if row is None else tuple(row)


async def settled(
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
    mails = sum(received_mails(sink).values())
    return published == tenants and feed == 2 * tenants and mails >= 2 * tenants


def received_mails(sink: SmtpSink) -> dict[tuple[str, str], int]:
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


async def read_report(
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
    for (kind, who), count in received_mails(sink).items():
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
