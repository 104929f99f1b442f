"""``outbox demo``: the whole e-mail path, end to end, on real parts, in a few seconds.

What it does
------------
1. Finds a PostgreSQL server (``find_postgres``: a URL given, else a container, else an embedded
   pgserver) and applies the schema.
2. Starts a real SMTP server in-process (:class:`~outbox_adapters.demo.sink.SmtpSink`, STARTTLS with
   a throwaway CA) that fails chosen recipients: ``bounce…`` with 550 (permanent), ``transient…``
   with 451 on every try, and ``flaky…`` with 451 the first time only (:class:`FlakySinkHandler`).
3. Enqueues the rows in a few host transactions (psycopg, ``enqueue_async``), each carrying a
   ``password_reset_url`` with a canary token in it, on a lane of its own (``demo-<hex>``): a demo
   pointed at a real database never claims, sends or counts anybody else's rows.
4. Runs the lane as a host describes it (:class:`~outbox_adapters.app.Outbox` with an
   :class:`~outbox_adapters.app.EmailLane`), in a few replicas racing on SKIP LOCKED, each what
   one ``outbox worker`` process runs (the real :class:`~outbox_adapters.smtp.SmtpMailer` in
   strict STARTTLS), with a backoff shrunk to 0.2 s / 0.5 s / 1 s so that retries, and the end of
   the schedule, happen while you watch.
5. Stops when every row is terminal and prints what the database and the SMTP server saw, with the
   invariants checked: no duplicate at the server, no secret left in a sent row, nothing in
   plaintext, every row where its recipient says it must end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
import warnings
from collections.abc import Iterator, Sequence
from email import message_from_bytes
from email.parser import BytesHeaderParser
from email.policy import default as default_policy
from typing import Any, Final, TextIO

import attrs
import psycopg

from outbox_adapters.app import EmailLane, Outbox, run_lane
from outbox_adapters.brokers.embedded import find_nats
from outbox_adapters.demo.events import run_event_demo
from outbox_adapters.demo.report import (
    DEMO_BACKOFF,
    DemoReport,
    KindOutcome,
    Recipient,
    demo_recipients,
)
from outbox_adapters.demo.sink import SinkHandler, SmtpSink
from outbox_adapters.demo.webhooks import run_webhook_demo
from outbox_adapters.lanes.email import email_message
from outbox_adapters.postgres import enqueue_async, schema
from outbox_adapters.postgres.embedded import find_postgres
from outbox_adapters.smtp import SmtpSettings
from outbox_core.timing import EmailTiming

__all__ = [
    "DEMO_BACKOFF",
    "DemoReport",
    "FlakySinkHandler",
    "Recipient",
    "demo_recipients",
    "run_demo",
]

#: Webhook events the demo fans out to its two local receivers.
WEBHOOK_EVENTS: Final = 20
#: Signups of the domain-event part (one more signs up during the broker outage).
EVENT_TENANTS: Final = 3
DEMO_SENDER: Final = "outbox-demo@demo.example"
#: The environment the demo's SMTP policy names (strict STARTTLS, so it makes no difference here).
DEMO_ENVIRONMENT: Final = "demo"
BATCH_SIZE: Final = 20
POLL_INTERVAL: Final = 0.1
#: Workers racing on the same lane: claims are disjoint (SKIP LOCKED), so the sink sees no more.
WORKERS: Final = 4
#: Rows per host transaction at enqueue.
ROWS_PER_TRANSACTION: Final = 100
PROGRESS_WIDTH: Final = 30

#: How ``find_postgres`` found the server, in words.
_SOURCES: Final = {
    "env": "the given URL",
    "container": "a container",
    "embedded": "embedded pgserver",
}
# Noisy loggers: aiosmtpd reports every TLS handshake and closed connection; the broker adapters
# warn at every reconnect attempt during the event part's deliberate NATS outage (its report says
# what the relay recorded instead).
_QUIET_LOGGERS: Final = ("mail.log", "mail.debug", "outbox.brokers")

#: Rows of the demo's lane per status, for the progress bar.
STATUS_COUNTS: Final = """
SELECT status, count(*) FROM outbox_message WHERE lane = %(lane)s GROUP BY status
"""

#: What the database says happened, per recipient kind (the recipient's local-part prefix).
#: ``canary_left``: sent rows whose stored payload still holds the secret link (must be none).
OUTCOMES_BY_KIND: Final = """
SELECT
    substring(payload->>'to' FROM '^[a-z]+') AS kind,
    count(*) AS rows,
    count(*) FILTER (WHERE status = 'pending') AS pending,
    count(*) FILTER (WHERE status = 'dispatched') AS dispatched,
    count(*) FILTER (WHERE status = 'failed') AS failed,
    count(*) FILTER (WHERE attempts > 1) AS retried,
    min(attempts) AS min_attempts,
    max(attempts) AS max_attempts,
    count(*) FILTER (WHERE status = 'dispatched' AND strpos(payload::text, %(canary)s) > 0)
        AS canary_left,
    count(*) FILTER (WHERE status = 'failed' AND strpos(payload::text, %(canary)s) > 0)
        AS canary_kept
FROM outbox_message
WHERE lane = %(lane)s
GROUP BY 1
"""


class FlakySinkHandler(SinkHandler):
    """The sink's handler, plus ``flaky…`` recipients: 451 the first time an address is seen."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[str] = set()

    async def handle_RCPT(  # noqa: N802 - aiosmtpd's hook name
        self,
        server: Any,  # noqa: ANN401 - aiosmtpd is untyped
        _session: Any,  # noqa: ANN401
        envelope: Any,  # noqa: ANN401
        address: str,
        rcpt_options: list[str],
    ) -> str:
        if address.partition("@")[0].lower().startswith(Recipient.FLAKY.value):
            # The server runs in a thread of its own; the lock keeps "first time" exact.
            with self._lock:
                first = address not in self._seen
                self._seen.add(address)
            if first:
                self._count(server, "RCPT")
                return "451 4.3.2 Flaky demo mailbox, please try again"
        return await super().handle_RCPT(server, _session, envelope, address, rcpt_options)


# --- running it -----------------------------------------------------------------------------------


def run_demo(*, rows: int, database_url: str | None, out: TextIO, err: TextIO) -> DemoReport:
    """Run the demo and print its progress (``err``) and summary (``out``); returns the figures."""
    lane = f"demo-{secrets.token_hex(3)}"
    canary = f"canary{secrets.token_hex(8)}"
    with (
        _quiet(_QUIET_LOGGERS),
        find_postgres(database_url, env="OUTBOX_DEMO_DATABASE_URL") as server,
    ):
        schema.apply(server.dsn)
        sink = SmtpSink(tls="starttls")
        sink.handler = FlakySinkHandler()
        with sink:
            out.write(
                f"leased-outbox demo: {rows} e-mails on lane {lane}\n"
                f"  PostgreSQL: {_SOURCES.get(server.source, server.source)}\n"
                f"  SMTP sink: 127.0.0.1:{sink.port}, STARTTLS with a throwaway CA\n"
                f"  workers: {WORKERS} x batch {BATCH_SIZE}, backoff"
                f" {', '.join(f'{d.total_seconds():g}s' for d in DEMO_BACKOFF.delays)}\n"
            )
            out.flush()
            report = asyncio.run(
                _drive(server.dsn, sink, lane=lane, canary=canary, rows=rows, err=err)
            )
            out.write(report.table() + "\n")
            if server.source == "env":
                # The drainer and the retry lane work every webhook row of the database, the relay
                # every event row: never run them on a database the demo does not own.
                out.write(
                    "webhooks and events: skipped (the demo does not drain the webhook and event"
                    " outboxes of a given database)\n"
                )
            else:
                webhooks = asyncio.run(run_webhook_demo(server.dsn, events=WEBHOOK_EVENTS, out=out))
                out.write(webhooks.table() + "\n")
                with find_nats(env="OUTBOX_DEMO_NATS_URL") as nats:
                    events = asyncio.run(
                        run_event_demo(
                            server.dsn,
                            nats,
                            sink,
                            _smtp_settings(sink),
                            tenants=EVENT_TENANTS,
                            sender=DEMO_SENDER,
                            out=out,
                        )
                    )
                out.write(events.table() + "\n")
                report = attrs.evolve(report, webhooks=webhooks, events=events)
    broken = report.broken()
    if broken:
        out.write("INVARIANTS BROKEN:\n" + "".join(f"  - {reason}\n" for reason in broken))
    else:
        out.write(
            "invariants hold: no duplicate, no secret left in a sent row, no plaintext"
            + (
                "; every webhook signature verified, 410 disabled its endpoint"
                if report.webhooks
                else ""
            )
            + (
                "; one e-mail per (event, kind), an in-app row per (event, audience), nothing"
                " parked, the outage's write committed and its event sent once NATS was back\n"
                if report.events
                else "\n"
            )
        )
    out.flush()
    return report


@contextlib.contextmanager
def _quiet(names: Sequence[str]) -> Iterator[None]:
    """Silence third-party noise for the demo's run (loggers, and platformdirs' warning)."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            # pgserver asks platformdirs for a runtime dir, which most containers don't have.
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


async def _drive(  # noqa: PLR0913 - keyword-only, one argument per part of the run
    dsn: str, sink: SmtpSink, *, lane: str, canary: str, rows: int, err: TextIO
) -> DemoReport:
    await _enqueue(dsn, lane=lane, canary=canary, recipients=demo_recipients(rows))
    # The e-mail lane as a host describes it; no leader lease, so that the replicas compete.
    app = Outbox(
        database_url=dsn,
        smtp=_smtp_settings(sink),
        sender=DEMO_SENDER,
        environment=DEMO_ENVIRONMENT,
        leader=False,
        poll_interval=POLL_INTERVAL,
        lanes=[
            EmailLane(
                lane, timing=EmailTiming.with_overrides(batch_size=BATCH_SIZE), backoff=DEMO_BACKOFF
            )
        ],
    )
    stop = asyncio.Event()
    started = time.monotonic()
    # Each replica is what one `outbox worker` process runs: its own pool, mailer and worker.
    replicas = [
        asyncio.create_task(run_lane(app, app.lane(lane), stop=stop, holder=f"demo-worker-{n}"))
        for n in range(WORKERS)
    ]
    watch = asyncio.create_task(_watch(dsn, lane, rows, err, give_up_after=60.0 + rows / 10))
    try:
        # A replica that ends before the rows are done has failed: stop watching and raise it.
        await asyncio.wait([watch, *replicas], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.set()
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        await asyncio.gather(*replicas)
    finished = not watch.cancelled() and watch.result()
    elapsed = time.monotonic() - started
    return await _report(
        dsn, sink, lane=lane, canary=canary, rows=rows, elapsed=elapsed, finished=finished
    )


async def _enqueue(
    dsn: str, *, lane: str, canary: str, recipients: list[tuple[Recipient, str]]
) -> None:
    """Write the rows as a host would: in its own transactions, a few of them."""
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        for start in range(0, len(recipients), ROWS_PER_TRANSACTION):
            async with conn.transaction():
                for number, (_, address) in enumerate(
                    recipients[start : start + ROWS_PER_TRANSACTION], start=start
                ):
                    message = email_message(
                        to=address,
                        subject="Reset your password, $name",
                        text="Hello $name,\n\nchoose a new password here: $password_reset_url\n",
                        fields={
                            "name": f"demo user {number}",
                            "password_reset_url": f"https://demo.example/reset/{canary}/{number}",
                        },
                        idempotency_key=f"{lane}/{number}",
                        lane=lane,
                    )
                    await enqueue_async(conn, message)


def _smtp_settings(sink: SmtpSink) -> SmtpSettings:
    settings = SmtpSettings.from_url(
        f"smtp://{sink.host}:{sink.port}",
        tls="starttls",
        sender=DEMO_SENDER,
        environment=DEMO_ENVIRONMENT,
    )
    # Trust the sink's throwaway CA, and nothing else.
    return attrs.evolve(settings, tls_context=sink.client_context())


async def _watch(dsn: str, lane: str, total: int, err: TextIO, *, give_up_after: float) -> bool:
    """Draw the progress bar until no row of the lane is pending; False after ``give_up_after`` s."""
    deadline = time.monotonic() + give_up_after
    shown = ""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        try:
            while True:
                cur = await conn.execute(STATUS_COUNTS, {"lane": lane})
                counts: dict[str, int] = dict(await cur.fetchall())
                pending = int(counts.get("pending", 0))
                bar = _progress(total - pending, total)
                if bar != shown:
                    err.write(bar)
                    err.flush()
                    shown = bar
                if pending == 0:
                    return True
                if time.monotonic() > deadline:
                    return False
                await asyncio.sleep(POLL_INTERVAL)
        finally:
            err.write("\n")
            err.flush()


def _progress(done: int, total: int) -> str:
    filled = PROGRESS_WIDTH * done // max(total, 1)
    return f"\r[{'#' * filled}{'.' * (PROGRESS_WIDTH - filled)}] {done}/{total}"


async def _report(  # noqa: PLR0913 - keyword-only, one argument per figure's source
    dsn: str, sink: SmtpSink, *, lane: str, canary: str, rows: int, elapsed: float, finished: bool
) -> DemoReport:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(OUTCOMES_BY_KIND, {"lane": lane, "canary": canary})
        names = [column.name for column in cur.description or ()]
        by_kind = {}
        for record in await cur.fetchall():
            values = dict(zip(names, record, strict=True))
            kind = Recipient(values.pop("kind"))
            by_kind[kind] = KindOutcome(**{key: int(value) for key, value in values.items()})
    received = sink.received
    headers = BytesHeaderParser(policy=default_policy)
    message_ids = {str(headers.parsebytes(mail.data)["Message-ID"]) for mail in received}
    return DemoReport(
        enqueued=rows,
        by_kind=by_kind,
        received=len(received),
        distinct_message_ids=len(message_ids),
        links_delivered=sum(_carries(mail.data, canary) for mail in received),
        plaintext_commands=sum(sink.handler.plaintext_commands.values()),
        elapsed=elapsed,
        finished=finished,
    )


def _carries(data: bytes, canary: str) -> bool:
    """The decoded text body holds the reset link (the body is quoted-printable on the wire)."""
    message: Any = message_from_bytes(data, policy=default_policy)
    body = message.get_body(preferencelist=("plain",))
    return body is not None and canary in body.get_content()
