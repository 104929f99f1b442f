"""The e-mail step chain end to end (ADR 0015): real PostgreSQL, real SMTP servers, the real worker.

What it promises:

- the SMTP dial lasts what ``outbox worker --budget dial=N`` says (the mailer takes its windows from
  the same step budgets the lease is derived from);
- every other step of the chain is enforced too: a suppression check, a branding lookup or a bounce
  report that overruns its budget or raises is the row's transient failure, naming the step;
- suppression is per recipient: one suppressed recipient fails the row at once, before any SMTP
  traffic, naming it;
- partial acceptance: recipients accepted at RCPT are never sent the message again, 4xx-refused
  ones are retried, 5xx-refused ones fail the row with the address in ``outbox failed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from email import message_from_bytes, policy
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result
from tests.support.postgres import stored as row
from tests.support.smtp import SENDER, settings_for

from outbox_adapters.cli import main
from outbox_adapters.clock import SystemClock
from outbox_adapters.demo.run import FlakySinkHandler
from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.lanes.email import Branding, EmailHandler, email_lane, email_message
from outbox_adapters.postgres import PostgresStore, enqueue
from outbox_adapters.runtime import Worker
from outbox_adapters.smtp import SmtpMailer
from outbox_core.backoff import SlotSchedule
from outbox_core.outcomes import Refusal
from outbox_core.recipients import DELIVERED_KEY
from outbox_core.timing import EmailStepBudgets, EmailTiming

pytestmark = pytest.mark.integration

#: How late an attempt may end after its step's budget on a loaded two-core machine.
LATE = 1.0
#: The small budgets of these tests: only the step under test is long.
SMALL_STEPS = (
    "--budget", "suppression=0.2", "--budget", "branding=0.2", "--budget", "smtp_exchange=2",
    "--budget", "bounce_report=0.2", "--budget", "mark=1", "--budget", "lease_grace=5",
)  # fmt: skip


@pytest.fixture
def blackhole() -> Iterator[int]:
    """A port whose TCP handshake completes (the kernel's backlog) but that never says a word:
    an SMTP client connecting there waits for a greeting that never comes."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # never accepted: the connections sit in the backlog
        yield listener.getsockname()[1]


def outbox(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def enqueue_cli(dsn: str, lane: str, to: str) -> int:
    result = outbox(
        "enqueue", "email", "--database-url", dsn, "--lane", lane, "--to", to,
        "--subject", "Hello", "--text", "Hello there",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return int(result.stdout.split()[-1])


@pytest.mark.parametrize("dial", [1.5, 3.0])
def test_the_worker_s_dial_budget_is_the_real_dial_timeout(dsn, lane, blackhole, dial):
    row_id = enqueue_cli(dsn, lane, "ann@example.org")

    result = outbox(
        "worker", "--drain", "--database-url", dsn, "--lane", lane,
        "--smtp-url", f"smtp://127.0.0.1:{blackhole}", "--sender", SENDER,
        "--poll-interval", "0.1", "--no-listen", *SMALL_STEPS, "--budget", f"dial={dial}",
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert f"dial {dial:g}s" in result.stdout  # the timing line prints the figure it enforces
    attempt = row(dsn, row_id)
    assert attempt["status"] == "pending"  # a dial that timed out is transient
    assert attempt["last_error"] == (f"SMTP failure at connect: timed out (dial, budget {dial:g}s)")
    # From the claim to the mark, on the database's clock: the dial's budget, and not much more.
    took = (attempt["updated_at"] - attempt["claimed_at"]).total_seconds()
    assert dial - 0.05 <= took < dial + LATE


# --- the hooks: each under its own budget ---------------------------------------------------------

#: Short hook budgets, so an overrun is quick; the SMTP steps have room.
STEPS = EmailStepBudgets(
    suppression=timedelta(seconds=0.3),
    branding=timedelta(seconds=0.3),
    dial=timedelta(seconds=2),
    smtp_exchange=timedelta(seconds=3),
    bounce_report=timedelta(seconds=0.3),
    mark=timedelta(seconds=1),
)
TIMING = EmailTiming(STEPS, batch_size=5, lease_grace=timedelta(seconds=5))


@pytest.fixture
async def mailer(sink: SmtpSink) -> AsyncIterator[SmtpMailer]:
    async with SmtpMailer(settings_for(sink), steps=STEPS) as opened:
        yield opened


def put(dsn: str, lane: str, *to: str, **fields: str) -> int:
    message = email_message(
        to=list(to), subject="Hello from $brand", text="Hi, $brand here.", lane=lane,
        fields={"brand": "Shop", **fields},
    )  # fmt: skip
    with psycopg.connect(dsn) as conn, conn.transaction():
        return int(enqueue(conn, message).row_id)


async def drain(store: PostgresStore, lane: str, mailer: SmtpMailer, **hooks: Any) -> None:
    handler = EmailHandler(mailer, sender=SENDER, clock=SystemClock(), steps=STEPS, **hooks)
    config = email_lane(
        lane=lane, timing=TIMING, poll_interval=0.05, backoff=SlotSchedule((timedelta(minutes=1),))
    )
    await Worker(store, handler, config, clock=SystemClock()).run(drain=True)


async def slow(*_args: object) -> None:
    await asyncio.sleep(5)


def broken(*_args: object) -> None:
    raise LookupError


@pytest.mark.parametrize(
    ("hooks", "reason"),
    [
        ({"suppressed": slow}, "suppression check exceeded its 0.3s budget"),
        ({"suppressed": broken}, "suppression check raised LookupError"),
        ({"suppressed": lambda to: False}, "suppression check returned bool, not a collection of addresses"),
        ({"branding": slow}, "branding exceeded its 0.3s budget"),
        ({"branding": broken}, "branding raised LookupError"),
        ({"branding": lambda row: "Acme"}, "branding returned str, not Branding or None"),
    ],
    ids=["suppression-slow", "suppression-raises", "suppression-bool", "branding-slow",
         "branding-raises", "branding-str"],
)  # fmt: skip
async def test_a_hook_before_the_send_that_overruns_or_fails_is_a_transient_failure_naming_it(  # noqa: PLR0917 - fixtures
    dsn, lane, store, mailer, sink, hooks, reason
):
    row_id = put(dsn, lane, "ann@example.org")
    started = asyncio.get_running_loop().time()

    await drain(store, lane, mailer, **hooks)

    assert asyncio.get_running_loop().time() - started < 0.3 + LATE  # the budget, not 5 s
    attempt = row(dsn, row_id)
    assert (attempt["status"], attempt["last_error"]) == ("pending", reason)
    assert sink.received == []  # before the send: no SMTP traffic for the row
    assert mailer.stats.connections_opened == 0


async def test_a_bounce_report_that_overruns_retries_the_row_but_never_resends_to_the_accepted(
    dsn, lane, store, mailer, sink
):
    row_id = put(dsn, lane, "ann@example.org", "bounce-1@example.org")

    await drain(store, lane, mailer, bounce_report=slow)

    attempt = row(dsn, row_id)
    assert attempt["status"] == "pending"
    assert attempt["last_error"] == "bounce report exceeded its 0.3s budget (after the send)"
    assert attempt["payload"][DELIVERED_KEY] == ["ann@example.org"]
    assert [mail.recipients for mail in sink.received] == [("ann@example.org",)]


async def test_hooks_that_answer_in_time_run_and_the_bounce_report_hears_the_refusals(
    dsn, lane, store, mailer, sink
):
    row_id = put(dsn, lane, "ann@example.org", "bounce-1@example.org")
    asked: list[tuple[str, ...]] = []
    reports: list[tuple[Any, tuple[Refusal, ...]]] = []

    async def suppressed(to: tuple[str, ...]) -> list[str]:
        asked.append(to)
        return []

    def branding(_row: object) -> Branding:  # a plain callable runs in a thread
        return Branding(sender_name="Acme Billing", fields={"brand": "Acme"})

    async def bounce_report(claimed: Any, refusals: tuple[Refusal, ...]) -> None:
        reports.append((claimed.id, refusals))

    await drain(
        store, lane, mailer, suppressed=suppressed, branding=branding, bounce_report=bounce_report
    )

    assert asked == [("ann@example.org", "bounce-1@example.org")]
    [mail] = sink.received
    parsed = message_from_bytes(mail.data, policy=policy.default)
    assert parsed["From"] == f"Acme Billing <{SENDER}>"
    assert parsed["Subject"] == "Hello from Acme"  # the tenant's field beats the enqueue-time one
    [(reported_row, refusals)] = reports
    assert reported_row == row_id
    assert [(r.address, r.outcome.reason) for r in refusals] == [
        ("bounce-1@example.org", "SMTP 550 5.1.1: No such user here")
    ]
    attempt = row(dsn, row_id)
    assert attempt["status"] == "failed"
    assert attempt["last_error"] == (
        "recipient bounce-1@example.org refused: SMTP 550 5.1.1: No such user here"
        " (delivered to 1 of 2)"
    )


# --- suppression is per recipient -----------------------------------------------------------------


async def test_one_suppressed_recipient_fails_the_row_before_any_smtp_traffic(
    dsn, lane, store, mailer, sink
):
    row_id = put(dsn, lane, "ann@example.org", "bob@example.org", "cy@example.org")

    async def suppressed(to: tuple[str, ...]) -> set[str]:
        return {"bob@example.org", "nobody-here@example.org"}

    await drain(store, lane, mailer, suppressed=suppressed)

    attempt = row(dsn, row_id)
    assert attempt["status"] == "failed"
    assert attempt["attempts"] == 1  # at once, not after the retry schedule
    assert attempt["last_error"] == "recipient bob@example.org is suppressed"
    assert sink.received == []
    assert mailer.stats.connections_opened == 0  # not even a connection


async def test_every_recipient_suppressed_is_a_failure_naming_them_all(
    dsn, lane, store, mailer, sink
):
    row_id = put(dsn, lane, "ann@example.org", "bob@example.org")

    await drain(store, lane, mailer, suppressed=list)

    attempt = row(dsn, row_id)
    assert (attempt["status"], attempt["last_error"]) == (
        "failed",
        "recipients ann@example.org, bob@example.org are suppressed",
    )
    assert sink.received == []


# --- partial acceptance, through the real worker CLI, PostgreSQL and the demo sink ----------------


def run_worker(dsn: str, lane: str, sink: SmtpSink) -> Result:
    result = outbox(
        "worker", "--drain", "--database-url", dsn, "--lane", lane,
        "--smtp-url", f"smtp://{sink.host}:{sink.port}", "--smtp-ca-file", str(sink.ca_file),
        "--sender", SENDER, "--poll-interval", "0.1", "--no-listen",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return result


def due_now(dsn: str, row_id: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE outbox_message SET next_attempt_at = now() WHERE id = %s", (row_id,))


def received_by(sink: SmtpSink) -> list[str]:
    return sorted(address for mail in sink.received for address in mail.recipients)


def test_a_4xx_refused_recipient_is_retried_and_the_accepted_one_is_not_sent_again(dsn, lane):
    sink = SmtpSink(tls="starttls")
    sink.handler = FlakySinkHandler()  # flaky…: 451 the first time, accepted the second
    with sink:
        row_id = put(dsn, lane, "ann@example.org", "flaky-1@example.org")

        run_worker(dsn, lane, sink)
        first = row(dsn, row_id)
        assert first["status"] == "pending"
        assert first["last_error"] == (
            "recipient flaky-1@example.org refused: SMTP 451 4.3.2: Flaky demo mailbox, please try"
            " again (delivered to 1 of 2; the rest are retried)"
        )
        assert first["payload"][DELIVERED_KEY] == ["ann@example.org"]
        assert received_by(sink) == ["ann@example.org"]

        due_now(dsn, row_id)
        run_worker(dsn, lane, sink)

        second = row(dsn, row_id)
        assert second["status"] == "dispatched"
        assert second["attempts"] == 2
        # Each recipient got the message exactly once, over two attempts.
        assert received_by(sink) == ["ann@example.org", "flaky-1@example.org"]
        assert [mail.recipients for mail in sink.received] == [
            ("ann@example.org",),
            ("flaky-1@example.org",),
        ]
        # The header still names both: one message, delivered in two envelopes.
        to = message_from_bytes(sink.received[1].data, policy=policy.default)["To"]
        assert "ann@example.org" in to
        assert "flaky-1@example.org" in to


def test_a_5xx_refused_recipient_fails_the_row_and_outbox_failed_names_it(dsn, lane):
    with SmtpSink(tls="starttls") as sink:
        row_id = put(
            dsn, lane, "ann@example.org", "bounce-7@example.org", "transient-7@example.org"
        )

        run_worker(dsn, lane, sink)
        first = row(dsn, row_id)
        # A 4xx among the refusals keeps the row pending; the 5xx is named already.
        assert first["status"] == "pending"
        assert first["last_error"].startswith(
            "2 recipients refused: bounce-7@example.org: SMTP 550 5.1.1: No such user here;"
            " transient-7@example.org: SMTP 451 4.3.0"
        )
        assert received_by(sink) == ["ann@example.org"]

    with SmtpSink(tls="starttls") as sink:  # the 4xx one is gone for good now: only 5xx left
        lane2 = f"{lane}-b"
        row2 = put(dsn, lane2, "ann@example.org", "bob@example.org", "bounce-8@example.org")
        run_worker(dsn, lane2, sink)
        failed = row(dsn, row2)
        assert failed["status"] == "failed"
        assert failed["attempts"] == 1
        assert failed["last_error"] == (
            "recipient bounce-8@example.org refused: SMTP 550 5.1.1: No such user here"
            " (delivered to 2 of 3)"
        )
        assert failed["payload"][DELIVERED_KEY] == ["ann@example.org", "bob@example.org"]
        listing = outbox("failed", "--database-url", dsn, "--lane", lane2)
        assert listing.exit_code == 0, listing.output
        assert "recipient bounce-8@example.org refused: SMTP 550 5.1.1" in listing.stdout

        # An operator's requeue sends only to the recipient who never got it.
        requeue = outbox("requeue", "--database-url", dsn, str(row2))
        assert requeue.exit_code == 0, requeue.output
        run_worker(dsn, lane2, sink)
        assert received_by(sink) == ["ann@example.org", "bob@example.org"]  # not again
        assert row(dsn, row2)["status"] == "failed"
