"""F7 — hostile SMTP servers (RELIABILITY.md): the real worker, PostgreSQL and mailer against each.

For every hostile server (no STARTTLS advertised, a certificate the client doesn't trust, hang after
connect, hang after DATA, slow drip, 4xx, 5xx, disconnect mid-exchange) one batch of two rows is
claimed: row 1 goes to the hostile server, row 2 to a well-behaved sink. The test counts, from what
the servers saw and what the database holds:

- plaintext MAIL/RCPT/DATA/AUTH commands: 0 (mechanism: strict STARTTLS in ``outbox_core.tls`` +
  certificate verification in ``SmtpSettings.context``; with either gone, the no-STARTTLS or the
  bad-certificate server receives MAIL);
- each hostile attempt ends within its own deadline + 10% (mechanism: the mailer's absolute
  ``asyncio.timeout_at`` windows, dial 2 s then exchange 2 s; the worker's own per-row cut is set
  well beyond them, so without the mailer's windows the hung servers overrun);
- the next row still goes out (the worker is not wedged, the batch goes on);
- 4xx → retry (pending, due later), 5xx → failed at once (mechanism: ``classify_smtp_reply``).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
from tests.faults.smtp_servers import (
    PLAINTEXT_SENSITIVE,
    Hostility,
    RawSmtpServer,
    no_starttls_sink,
    untrusted_context,
)
from tests.support.postgres import enqueue_all, stored
from tests.support.smtp import smtp_settings

from outbox_adapters.clock import SystemClock
from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.lanes.email import EmailHandler, email_lane, email_message
from outbox_adapters.postgres import PostgresStore
from outbox_adapters.runtime import Worker
from outbox_adapters.smtp import SmtpMailer
from outbox_core.backoff import SlotSchedule
from outbox_core.messages import ClaimedRow
from outbox_core.outcomes import Outcome
from outbox_core.timing import EmailStepBudgets, EmailTiming

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

SENDER = "noreply@shop.example"
DIAL = timedelta(seconds=2)
EXCHANGE = timedelta(seconds=2)
#: The worker's own per-row cut is 8.3 s (per-row 9.3 s minus the 1 s mark budget): far enough beyond
#: dial + exchange (4 s) that only the mailer's windows can explain an attempt ending in time.
TIMING = EmailTiming(
    EmailStepBudgets(
        suppression=timedelta(seconds=0.1),
        branding=timedelta(seconds=0.1),
        dial=DIAL,
        smtp_exchange=EXCHANGE,
        # Unused here (no bounce-report hook): it pads the row so the worker's cut stays at 8.3 s.
        bounce_report=timedelta(seconds=4.1),
        mark=timedelta(seconds=1),
    ),
    batch_size=2,
    lease_grace=timedelta(seconds=1),
)
RETRY_IN = timedelta(minutes=1)
SLACK = 1.10  # "within its deadline + 10%"


@attrs.frozen
class Peer:
    """Where a hostile scenario's row goes, what the client trusts, and what the server saw."""

    port: int
    context: ssl.SSLContext
    commands: Callable[[], dict[str, int]]
    plaintext: Callable[[], dict[str, int]]


@attrs.frozen
class Scenario:
    name: str
    #: The local part of the hostile row's recipient (the sink fails "transient*"/"bounce*").
    recipient: str
    #: The attempt's own deadline: what the mailer promises for this server.
    deadline: timedelta
    #: The status the hostile row must end in.
    status: str
    #: No MAIL/RCPT/DATA/AUTH may reach this server at all, TLS or not (the client must refuse).
    refuses_before_mail: bool = False


SCENARIOS = [
    Scenario("no STARTTLS", "ann", DIAL + EXCHANGE, "pending", refuses_before_mail=True),
    Scenario("bad certificate", "ann", DIAL + EXCHANGE, "pending", refuses_before_mail=True),
    Scenario("hang after connect", "ann", DIAL, "pending"),
    Scenario("hang after DATA", "ann", DIAL + EXCHANGE, "pending"),
    Scenario("slow drip", "ann", DIAL + EXCHANGE, "pending"),
    Scenario("4xx", "transient", DIAL + EXCHANGE, "pending"),
    Scenario("5xx", "bounce", DIAL + EXCHANGE, "failed"),
    Scenario("disconnect", "ann", DIAL + EXCHANGE, "pending"),
]
FULL_ONLY = [
    Scenario("slow drip banner", "ann", DIAL, "pending"),
    Scenario("disconnect after DATA", "ann", DIAL + EXCHANGE, "pending"),
]


@contextlib.asynccontextmanager
async def hostile_peer(name: str) -> AsyncIterator[Peer]:
    """Start the server a scenario names; yield how to reach it and what it counted."""
    raw: dict[str, dict[str, Any]] = {
        "hang after connect": {"hostility": Hostility.HANG_AFTER_CONNECT},
        "hang after DATA": {"hostility": Hostility.HANG_AFTER_DATA},
        "slow drip": {"hostility": Hostility.SLOW_DRIP, "drip_interval": 0.1},
        "slow drip banner": {
            "hostility": Hostility.SLOW_DRIP,
            "drip_interval": 0.1,
            "drip_banner": True,
        },
        "disconnect": {"hostility": Hostility.DISCONNECT, "disconnect_at": "MAIL"},
        "disconnect after DATA": {"hostility": Hostility.DISCONNECT, "disconnect_at": "DATA"},
    }
    if name in raw:
        async with RawSmtpServer(**raw[name]) as server:
            yield Peer(
                server.port,
                server.client_context(),
                lambda: dict(server.commands),
                lambda: dict(server.plaintext_commands),
            )
        return
    sink = no_starttls_sink() if name == "no STARTTLS" else SmtpSink(tls="starttls")
    with sink:
        context = untrusted_context() if name == "bad certificate" else sink.client_context()
        yield Peer(
            sink.port,
            context,
            lambda: dict(sink.handler.commands),
            lambda: dict(sink.handler.plaintext_commands),
        )


def mailer(port: int, context: ssl.SSLContext) -> SmtpMailer:
    return SmtpMailer(smtp_settings(port, context), steps=TIMING.budgets)


@pytest.fixture
def good_sink(sink: SmtpSink) -> SmtpSink:
    """The well-behaved server: ``sink`` of tests/conftest.py."""
    return sink


async def enqueue_pair(dsn: str, lane: str, hostile_to: str) -> tuple[int, int]:
    """The hostile row first, then the good one, in one transaction (claimed in that order)."""
    messages = [
        email_message(to=to, subject="Hello", text="Hello there", lane=lane)
        for to in (hostile_to, "ok@good.example")
    ]
    hostile, good = await enqueue_all(dsn, messages, notify=False)
    return hostile, good


Handler = Callable[..., Awaitable[Outcome]]


@attrs.define
class Result:
    scenario: Scenario
    attempt_s: float
    plaintext: int
    sensitive_total: int
    next_row_sent: bool
    status: str
    error: str
    due_in_s: float

    @property
    def within_deadline(self) -> bool:
        return self.attempt_s <= self.scenario.deadline.total_seconds() * SLACK

    @property
    def ok(self) -> bool:
        refused = not self.scenario.refuses_before_mail or self.sensitive_total == 0
        retry_later = self.status != "pending" or self.due_in_s > RETRY_IN.total_seconds() / 2
        return (
            self.plaintext == 0
            and refused
            and self.within_deadline
            and self.next_row_sent
            and self.status == self.scenario.status
            and retry_later
        )

    def line(self) -> str:
        return (
            f'F7 server="{self.scenario.name}" plaintext={self.plaintext}'
            f" attempt_s={self.attempt_s:.2f} deadline_s={self.scenario.deadline.total_seconds():.2f}"
            f" next_row={'sent' if self.next_row_sent else 'NOT SENT'} row={self.status}"
            f" error={self.error!r}"
        )


async def run_scenario(
    scenario: Scenario, dsn: str, store: PostgresStore, good: SmtpSink, good_mailer: SmtpMailer
) -> Result:
    lane = f"f7-{secrets.token_hex(4)}"
    hostile_id, good_id = await enqueue_pair(dsn, lane, f"{scenario.recipient}@hostile.example")
    before = len(good.received)
    async with hostile_peer(scenario.name) as peer:
        hostile_mailer = mailer(peer.port, peer.context)
        to_hostile = EmailHandler(hostile_mailer, sender=SENDER, clock=SystemClock())
        to_good = EmailHandler(good_mailer, sender=SENDER, clock=SystemClock())
        spans: dict[int, tuple[float, float]] = {}

        async def route(row: ClaimedRow, *, budget: timedelta) -> Outcome:
            loop = asyncio.get_running_loop()
            started = loop.time()
            target = to_hostile if row.id == hostile_id else to_good
            try:
                return await target(row, budget=budget)
            finally:
                spans[int(row.id)] = (started, loop.time())

        config = email_lane(
            lane=lane, timing=TIMING, poll_interval=0.05, backoff=SlotSchedule((RETRY_IN,))
        )
        report = await asyncio.wait_for(
            Worker(store, route, config, clock=SystemClock()).run_once(), timeout=30
        )
        await hostile_mailer.aclose()
        commands, plaintext = peer.commands(), peer.plaintext()
    assert report.claimed == 2
    start, end = spans[hostile_id]
    hostile = stored(dsn, hostile_id)
    good_row = stored(dsn, good_id)
    delivered = [m for m in good.received[before:] if "ok@good.example" in m.recipients]
    due_in = (hostile["next_attempt_at"] - datetime.now(UTC)).total_seconds()
    return Result(
        scenario=scenario,
        attempt_s=end - start,
        plaintext=sum(plaintext.get(c, 0) for c in PLAINTEXT_SENSITIVE),
        sensitive_total=sum(commands.get(c, 0) for c in PLAINTEXT_SENSITIVE),
        # Row 2 went out after row 1's attempt ended: the hostile server didn't wedge the batch.
        next_row_sent=good_row["status"] == "dispatched"
        and len(delivered) == 1
        and spans[good_id][0] >= end,
        status=hostile["status"],
        error=hostile["last_error"] or "",
        due_in_s=due_in,
    )


async def test_f7_hostile_smtp_servers(
    dsn: str, good_sink: SmtpSink, chaos_full: bool, report: Callable[[str], None]
) -> None:
    scenarios = SCENARIOS + (FULL_ONLY if chaos_full else [])
    rounds = 3 if chaos_full else 1
    results: list[Result] = []
    good_mailer = mailer(good_sink.port, good_sink.client_context())
    async with await PostgresStore.open(dsn, max_size=4) as store:
        for _ in range(rounds):
            for scenario in scenarios:
                result = await run_scenario(scenario, dsn, store, good_sink, good_mailer)
                report(result.line())
                results.append(result)
    await good_mailer.aclose()

    plaintext = sum(r.plaintext for r in results)
    over = sum(not r.within_deadline for r in results)
    sent = sum(r.next_row_sent for r in results)
    by_name = {r.scenario.name: r for r in results}
    report(
        f"F7 servers={len(scenarios)} attempts={len(results)} plaintext={plaintext}"
        f" over_deadline={over} next_row_sent={sent}/{len(results)}"
        f" 4xx={by_name['4xx'].status} 5xx={by_name['5xx'].status}"
        f" max_overrun={max(r.attempt_s / r.scenario.deadline.total_seconds() for r in results):.2f}x"
    )
    failed = [r.line() for r in results if not r.ok]
    assert not failed, "\n".join(failed)
