"""Shared fixtures of the chaos tests (RELIABILITY.md F-tests).

- ``chaos_full``: True under ``OUTBOX_CHAOS=full`` (``nox -s chaos``): the long versions.
- ``report(line)`` (tests/conftest.py): prints a figure line past pytest's capture and appends it
  to the file named by ``OUTBOX_CHAOS_REPORT``, which ``nox -s chaos`` prints as its summary.
- ``chaos_dsn``: the session's PostgreSQL database with the schema applied; ``new_lane(prefix)``.
- ``pg``: a throwaway PostgreSQL server of the module's own, to stop, restart or partition;
  ``f6_dsn``: a database reachable over TCP (the session's, else ``pg``'s), for a proxy in front.
- ``chaos_sink``: a real SMTP server (aiosmtpd, STARTTLS, a throwaway CA) that counts the copies of
  every row it received, by the Message-ID the e-mail handler gives each row.
- ``chaos_db``: enqueue mail rows on a lane, read them back, wait until they are all resolved.
- ``spawn_worker(lane, **options)``: the real worker as a subprocess
  (:class:`tests.faults.worker_proc.WorkerProcess`) pointed at that database and sink; every one
  is killed and reaped when the test ends. A mutant named by ``--mutant`` (the mutation plugin) or
  ``OUTBOX_TEST_MUTANT`` is passed on to the subprocesses, where the marks actually run.

Every chaos test module sets ``pytestmark = [pytest.mark.chaos, pytest.mark.integration]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from aiosmtpd.smtp import SMTP, Envelope, Session
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from tests.faults.pg import ThrowawayPostgres
from tests.faults.worker_proc import MUTANT_ENV, WorkerOptions, WorkerProcess
from tests.support.message_ids import rows_in_database

from outbox_adapters.demo.sink import ReceivedMail, SinkHandler, SmtpSink
from outbox_adapters.lanes.email import email_message
from outbox_adapters.postgres import enqueue, schema

#: The statuses a row does not leave by itself.
TERMINAL = frozenset({"dispatched", "skipped", "failed"})
# The e-mail handler's Message-ID: opaque, the same on every attempt at a row, so copies of one row
# at the server share it; its row is found by the Message-IDs of the lane's rows
# (tests/support/message_ids.py).
_MESSAGE_ID = re.compile(rb"^Message-ID:\s*<([^@>\s]+)@", re.MULTILINE | re.IGNORECASE)


# --- mode and reporting ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def chaos_full() -> bool:
    """The long versions (``OUTBOX_CHAOS=full``); the default run keeps each F-test short."""
    return os.environ.get("OUTBOX_CHAOS", "").strip().lower() == "full"


# --- PostgreSQL ----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def chaos_dsn(dsn: str) -> str:
    """The session's database, schema applied: ``dsn`` of tests/conftest.py, by its chaos name."""
    return dsn


@pytest.fixture(scope="module")
def f6_dsn(request: pytest.FixtureRequest, chaos_dsn: str) -> str:
    """A database reachable over TCP: F6 puts a proxy in front of PostgreSQL. The session's own
    when its DSN has a TCP host; else (the embedded server listens on a Unix socket) the module's
    throwaway server (tests/faults/pg.py), which listens on 127.0.0.1. Never a skip."""
    host = conninfo_to_dict(chaos_dsn).get("host") or ""
    if host and not str(host).startswith("/"):
        return chaos_dsn
    server: ThrowawayPostgres = request.getfixturevalue("pg")
    return server.dsn


@pytest.fixture(scope="module")
def pg() -> Iterator[ThrowawayPostgres]:
    """A PostgreSQL server of the module's own (schema applied) that a test may stop, restart or
    cut off, without touching the session's server."""
    with ThrowawayPostgres() as server:
        schema.apply(server.dsn)
        yield server


@pytest.fixture
def new_lane() -> Callable[[str], str]:
    """``new_lane("f1")`` → ``f1_3fa9c2``: a lane of its own for one scenario, so scenarios and
    tests never see each other's rows."""
    return lambda prefix: f"{prefix}_{secrets.token_hex(3)}"


class ChaosDb:
    """The outbox table as the chaos tests see it."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def enqueue(self, lane: str, count: int) -> list[int]:
        """``count`` mails on ``lane``, written in one host transaction; their row ids."""
        ids = []
        with psycopg.connect(self.dsn) as conn, conn.transaction():
            for n in range(count):
                message = email_message(
                    to=f"{lane}-{n}@example.org",
                    subject=f"chaos {lane} #{n}",
                    text="Hello from the chaos tests.",
                    lane=lane,
                )
                ids.append(int(enqueue(conn, message, notify=False).row_id))
        return ids

    def rows(self, lane: str) -> dict[int, dict[str, Any]]:
        """Every row of ``lane`` by id; ``resolved`` is ``resolved_at`` as epoch seconds."""
        with psycopg.connect(self.dsn, autocommit=True, row_factory=dict_row) as conn:
            found = conn.execute(
                "SELECT id, status, attempts, last_error, claim_token,"
                " extract(epoch FROM resolved_at)::float8 AS resolved,"
                " extract(epoch FROM next_attempt_at)::float8 AS due"
                " FROM outbox_message WHERE lane = %s ORDER BY id",
                (lane,),
            ).fetchall()
        return {row["id"]: row for row in found}

    def due(self, lane: str) -> int:
        """Rows of ``lane`` a claim could take now: pending and due (a claimed row's lease makes
        it due only later). What a test checks to know a worker's next claim will find work."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            found = conn.execute(
                "SELECT count(*) FROM outbox_message"
                " WHERE lane = %s AND status = 'pending' AND next_attempt_at <= now()",
                (lane,),
            ).fetchone()
        return int(found[0]) if found else 0

    def wait_progress(self, lane: str, resolved: int, *, timeout: float) -> None:
        """Poll (every 10 ms, one connection) until at least ``resolved`` rows of ``lane`` are
        terminal: a way to act "when the drain is this far", whatever the machine's speed."""
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while True:
                found = conn.execute(
                    "SELECT count(*) FROM outbox_message WHERE lane = %s AND status <> 'pending'",
                    (lane,),
                ).fetchone()
                done = found[0] if found else 0
                if done >= resolved:
                    return
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"{lane}: {done} rows resolved after {timeout}s, not {resolved}"
                    )
                time.sleep(0.01)

    def wait_resolved(self, lane: str, *, timeout: float) -> dict[int, dict[str, Any]]:
        """Poll until every row of ``lane`` is terminal; the rows. Fails with the stragglers."""
        deadline = time.monotonic() + timeout
        while True:
            rows = self.rows(lane)
            if rows and all(row["status"] in TERMINAL for row in rows.values()):
                return rows
            if time.monotonic() > deadline:
                open_rows = {i: r for i, r in rows.items() if r["status"] not in TERMINAL}
                raise AssertionError(f"rows of {lane} still open after {timeout}s: {open_rows}")
            time.sleep(0.05)


@pytest.fixture
def chaos_db(chaos_dsn: str) -> ChaosDb:
    return ChaosDb(chaos_dsn)


# --- the SMTP server -----------------------------------------------------------------------------


class _DelayingHandler(SinkHandler):
    """The sink's handler, optionally taking ``delay`` seconds to answer DATA (after recording
    the message, as a real server that queued it would): it widens the window in which a worker
    can die with the message delivered but not yet acknowledged."""

    delay = 0.0

    async def handle_DATA(  # noqa: N802 - aiosmtpd's hook name
        self, server: SMTP, session: Session, envelope: Envelope
    ) -> str:
        reply = await super().handle_DATA(server, session, envelope)
        if self.delay:
            await asyncio.sleep(self.delay)
        return reply


class ChaosSink:
    """A running :class:`~outbox_adapters.demo.sink.SmtpSink` (STARTTLS) that counts copies."""

    def __init__(self, sink: SmtpSink, handler: _DelayingHandler, dsn: str) -> None:
        self.sink = sink
        self.handler = handler
        #: The database whose rows the mails are of (a test on a server of its own sets its own).
        self.dsn = dsn
        #: Message-ID token → (lane, row id), filled from the database as new tokens arrive.
        self._rows: dict[str, tuple[str, int]] = {}

    @property
    def port(self) -> int:
        return self.sink.port

    @property
    def ca_file(self) -> str:
        return str(self.sink.ca_file)

    @property
    def received(self) -> list[ReceivedMail]:
        return self.sink.received

    def set_delay(self, seconds: float) -> None:
        self.handler.delay = seconds

    def copies(self, lane: str) -> Counter[int]:
        """How many copies of each row of ``lane`` the server accepted (row id → count). A mail
        whose row can't be looked up yet (the database is down) is not counted this time."""
        tokens = [
            found.group(1).decode() for m in self.received if (found := _MESSAGE_ID.search(m.data))
        ]
        if any(token not in self._rows for token in tokens):
            with contextlib.suppress(psycopg.OperationalError):
                found_rows = rows_in_database(self.dsn, lane)
                self._rows.update((token, (lane, row)) for token, row in found_rows.items())
        counts: Counter[int] = Counter()
        for token in tokens:
            of = self._rows.get(token)
            if of is not None and of[0] == lane:
                counts[of[1]] += 1
        return counts

    def plaintext_commands(self) -> int:
        return sum(self.handler.plaintext_commands.values())

    def wait_copies(self, lane: str, row: int, count: int, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.copies(lane)[row] < count:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"row {row} of {lane}: {self.copies(lane)[row]} copies, not {count}"
                )
            time.sleep(0.02)


@pytest.fixture
def chaos_sink(chaos_dsn: str) -> Iterator[ChaosSink]:
    sink = SmtpSink(tls="starttls")
    handler = _DelayingHandler()
    sink.handler = handler  # before start(): the server is built around it
    with sink:
        yield ChaosSink(sink, handler, chaos_dsn)


# --- worker subprocesses ---------------------------------------------------------------------------


@pytest.fixture
def spawn_worker(
    request: pytest.FixtureRequest, chaos_dsn: str, chaos_sink: ChaosSink
) -> Iterator[Callable[..., WorkerProcess]]:
    """``spawn_worker(lane, failpoint=FailPoint(...), standby=True, name="A", ...)``."""
    mutant = request.config.getoption("--mutant", default=None) or os.environ.get(MUTANT_ENV)
    env = {MUTANT_ENV: mutant} if mutant else {}
    started: list[WorkerProcess] = []

    def spawn(lane: str, *, name: str | None = None, **options: Any) -> WorkerProcess:
        opts = WorkerOptions(
            dsn=chaos_dsn,
            smtp_port=chaos_sink.port,
            ca_file=chaos_sink.ca_file,
            lane=lane,
            **options,
        )
        process = WorkerProcess.start(opts, name=name, env=env)
        started.append(process)
        return process

    yield spawn
    for process in started:
        process.close()
