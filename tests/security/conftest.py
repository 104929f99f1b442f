"""Plumbing of the security tests: the real pipeline end to end, and what the real server received.

Every check here reads what the REAL SMTP server (``SmtpSink``: aiosmtpd, STARTTLS with a throwaway
CA) received — its envelope and the exact DATA bytes, re-parsed with the standard library's
``BytesParser(policy=default)`` — and what PostgreSQL holds. Nothing is taken from the library's
own idea of what it sent.

``dsn``, ``lane``, ``sink`` and ``store`` come from ``tests/conftest.py``; the settings and mailers
for the sink and the row helpers from ``tests/support/``.

Helpers are handed out as fixtures (``pipeline``, ``wire``, ``wire_check``) rather than imported,
so the test modules need no import path tricks.

* ``pipeline``: one lane of a real database: enqueue on a host transaction (``email_message`` +
  ``enqueue_async``), raw INSERTs that go around enqueue (a buggy producer, an old row), and the real
  ``Worker`` → ``EmailHandler`` → ``SmtpMailer`` → sink, drained.
* ``wire``: for Hypothesis. ONE sink, ONE mailer (its sessions reused) and one event loop for the
  whole module; each example calls ``EmailHandler`` directly on an in-memory row, so an example costs
  one SMTP transaction and no database round trip.
"""

from __future__ import annotations

import asyncio
import email.header
import email.utils
import json
import re
import secrets
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from typing import Any

import pytest
from tests.support.message_ids import rows_in_database, token_of
from tests.support.postgres import enqueue_all, insert_raw, stored_rows
from tests.support.smtp import SENDER, mailer_for

from outbox_adapters.clock import SystemClock
from outbox_adapters.demo.sink import ReceivedMail, SmtpSink
from outbox_adapters.lanes.email import EmailHandler, email_lane, email_message
from outbox_adapters.postgres import PostgresStore
from outbox_adapters.runtime import Worker, WorkerStats
from outbox_adapters.smtp import SmtpMailer
from outbox_core.backoff import SlotSchedule
from outbox_core.messages import ClaimedRow, ClaimToken, NewMessage
from outbox_core.outcomes import Outcome

#: The header names of a single-part message (lower-case); Reply-To only when one is given.
SINGLE_PART_HEADERS = (
    "content-transfer-encoding",
    "content-type",
    "date",
    "from",
    "message-id",
    "mime-version",
    "subject",
    "to",
)
_HEADER_LINE = re.compile(rb"([A-Za-z][A-Za-z0-9-]*):")


# --- reading what the server received ------------------------------------------------------------


class WireCheck:
    """Checks on one message exactly as the SMTP server received it."""

    sender = SENDER

    @staticmethod
    def reparse(data: bytes) -> EmailMessage:
        message = BytesParser(policy=policy.default).parsebytes(data)
        assert isinstance(message, EmailMessage)
        return message

    def delivered(
        self,
        mail: ReceivedMail,
        *,
        recipients: list[str],
        reply_to: str | None = None,
        multipart: bool = False,
    ) -> EmailMessage:
        """Assert the message carries exactly the intended envelope and header set; return it."""
        assert mail.tls, "the message travelled without TLS"
        assert mail.envelope_from == SENDER
        assert list(mail.recipients) == recipients, "the envelope recipients differ"
        message = self.reparse(mail.data)
        want = [*SINGLE_PART_HEADERS, *(["reply-to"] if reply_to else [])]
        if multipart:
            want.remove("content-transfer-encoding")
        # A list, not a set: a second Subject or To is an injection too.
        assert sorted(key.lower() for key in message) == sorted(want)
        assert message["Bcc"] is None
        assert message["Cc"] is None
        assert [a.addr_spec for a in message["To"].addresses] == recipients
        assert [a.addr_spec for a in message["From"].addresses] == [SENDER]
        if reply_to:
            assert [a.addr_spec for a in message["Reply-To"].addresses] == [reply_to]
        for key, value in message.items():
            assert "\r" not in str(value), f"{key} decodes to a CR"
            assert "\n" not in str(value), f"{key} decodes to a LF"
        self.header_block_is_clean(mail.data, want)
        return message

    @staticmethod
    def display_name(data: bytes) -> str:
        """The From display name decoded by RFC 2047 §6.2 (whitespace between adjacent encoded
        words is dropped). CPython 3.11's structured-header parser keeps that whitespace, so a
        long name it decodes gains a space per folded word; the raw header is decoded here."""
        head = data.partition(b"\r\n\r\n")[0].decode("ascii")
        unfolded = re.sub(r"\r\n[ \t]", " ", head)
        [raw] = [
            line[5:].strip() for line in unfolded.split("\r\n") if line.lower().startswith("from:")
        ]
        name, _address = email.utils.parseaddr(raw)
        return str(email.header.make_header(email.header.decode_header(name)))

    @staticmethod
    def header_block_is_clean(data: bytes, want: list[str]) -> None:
        """Byte level: CRLF lines only; each header line names a wanted header or continues one."""
        head, blank, _ = data.partition(b"\r\n\r\n")
        assert blank, "no blank line ends the header block"
        assert b"\n" not in head.replace(b"\r\n", b""), "a bare LF in the header block"
        assert b"\r" not in head.replace(b"\r\n", b""), "a bare CR in the header block"
        for line in head.split(b"\r\n"):
            if line[:1] in {b" ", b"\t"}:
                continue  # a folded continuation of the header above
            match = _HEADER_LINE.match(line)
            assert match, f"a header line that is no header: {line[:80]!r}"
            assert match.group(1).decode().lower() in want, f"unexpected header {line[:80]!r}"


@pytest.fixture(scope="session")
def wire_check() -> WireCheck:
    return WireCheck()


# --- the real pipeline on one lane -----------------------------------------------------------


class Pipeline:
    """One lane of the real database, the real worker, the real mailer and the real sink."""

    sender = SENDER

    def __init__(self, dsn: str, lane: str, sink: SmtpSink) -> None:
        self.dsn = dsn
        self.lane = lane
        self.sink = sink

    def email(self, **kwargs: Any) -> NewMessage:
        """``email_message`` for this lane (it validates, and raises, exactly as for a host)."""
        kwargs.setdefault("subject", "Hello")
        kwargs.setdefault("text", "Hello there")
        return email_message(lane=self.lane, **kwargs)

    async def enqueue(self, *messages: NewMessage) -> list[int]:
        """Enqueue inside ONE host transaction, as an application would."""
        return await enqueue_all(self.dsn, messages)

    def insert_raw(self, payload: object) -> int:
        """A row written AROUND enqueue (a buggy producer, an old row): ``payload`` as JSON text
        (a str is taken as the JSON text itself)."""
        text = payload if isinstance(payload, str) else json.dumps(payload)
        return insert_raw(self.dsn, self.lane, text)

    def rows(self) -> dict[int, dict[str, Any]]:
        return stored_rows(self.dsn, self.lane)

    def mailer(self, **policy_kwargs: Any) -> SmtpMailer:
        return mailer_for(self.sink, **policy_kwargs)

    def worker(
        self,
        store: PostgresStore,
        mailer: SmtpMailer | None = None,
        **handler_kwargs: Any,
    ) -> Worker:
        handler = EmailHandler(
            mailer or self.mailer(), sender=SENDER, clock=SystemClock(), **handler_kwargs
        )
        config = email_lane(
            lane=self.lane,
            poll_interval=0.05,
            backoff=SlotSchedule((timedelta(minutes=1),) * 10),
        )
        return Worker(store, handler, config, clock=SystemClock())

    async def drain(self, mailer: SmtpMailer | None = None, **handler_kwargs: Any) -> WorkerStats:
        """Run the real worker until a claim finds nothing due (retries are a minute away)."""
        mailer = mailer or self.mailer()
        async with await PostgresStore.open(self.dsn, max_size=4) as store, mailer:
            worker = self.worker(store, mailer, **handler_kwargs)
            return await asyncio.wait_for(worker.run(drain=True), timeout=120)

    def received_by_row(self) -> dict[int, list[ReceivedMail]]:
        """What the sink got, by row id (the row whose Message-ID the mail carries,
        tests/support/message_ids.py)."""
        rows = rows_in_database(self.dsn, self.lane)
        by_row: dict[int, list[ReceivedMail]] = {}
        for mail in self.sink.received:
            row = rows.get(token_of(str(WireCheck.reparse(mail.data)["Message-ID"])))
            if row is not None:
                by_row.setdefault(row, []).append(mail)
        return by_row


@pytest.fixture
def pipeline(dsn: str, lane: str, sink: SmtpSink) -> Pipeline:
    return Pipeline(dsn, lane, sink)


# --- one server, one mailer, many examples ---------------------------------------------------


class Wire:
    """One sink, one mailer and one event loop for a whole Hypothesis property."""

    sender = SENDER

    def __init__(self) -> None:
        self.sink = SmtpSink(tls="starttls").start()
        self.runner = asyncio.Runner()
        self.mailer = mailer_for(self.sink)
        self.handler = EmailHandler(self.mailer, sender=SENDER, clock=SystemClock())
        self._ids = 0

    def row(self, payload: object) -> ClaimedRow:
        self._ids += 1
        now = datetime.now(UTC)
        return ClaimedRow(
            id=self._ids,
            lane="email",
            payload=payload,  # type: ignore[arg-type]  # hostile payloads are the point
            attempts=1,
            token=ClaimToken.from_entropy(secrets.token_bytes(16)),
            lease_expires_at=now + timedelta(minutes=5),
            created_at=now,
        )

    def send(self, payload: object) -> tuple[Outcome | Exception, list[ReceivedMail], Counter[str]]:
        """Hand one row to the real handler; return its outcome (or what it raised: a handler
        that raises is a finding the caller judges), what the server received and the commands
        it counted, for this row alone."""
        before = len(self.sink.received)
        commands = Counter(self.sink.handler.commands)
        outcome: Outcome | Exception
        try:
            row = self.row(payload)
            outcome = self.runner.run(self.handler(row, budget=timedelta(seconds=30)))
        except Exception as exc:  # noqa: BLE001 - reported to the caller, who asserts on it
            outcome = exc
        return outcome, self.sink.received[before:], self.sink.handler.commands - commands

    def close(self) -> None:
        try:
            self.runner.run(self.mailer.aclose())
        finally:
            self.runner.close()
            self.sink.stop()


@pytest.fixture(scope="module")
def wire() -> Iterator[Wire]:
    opened = Wire()
    try:
        yield opened
    finally:
        opened.close()


# --- figures --------------------------------------------------------------------------------


@pytest.fixture
def report_figure(report: Callable[[str], None]) -> Callable[[str], None]:
    """The figure reporter of ``tests/conftest.py`` (``report``), by the name these tests use."""
    return report
