"""End to end over SMTP: the naive loop a user would write vs the worker draining rows through
:class:`~outbox_adapters.smtp.SmtpMailer`, both to a real STARTTLS server in its own process.

- ``naive``: one ``aiosmtplib.send`` per message, in sequence: a new connection, EHLO, STARTTLS
  and EHLO again for every message. No database at all.
- ``library``: rows loaded in the outbox, drained by one worker with ``rows_in_flight`` = 8, its
  marks grouped per window of 8 rows (``group_marks``: a crash repeats at most 8 rows) and (when
  the mailer has it) ``SmtpSettings(max_sessions=8)``: eight reused STARTTLS sessions at once. It
  pays for the claim, building each message from its row, and the marks.
- ``library_per_row``: 4 rows in flight, each marked by its own statement, 4 sessions.
- ``library_strict``: ``rows_in_flight=1`` (one session, reused when available).
- ``mailer_only``: a diagnostic: the same ``SmtpMailer`` (8 sessions) sending the same number of
  messages, built before the clock starts, with 8 in flight and no database at all. The gap
  between it and ``library`` is what building the messages, the claim, the marks and the worker
  cost end to end.

Each run checks the sink received exactly the messages sent and, for the library, that every row
ended dispatched once and scrubbed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from typing import Any, Final

import aiosmtplib

from bench import rows, variants
from bench.library import connection_budget, drain_library, lane_config, pool_size
from bench.server import fresh_database
from bench.settings import Sizes
from bench.sink_process import SinkProcess
from bench.stats import Figure, ratio, rotation
from outbox_adapters.clock import SystemClock
from outbox_adapters.lanes.email import EmailHandler
from outbox_adapters.smtp import SmtpMailer, SmtpSettings
from outbox_core.mail import build_message
from outbox_core.outcomes import OutcomeKind
from outbox_core.tls import SmtpSecurityPolicy

__all__ = ["measure"]

SENDER: Final = "bench@bench.example"
#: Messages in flight (and SMTP sessions) in the library's main mode (marks grouped per window).
IN_FLIGHT: Final = 8
#: Messages in flight (and sessions) with a mark statement per row.
PER_ROW_IN_FLIGHT: Final = 4
#: Rows per claim for the SMTP drains.
BATCH: Final = 50
#: Seconds one SMTP command may take in the naive loop.
NAIVE_TIMEOUT: Final = 30.0


def _naive_message(number: int) -> EmailMessage:
    message = EmailMessage()
    message["From"] = SENDER
    message["To"] = rows.PAYLOAD["to"]
    message["Subject"] = "Reset your password, bench user"
    message["Message-ID"] = f"<naive.{number}@bench.example>"
    message.set_content(
        f"Hello bench user, choose a new password here: {rows.PAYLOAD['password_reset_url']}\n"
    )
    return message


async def _naive(sink: SinkProcess, messages: int) -> tuple[int, float]:
    context = sink.client_context()
    started = time.perf_counter()
    for number in range(messages):
        await aiosmtplib.send(
            _naive_message(number),
            hostname="127.0.0.1",
            port=sink.port,
            start_tls=True,
            tls_context=context,
            timeout=NAIVE_TIMEOUT,
        )
    return messages, time.perf_counter() - started


def _settings(sink: SinkProcess, sessions: int) -> SmtpSettings:
    extra: dict[str, Any] = {"max_sessions": sessions} if variants.smtp_session_reuse() else {}
    return SmtpSettings(
        host="127.0.0.1",
        port=sink.port,
        policy=SmtpSecurityPolicy(sender=SENDER),
        tls_context=sink.client_context(),
        **extra,
    )


async def _library(
    dsn: str, sink: SinkProcess, messages: int, in_flight: int, *, group: bool = False
) -> tuple[int, float]:
    rows.reset(dsn)
    rows.load_pending(dsn, messages)
    mailer = SmtpMailer(_settings(sink, in_flight))
    handler = EmailHandler(mailer, sender=SENDER, clock=SystemClock())
    budget = connection_budget(dsn)
    try:
        done, seconds = await drain_library(
            dsn,
            workers=1,
            config=lane_config(BATCH, rows_in_flight=in_flight, group_marks=group),
            pool=pool_size(in_flight, workers=1, budget=budget, group_marks=group),
            handler=handler,
        )
    finally:
        close = getattr(mailer, "aclose", None)
        if close is not None:
            await close()
    rows.verify_drain(dsn, messages, what=f"smtp library rows_in_flight={in_flight}")
    return done, seconds


async def _mailer_only(sink: SinkProcess, messages: int, in_flight: int) -> tuple[int, float]:
    mailer = SmtpMailer(_settings(sink, in_flight))
    mails = [
        build_message(
            sender=SENDER,
            sender_name=None,
            to=[str(rows.PAYLOAD["to"])],
            subject="Reset your password, bench user",
            text="Hello bench user, choose a new password here: "
            f"{rows.PAYLOAD['password_reset_url']}\n",
            html=None,
            reply_to=None,
            message_id=f"<mailer.{number}@bench.example>",
            date=datetime.now(UTC),
        )
        for number in range(messages)
    ]
    slots = asyncio.Semaphore(in_flight)

    async def one(mail: Any) -> bool:  # noqa: ANN401 - an OutgoingMail
        async with slots:
            outcome = await mailer.send(mail, budget=timedelta(seconds=NAIVE_TIMEOUT))
        return outcome.kind is OutcomeKind.SENT

    try:
        started = time.perf_counter()
        sent = await asyncio.gather(*(one(mail) for mail in mails))
        elapsed = time.perf_counter() - started
    finally:
        close = getattr(mailer, "aclose", None)
        if close is not None:
            await close()
    return sum(sent), elapsed


async def measure(
    server_dsn: str, sizes: Sizes, runs: int, log: Callable[[str], None]
) -> dict[str, Any]:
    with fresh_database(server_dsn, "smtp") as dsn:
        return await _measure(dsn, sizes, runs, log)


async def _measure(dsn: str, sizes: Sizes, runs: int, log: Callable[[str], None]) -> dict[str, Any]:
    messages = sizes.smtp_messages
    with SinkProcess() as sink:

        async def naive() -> tuple[int, float]:
            return await _naive(sink, messages)

        async def library() -> tuple[int, float]:
            return await _library(dsn, sink, messages, IN_FLIGHT, group=True)

        async def library_per_row() -> tuple[int, float]:
            return await _library(dsn, sink, messages, PER_ROW_IN_FLIGHT)

        async def library_strict() -> tuple[int, float]:
            return await _library(dsn, sink, messages, 1)

        async def mailer_only() -> tuple[int, float]:
            return await _mailer_only(sink, messages, IN_FLIGHT)

        drains: dict[str, Callable[[], Awaitable[tuple[int, float]]]] = {
            "naive": naive,
            "library": library,
            "library_per_row": library_per_row,
            "library_strict": library_strict,
            "mailer_only": mailer_only,
        }
        rates: dict[str, list[float]] = {key: [] for key in drains}
        for run in range(runs):
            order = rotation(drains, run)
            for key in order:
                before = sink.count()
                done, seconds = await drains[key]()
                received = sink.count() - before
                if received != messages:
                    raise RuntimeError(
                        f"smtp {key}: the sink received {received} messages, expected {messages}"
                    )
                rates[key].append(done / seconds)
                log(f"smtp run {run + 1}: {key} {done / seconds:,.0f} msg/s")
    naive_fig = Figure.of(rates["naive"], "msg/s")
    library_fig = Figure.of(rates["library"], "msg/s")
    strict_fig = Figure.of(rates["library_strict"], "msg/s")
    per_row_fig = Figure.of(rates["library_per_row"], "msg/s")
    mailer_fig = Figure.of(rates["mailer_only"], "msg/s")
    reuse = variants.smtp_session_reuse()
    return {
        "messages": messages,
        "naive_msgs_per_s": naive_fig,
        "library_msgs_per_s": library_fig,
        "ratio": ratio(library_fig, naive_fig),
        "library_per_row_msgs_per_s": per_row_fig,
        "per_row_ratio": ratio(per_row_fig, naive_fig),
        "library_strict_msgs_per_s": strict_fig,
        "strict_ratio": ratio(strict_fig, naive_fig),
        "mailer_only_msgs_per_s": mailer_fig,
        "mailer_only_ratio": ratio(mailer_fig, naive_fig),
        "variant": {
            "session_reuse": reuse,
            "library": f"1 worker x batch {BATCH}, rows_in_flight={IN_FLIGHT}, group_marks"
            + (f", max_sessions={IN_FLIGHT}" if reuse else ", a new connection per message")
            + f" (a crash repeats at most {IN_FLIGHT} rows)",
            "library_per_row": f"1 worker x batch {BATCH}, rows_in_flight={PER_ROW_IN_FLIGHT}"
            + (f", max_sessions={PER_ROW_IN_FLIGHT}" if reuse else "")
            + ", a mark statement per row",
            "library_strict": "1 worker x batch 50, rows_in_flight=1"
            + (", max_sessions=1" if reuse else ", a new connection per message"),
            "naive": "aiosmtplib.send per message: new connection + STARTTLS each time",
            "mailer_only": f"SmtpMailer alone, {IN_FLIGHT} in flight"
            + (f", max_sessions={IN_FLIGHT}" if reuse else "")
            + ", no database (diagnostic)",
            "sink": "aiosmtpd STARTTLS sink in its own process (multiprocessing, spawn)",
        },
        "goal": "ratio >= 5",
    }
