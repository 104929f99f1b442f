"""LISTEN/NOTIFY wake-up (B3) against a real PostgreSQL.

The promises: enqueue announces a lane in the host's transaction, so the announcement arrives after
commit and never after a rollback, once per lane however many rows; the listener turns it into a
wake-up of that lane's workers, so a worker with a 30 s poll sends a fresh row within a second;
the listener survives losing its connection and then wakes every lane (LISTEN has no replay); and
with the announcement turned off, polling still delivers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, Self

import psycopg
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.orm import Session
from tests.support.postgres import HANDLE_KINDS as KINDS

from outbox_adapters.lanes.email import email_lane
from outbox_adapters.postgres import (
    WAKEUP_CHANNEL,
    PostgresStore,
    WakeupListener,
    enqueue,
    enqueue_async,
)
from outbox_adapters.runtime import Worker
from outbox_core.backoff import RetryPause
from outbox_core.errors import ConfigurationError, StoreUnavailable
from outbox_core.messages import ClaimedRow, NewMessage
from outbox_core.outcomes import Outcome

#: The listener's reconnect pauses, shrunk for tests: 50 ms doubling to 200 ms, jittered.
FAST_RETRY = RetryPause(base=timedelta(milliseconds=50), cap=timedelta(milliseconds=200))

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("empty_outbox")]

#: How long "nothing arrives" is watched for. Notifications reach a listener in about a millisecond.
QUIET = 0.3


@pytest.fixture
async def listening(dsn: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A bare LISTEN connection: what enqueue announces, independent of WakeupListener."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(f"LISTEN {WAKEUP_CHANNEL}")
        yield conn


async def received(conn: psycopg.AsyncConnection[Any], within: float = QUIET) -> list[str]:
    """The lanes announced on the wake-up channel within ``within`` seconds."""
    return [note.payload async for note in conn.notifies(timeout=within)]


Probe = Callable[[], Awaitable[None]]


async def _nothing() -> None:
    return None


async def in_transaction(  # one branch per handle kind, as in test_enqueue
    kind: str,
    engine: Engine,
    async_engine: AsyncEngine,
    messages: Sequence[NewMessage],
    *,
    dsn: str,
    commit: bool = True,
    notify: bool = True,
    probe: Probe = _nothing,
) -> list[bool]:
    """Enqueue ``messages`` in one transaction of ``kind``, run ``probe``, then commit or roll
    back. Returns ``created`` of each enqueue."""
    created: list[bool] = []
    if kind == "psycopg":
        with psycopg.connect(dsn) as conn, conn.transaction():
            created = [enqueue(conn, m, notify=notify).created for m in messages]
            await probe()
            if not commit:
                raise psycopg.Rollback
    elif kind == "psycopg-async":
        async with await psycopg.AsyncConnection.connect(dsn) as aconn, aconn.transaction():
            created = [(await enqueue_async(aconn, m, notify=notify)).created for m in messages]
            await probe()
            if not commit:
                raise psycopg.Rollback
    elif kind == "sqlalchemy-connection":
        with engine.connect() as sa_conn:
            tx = sa_conn.begin()
            created = [enqueue(sa_conn, m, notify=notify).created for m in messages]
            await probe()
            tx.commit() if commit else tx.rollback()
    elif kind == "sqlalchemy-async-connection":
        async with async_engine.connect() as sa_aconn:
            atx = await sa_aconn.begin()
            created = [(await enqueue_async(sa_aconn, m, notify=notify)).created for m in messages]
            await probe()
            await (atx.commit() if commit else atx.rollback())
    elif kind == "sqlalchemy-session":
        with Session(engine) as session:
            session.execute(text("SELECT 1"))  # autobegins the session's transaction
            created = [enqueue(session, m, notify=notify).created for m in messages]
            await probe()
            session.commit() if commit else session.rollback()
    elif kind == "sqlalchemy-async-session":
        async with AsyncSession(async_engine) as asession:
            await asession.execute(text("SELECT 1"))
            created = [(await enqueue_async(asession, m, notify=notify)).created for m in messages]
            await probe()
            await (asession.commit() if commit else asession.rollback())
    else:  # pragma: no cover
        raise AssertionError(kind)
    return created


def count_rows(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM outbox_message").fetchone()
    assert row is not None
    return int(row[0])


def email(n: int, key: str | None = None) -> NewMessage:
    return NewMessage(lane="email", payload={"n": n}, idempotency_key=key)


# --- what enqueue announces ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_a_commit_announces_each_lane_once_and_only_after_the_commit(
    kind: str,
    engine: Engine,
    async_engine: AsyncEngine,
    dsn: str,
    listening: psycopg.AsyncConnection[Any],
):
    batch = [email(1), email(2, key="k"), NewMessage(lane="sms", payload={}), email(3)]

    async def nothing_before_commit() -> None:
        assert await received(listening) == [], "announced before the transaction committed"

    created = await in_transaction(
        kind, engine, async_engine, batch, dsn=dsn, probe=nothing_before_commit
    )
    assert created == [True] * 4
    # PostgreSQL folds a transaction's identical notifications: one per lane, not one per row.
    assert sorted(await received(listening)) == ["email", "sms"]

    # A row that already exists (same idempotency key) is not created, so nothing is announced.
    assert await in_transaction(kind, engine, async_engine, [email(4, key="k")], dsn=dsn) == [False]
    assert await received(listening) == []


@pytest.mark.parametrize("kind", KINDS)
async def test_a_rollback_announces_nothing(
    kind: str,
    engine: Engine,
    async_engine: AsyncEngine,
    dsn: str,
    listening: psycopg.AsyncConnection[Any],
):
    await in_transaction(kind, engine, async_engine, [email(1)], dsn=dsn, commit=False)
    assert await received(listening) == []
    assert count_rows(dsn) == 0


@pytest.mark.parametrize("kind", KINDS)
async def test_notify_false_writes_the_row_and_announces_nothing(
    kind: str,
    engine: Engine,
    async_engine: AsyncEngine,
    dsn: str,
    listening: psycopg.AsyncConnection[Any],
):
    await in_transaction(kind, engine, async_engine, [email(1)], dsn=dsn, notify=False)
    assert await received(listening) == []
    assert count_rows(dsn) == 1


# --- the listener ----------------------------------------------------------------------------------


async def commit_one(dsn: str, lane: str = "email", *, notify: bool = True) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
        await enqueue_async(conn, NewMessage(lane=lane, payload={"at": time.time()}), notify=notify)


async def settle(listener: WakeupListener) -> None:
    """Let the listener's after-connect wake-up go out (``start`` returns once LISTEN is in place)."""
    assert listener.connected
    await asyncio.sleep(0.1)


async def test_the_listener_wakes_the_committed_lanes_subscribers_only(dsn: str):
    async with WakeupListener(dsn) as listener:
        first, second = listener.wakeup("email"), listener.wakeup("email")
        other = listener.wakeup("sms")
        await settle(listener)
        for signal in (first, second, other):
            assert signal.is_set(), "a (re)connect wakes every lane once"
            signal.clear()

        async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
            await enqueue_async(conn, email(1))
            await asyncio.sleep(QUIET)
            assert not first.is_set(), "woken before the commit"
            raise psycopg.Rollback
        await asyncio.sleep(QUIET)  # type: ignore[unreachable, unused-ignore]  # mypy: the transaction block swallows Rollback
        assert not first.is_set(), "woken by a rolled-back enqueue"

        await commit_one(dsn)
        async with asyncio.timeout(1):
            await first.wait()
            await second.wait()  # every worker of the lane, not just one
        await asyncio.sleep(QUIET)
        assert not other.is_set()
        assert listener.notifications == 1


async def test_a_worker_with_a_listener_sends_a_fresh_row_within_a_second_despite_a_30s_poll(
    dsn: str,
):
    sent_at: list[float] = []
    sent = asyncio.Event()

    async def handler(row: ClaimedRow, *, budget: timedelta) -> Outcome:
        sent_at.append(time.perf_counter())
        sent.set()
        return Outcome.sent()

    async with (
        await PostgresStore.open(dsn, max_size=4) as store,
        WakeupListener(dsn) as listener,
    ):
        worker = Worker(
            store, handler, email_lane(poll_interval=30.0), wakeup=listener.wakeup("email")
        )
        running = asyncio.create_task(worker.run())
        try:
            await settle(listener)
            await asyncio.sleep(QUIET)  # the worker has claimed nothing and is in its 30 s pause
            assert worker.stats.claimed == 0
            started = time.perf_counter()
            await commit_one(dsn)
            async with asyncio.timeout(1):  # polling alone would take 30 s
                await sent.wait()
        finally:
            worker.request_stop()
            await asyncio.wait_for(running, timeout=10)
    assert sent_at[0] - started < 1
    assert worker.stats.dispatched == 1


async def test_the_listener_reconnects_after_its_backend_is_terminated_and_wakes_every_lane(
    dsn: str,
):
    async with WakeupListener(dsn, retry=FAST_RETRY) as listener:
        lanes = {lane: listener.wakeup(lane) for lane in ("email", "sms", "webhook")}
        await settle(listener)
        for signal in lanes.values():
            signal.clear()
        lost = listener.backend_pid
        assert lost is not None

        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", (lost,))
        # Nothing was enqueued: only the after-reconnect wake-up can set these.
        async with asyncio.timeout(5):
            for signal in lanes.values():
                await signal.wait()
        assert listener.reconnects == 1
        assert listener.backend_pid not in (None, lost)

        # LISTEN is in place again on the new connection.
        lanes["email"].clear()
        await commit_one(dsn)
        async with asyncio.timeout(1):
            await lanes["email"].wait()


async def test_with_notify_turned_off_polling_still_delivers(dsn: str):
    delivered = asyncio.Event()

    async def handler(row: ClaimedRow, *, budget: timedelta) -> Outcome:
        delivered.set()
        return Outcome.sent()

    async with (
        await PostgresStore.open(dsn, max_size=4) as store,
        WakeupListener(dsn) as listener,
    ):
        worker = Worker(
            store, handler, email_lane(poll_interval=0.2), wakeup=listener.wakeup("email")
        )
        running = asyncio.create_task(worker.run())
        try:
            await settle(listener)
            await commit_one(dsn, notify=False)
            async with asyncio.timeout(5):
                await delivered.wait()
        finally:
            worker.request_stop()
            await asyncio.wait_for(running, timeout=10)
        assert listener.notifications == 0  # it was the poll
    assert worker.stats.dispatched == 1


async def test_a_listener_that_cannot_connect_at_start_says_so(dsn: str):
    bad = psycopg.conninfo.make_conninfo(dsn, dbname="outbox_no_such_database")
    listener = WakeupListener(bad)
    with pytest.raises(StoreUnavailable, match="outbox_no_such_database") as raised:
        await listener.start()
    assert isinstance(raised.value.__cause__, psycopg.OperationalError)  # the driver's, chained
    assert not listener.connected
    await listener.aclose()


def test_listener_settings_are_checked_without_io():
    with pytest.raises(ConfigurationError, match="retry must be a RetryPause"):
        WakeupListener("postgresql://nowhere.invalid/x", retry=0.1)  # type: ignore[arg-type]


class FreezableProxy:
    """A TCP proxy to the test server whose open links can be frozen: nothing passes any more, yet
    nothing is closed either (a half-open connection: no error will ever come). New links flow."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._links: list[asyncio.Event] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> Self:
        async with await psycopg.AsyncConnection.connect(self._dsn) as probe:
            host, port = probe.info.host, probe.info.port
        self._upstream = (host, port)
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        listen_port = self._server.sockets[0].getsockname()[1]
        self.dsn = psycopg.conninfo.make_conninfo(self._dsn, host="127.0.0.1", port=listen_port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        for writer in self._writers:
            writer.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    def freeze(self) -> None:
        for flowing in self._links:
            flowing.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host, port = self._upstream
        if host.startswith("/"):  # a unix socket directory (the embedded server)
            up_reader, up_writer = await asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}")
        else:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        flowing = asyncio.Event()
        flowing.set()
        self._links.append(flowing)
        self._writers += [writer, up_writer]
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pump(source, sink, flowing))
            self._tasks.add(task)

    @staticmethod
    async def _pump(
        source: asyncio.StreamReader, sink: asyncio.StreamWriter, flowing: asyncio.Event
    ) -> None:
        while data := await source.read(65536):
            await flowing.wait()
            sink.write(data)
            await sink.drain()
        sink.close()  # one side hung up: so does the other (a cancel request waits for that)


async def test_the_listener_finds_a_silently_dead_connection_and_reconnects(dsn: str):
    async with (
        FreezableProxy(dsn) as proxy,
        WakeupListener(
            proxy.dsn, retry=FAST_RETRY, health_interval=0.2, health_timeout=0.2
        ) as listener,
    ):
        lanes = [listener.wakeup("email"), listener.wakeup("sms")]
        await settle(listener)
        for signal in lanes:
            signal.clear()
        proxy.freeze()  # no error will ever reach the listener: only its health check can tell
        async with asyncio.timeout(10):
            for signal in lanes:
                await signal.wait()
        assert listener.reconnects == 1

        lanes[0].clear()
        await commit_one(dsn)
        async with asyncio.timeout(1):
            await lanes[0].wait()
