"""The e-mail worker end to end: real PostgreSQL, a real SMTP server (aiosmtpd, STARTTLS), the real loop.

These are the design record's test locks that need the whole pipeline: a mark survives the batch's
cancellation, a permanent error fails at once, a raising row doesn't strand the batch, strict
STARTTLS refuses a server that doesn't offer it, a row cut off mid-send keeps its lease, and a
graceful stop gives unstarted rows back.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email import message_from_bytes, policy
from typing import Any

import psycopg
import pytest
from tests.support import smtp as smtp_support
from tests.support.postgres import enqueue_all
from tests.support.postgres import stored_rows as rows
from tests.support.smtp import SENDER

from outbox_adapters import runtime as worker_module
from outbox_adapters.clock import FakeClock, SystemClock
from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.lanes.email import EmailHandler, email_lane, email_message
from outbox_adapters.postgres import PostgresStore, enqueue_async
from outbox_adapters.runtime import Worker
from outbox_adapters.smtp import SmtpMailer
from outbox_core.backoff import SlotSchedule
from outbox_core.messages import ClaimedRow, Mark
from outbox_core.outcomes import Outcome
from outbox_core.ports import MarkResult
from outbox_core.timing import EmailTiming

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]

CANARY = f"https://shop.example/reset?token=canary-{secrets.token_hex(8)}"


_OPEN_MAILERS: list[SmtpMailer] = []


@pytest.fixture(autouse=True)
async def _close_mailers() -> AsyncIterator[None]:
    yield
    while _OPEN_MAILERS:
        await _OPEN_MAILERS.pop().aclose()  # QUIT the pooled sessions before the loop ends


def mailer_for(sink: SmtpSink, **policy_kwargs: Any) -> SmtpMailer:
    mailer = smtp_support.mailer_for(sink, **policy_kwargs)
    _OPEN_MAILERS.append(mailer)  # closed after the test
    return mailer


def make_worker(store: PostgresStore, handler: Any, **config: Any) -> Worker:
    config.setdefault("poll_interval", 0.05)
    config.setdefault("backoff", SlotSchedule((timedelta(minutes=1),)))
    return Worker(store, handler, email_lane(**config), clock=SystemClock())


async def enqueue_mail(dsn: str, *recipients: str) -> list[int]:
    """Enqueue one message per recipient inside ONE host transaction, as an application would."""
    messages = [
        email_message(
            to=to,
            subject="Reset your password",
            text="Hello, reset it here: $password_reset_url",
            fields={"password_reset_url": CANARY, "customer": "c-1"},
        )
        for to in recipients
    ]
    return await enqueue_all(dsn, messages)


async def test_worker_delivers_over_starttls_and_records_every_outcome(
    dsn: str, store: PostgresStore, sink: SmtpSink
) -> None:
    ids = await enqueue_mail(
        dsn, "ann@example.org", "bob@example.org", "bounce@example.org", "transient@example.org"
    )
    handler = EmailHandler(mailer_for(sink), sender=SENDER, clock=SystemClock())
    stats = await make_worker(store, handler).run(drain=True)

    received = sink.received
    assert sorted(r for mail in received for r in mail.recipients) == [
        "ann@example.org",
        "bob@example.org",
    ]
    assert all(mail.tls for mail in received)
    assert sum(sink.handler.plaintext_commands.values()) == 0
    body = message_from_bytes(received[0].data, policy=policy.default)
    assert CANARY in body.get_content()  # the link was rendered into the mail at send time

    by_id = rows(dsn)
    ann, bob, bounce, transient = (by_id[i] for i in ids)
    for sent in (ann, bob):
        assert sent["status"] == "dispatched"
        assert "password_reset_url" not in sent["payload"]  # scrubbed in the same UPDATE
        assert sent["payload"]["customer"] == "c-1"
    assert bounce["status"] == "failed"
    assert bounce["attempts"] == 1  # permanent: failed at once, not retried for days
    assert "550" in bounce["last_error"]
    assert bounce["payload"]["password_reset_url"] == CANARY  # a failed row keeps its payload
    assert transient["status"] == "pending"
    assert "451" in transient["last_error"]
    assert transient["next_attempt_at"] > datetime.now(UTC) + timedelta(seconds=30)
    assert (stats.dispatched, stats.failed, stats.retried) == (2, 1, 1)


class SlowMarks:
    """The real store, with marks that take a while: the window in which the batch is cancelled."""

    def __init__(self, store: PostgresStore, delay: float) -> None:
        self._store = store
        self._delay = delay
        self.marks_started = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def mark_if_pending(self, mark: Mark) -> MarkResult:
        self.marks_started.set()
        await asyncio.sleep(self._delay)
        return await self._store.mark_if_pending(mark)


async def test_mark_survives_the_batch_being_cancelled(
    dsn: str, store: PostgresStore, sink: SmtpSink
) -> None:
    [row_id] = await enqueue_mail(dsn, "ann@example.org")
    slow = SlowMarks(store, delay=0.5)
    handler = EmailHandler(mailer_for(sink), sender=SENDER, clock=SystemClock())
    worker = make_worker(slow, handler)  # type: ignore[arg-type]

    batch = asyncio.create_task(worker.run_once())
    await asyncio.wait_for(slow.marks_started.wait(), timeout=10)
    batch.cancel()  # the batch's deadline fires after the mail went out, while its mark runs
    with pytest.raises(asyncio.CancelledError):
        await batch
    await worker.wait_for_marks()

    assert len(sink.received) == 1
    assert rows(dsn)[row_id]["status"] == "dispatched"  # work already done is recorded


async def test_a_raising_row_does_not_strand_the_batch(
    dsn: str, store: PostgresStore, sink: SmtpSink
) -> None:
    ids = await enqueue_mail(dsn, "ann@example.org", "bob@example.org", "cid@example.org")
    real = EmailHandler(mailer_for(sink), sender=SENDER, clock=SystemClock())

    async def handler(row: ClaimedRow, *, budget: timedelta) -> Outcome:
        if row.id == ids[1]:
            message = "a bug in the host's handler"
            raise RuntimeError(message)
        return await real(row, budget=budget)

    report = await make_worker(store, handler).run_once()

    states = {i: r["status"] for i, r in rows(dsn).items()}
    assert states == {ids[0]: "dispatched", ids[1]: "pending", ids[2]: "dispatched"}
    assert rows(dsn)[ids[1]]["last_error"] == "handler raised RuntimeError"
    assert report.handler_errors == 1


async def test_strict_starttls_sends_nothing_to_a_server_without_it(
    dsn: str, store: PostgresStore
) -> None:
    [row_id] = await enqueue_mail(dsn, "ann@example.org")
    with SmtpSink(tls="none") as plain:  # never advertises STARTTLS (as if an attacker stripped it)
        handler = EmailHandler(mailer_for(plain), sender=SENDER, clock=SystemClock())
        await make_worker(store, handler).run_once()
        commands = dict(plain.handler.commands)

    assert commands == {}  # not one MAIL, RCPT, DATA or AUTH reached it
    row = rows(dsn)[row_id]
    assert row["status"] == "pending"
    assert "STARTTLS" in row["last_error"]


async def test_a_row_cut_off_mid_send_keeps_its_lease(dsn: str, store: PostgresStore) -> None:
    [row_id] = await enqueue_mail(dsn, "ann@example.org")
    started = asyncio.Event()

    async def hangs(row: ClaimedRow, *, budget: timedelta) -> Outcome:
        started.set()
        await asyncio.sleep(3600)
        return Outcome.sent()  # pragma: no cover - never reached

    worker = make_worker(store, hangs)
    batch = asyncio.create_task(worker.run_once())
    await asyncio.wait_for(started.wait(), timeout=10)
    batch.cancel()
    with pytest.raises(asyncio.CancelledError):
        await batch

    row = rows(dsn)[row_id]
    assert row["status"] == "pending"
    assert row["attempts"] == 1
    # Still leased: a sibling can't take it until the claim lease ends.
    assert row["next_attempt_at"] > datetime.now(UTC) + timedelta(minutes=5)
    assert await make_worker(store, hangs).run_once() == worker_module.BatchReport()


async def test_graceful_stop_releases_rows_not_yet_started(dsn: str, store: PostgresStore) -> None:
    ids = await enqueue_mail(dsn, "ann@example.org", "bob@example.org", "cid@example.org")
    worker: Worker

    async def stops_after_first(row: ClaimedRow, *, budget: timedelta) -> Outcome:
        worker.request_stop()  # SIGTERM arrives while the first row is in flight
        return Outcome.sent()

    worker = make_worker(store, stops_after_first)
    await worker.run()

    by_id = rows(dsn)
    assert by_id[ids[0]]["status"] == "dispatched"  # the row in flight was finished
    for unstarted in ids[1:]:
        assert by_id[unstarted]["status"] == "pending"
        assert by_id[unstarted]["attempts"] == 0  # released: the claim's attempt refunded
        assert by_id[unstarted]["next_attempt_at"] <= datetime.now(UTC)  # due again at once


async def test_the_row_start_gate_gives_back_rows_the_batch_cannot_finish(
    dsn: str, store: PostgresStore
) -> None:
    ids = await enqueue_mail(dsn, "ann@example.org", "bob@example.org")
    clock = FakeClock(datetime.now(UTC))
    timing = EmailTiming(batch_size=2)

    async def slow(row: ClaimedRow, *, budget: timedelta) -> Outcome:
        clock.advance(timing.per_row * 1.5)  # the first row eats more than its share of the batch
        return Outcome.sent()

    worker = Worker(store, slow, email_lane(timing=timing, poll_interval=0.05), clock=clock)
    report = await worker.run_once()

    assert (report.dispatched, report.released) == (1, 1)
    assert rows(dsn)[ids[1]]["status"] == "pending"
    assert rows(dsn)[ids[1]]["attempts"] == 0


async def test_an_invoice_pdf_arrives_byte_for_byte_and_leaves_the_row_once_sent(
    dsn: str, store: PostgresStore, sink: SmtpSink
) -> None:
    """The invoice case: a PDF goes out as an attachment, then the mark scrubs it from the row."""
    pdf = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n" + bytes(range(256)) * 64 + b"\ntrailer\n%%EOF\n"
    async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
        message = email_message(
            to="ann@example.org",
            subject="Invoice $invoice_number",
            text="Your invoice is attached. Pay it here: $update_url",
            html="<p>Your invoice is attached.</p>",
            fields={"invoice_number": "INV-42", "update_url": CANARY},
            attachments=[("Rechnung INV-42 (März).pdf", "application/pdf", pdf)],
        )
        row_id = int((await enqueue_async(conn, message)).row_id)
    pending = rows(dsn)[row_id]
    assert pending["payload"]["attachments"][0]["filename"] == "Rechnung INV-42 (März).pdf"

    handler = EmailHandler(mailer_for(sink), sender=SENDER, clock=SystemClock())
    stats = await make_worker(store, handler).run(drain=True)

    assert stats.dispatched == 1
    [mail] = sink.received
    assert mail.tls
    received = message_from_bytes(mail.data, policy=policy.default)
    assert [part.get_content_type() for part in received.walk()] == [
        "multipart/mixed",
        "multipart/alternative",
        "text/plain",
        "text/html",
        "application/pdf",
    ]
    assert CANARY in received.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    [attached] = received.iter_attachments()
    assert attached.get_filename() == "Rechnung INV-42 (März).pdf"
    assert attached.get_payload(decode=True) == pdf
    sent = rows(dsn)[row_id]
    assert sent["status"] == "dispatched"
    # Scrubbed in the same UPDATE as the mark: no file, no link; the delivery record stays.
    assert "attachments" not in sent["payload"]
    assert "update_url" not in sent["payload"]
    assert sent["payload"]["invoice_number"] == "INV-42"
    assert sent["payload"]["to"] == "ann@example.org"
