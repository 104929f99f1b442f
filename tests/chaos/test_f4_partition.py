"""F4 — a silent network partition between a worker and PostgreSQL (RELIABILITY.md).

Worker A reaches the database through a :class:`~tests.faults.proxy.FaultProxy`; worker B, its
sibling, connects directly. The proxy *stalls*: nothing forwarded, nothing closed, the bytes held
(a partition, not a crash). Each worker sends to its own SMTP sink, which stamps every arrival, and
records when it worked on which row. Counted:

- ``sends_after_lease``: messages that reached A's sink after the lease of the claim A sent them
  under (the database's ``lease_expires_at``, read from the claim itself): must be 0;
- ``overlaps``: rows that A and B were sending at the same time: must be 0.

Two partitions:

``claim reply lost``  A's claim commits on the server (rows leased to A) and then the link stalls,
    before the claim's reply, for longer than the lease. B re-claims the rows when the lease ends
    and sends them; when the link heals, A finally gets its rows, long expired. Mechanism: A trusts
    a lease only until ``claim start + lease`` on its *own* monotonic clock, taken before the claim
    was sent (the row-start gate and the send cut both use it). Take the claim's start when its
    reply arrives instead, and A sends every row again, after the lease: red. (Once the claim has
    a time limit shorter than this stall, A abandons the claim instead and never gets the rows;
    the figures still hold, and that limit is then what protects the lease.)
``mid-batch``  the link stalls right after A delivered the first row of its batch: its mark can't
    land, B re-claims both rows after the lease and sends them (one duplicate, allowed); A must not
    send anything more under the lost lease.

Also here: two liveness checks (a claim that meets the stalled link must give up; a graceful stop
during the partition must end), and the proxy's own checks.

What a stalled link costs, measured here: psycopg answers the cancellation of a query in flight by
first trying to cancel it on the server (over a new connection, which the partition stalls too, for
up to 5 s) and then waiting up to 5 s more for the query to end before it closes the connection.
So every time limit the worker sets on a database call (the mark's 1 s here) is overrun by up to
10 s on a silent link; the figure line prints how long A's mark really held on.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import timedelta
from typing import Any

import attrs
import psycopg
import pytest
from tests.faults.pg import ThrowawayPostgres
from tests.faults.proxy import Direction, FaultProxy
from tests.faults.smtp_servers import TimedSinkHandler, timed_sink
from tests.support.message_ids import rows_in_database, token_of

from outbox_adapters.clock import SystemClock
from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.lanes.email import EmailHandler, email_lane, email_message
from outbox_adapters.postgres import PostgresStore, enqueue
from outbox_adapters.runtime import Worker
from outbox_adapters.smtp import SmtpMailer, SmtpSettings
from outbox_core.backoff import RetryPause, SlotSchedule
from outbox_core.messages import ClaimedRow, Mark
from outbox_core.outcomes import Outcome
from outbox_core.ports import ClaimRequest, MarkResult
from outbox_core.timing import EmailStepBudgets, EmailTiming
from outbox_core.tls import SmtpSecurityPolicy

#: The pause after a failed claim, shrunk with the test's other timings (the default, 1 s doubling
#: to 30 s, would have a worker still asleep long after the database came back).
CLAIM_RETRY_SHRUNK = RetryPause(base=timedelta(milliseconds=100), cap=timedelta(seconds=2))

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

SENDER = "noreply@shop.example"
#: Per-row 2.8 s, batch 2, batch timeout 5.6 s, claim lease 6 s.
TIMING = EmailTiming(
    EmailStepBudgets(
        suppression=timedelta(seconds=0.1),
        branding=timedelta(seconds=0.1),
        dial=timedelta(seconds=0.5),
        smtp_exchange=timedelta(seconds=1),
        bounce_report=timedelta(seconds=0.1),
        mark=timedelta(seconds=1),
    ),
    batch_size=2,
    lease_grace=timedelta(seconds=0.4),
)
LEASE = TIMING.claim_lease().total_seconds()
#: The same, but a batch timeout (23.6 s) longer than a mark can hold a stalled link (1 s + psycopg's
#: up to 10 s of cancellation): as with the production defaults (batch 300 s), the batch is still
#: running when the mark gives up, so a stop goes on to release the rows not started.
LONG_BATCH = EmailTiming(
    attrs.evolve(TIMING.budgets, smtp_exchange=timedelta(seconds=10)),
    batch_size=2,
    lease_grace=TIMING.lease_grace,
)


# --- instruments ---------------------------------------------------------------------------------


@attrs.frozen
class Claim:
    row: int
    lease_end: float  # epoch seconds, the database's lease_expires_at


@attrs.frozen
class Span:
    row: int
    start: float  # epoch seconds
    end: float


class Recorder:
    """One worker's view: the claims it got (with the database's lease) and its send spans."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self.claims: list[Claim] = []
        self.spans: list[Span] = []
        self.claim_started = asyncio.Event()
        self.claim_calls = 0
        self.claim_failures = 0
        self.claim_exits: list[float] = []
        #: How long each mark call took, cancellation included (loop clock seconds).
        self.mark_seconds: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def claim_due(self, request: ClaimRequest) -> Sequence[ClaimedRow]:
        self.claim_calls += 1
        self.claim_started.set()
        try:
            rows = await self._store.claim_due(request)
        except Exception:
            self.claim_failures += 1
            raise
        finally:
            self.claim_exits.append(time.monotonic())  # returned, raised or cancelled
        self.claims += [Claim(int(r.id), r.lease_expires_at.timestamp()) for r in rows]
        return rows

    async def mark_if_pending(self, mark: Mark) -> MarkResult:
        started = time.monotonic()
        try:
            return await self._store.mark_if_pending(mark)
        finally:
            self.mark_seconds.append(time.monotonic() - started)

    def handler(
        self, inner: EmailHandler, after_send: Callable[[ClaimedRow], None] | None = None
    ) -> Callable[..., Any]:
        async def handle(row: ClaimedRow, *, budget: timedelta) -> Outcome:
            start = time.time()
            try:
                return await inner(row, budget=budget)
            finally:
                self.spans.append(Span(int(row.id), start, time.time()))
                if after_send is not None:
                    after_send(row)

        return handle


def sends_after_lease(
    handler: TimedSinkHandler, claims: list[Claim], rows: dict[str, int]
) -> list[str]:
    """Arrivals at a worker's sink later than the lease of the claim they were sent under
    (``rows``: the lane's rows by Message-ID token, tests/support/message_ids.py).

    That claim is the worker's latest claim of the row that began (in the database: lease end
    minus the lease) before the message arrived; no such claim counts as late too.
    """
    late = []
    for arrival in handler.arrived():
        row = rows[token_of(arrival.message_id)]
        begun = [c.lease_end for c in claims if c.row == row and c.lease_end - LEASE <= arrival.at]
        if not begun or arrival.at > max(begun):
            late.append(f"row {row} arrived {arrival.at:.3f}, under a lease ending {begun}")
    return late


def overlaps(a: list[Span], b: list[Span]) -> list[str]:
    return [
        f"row {x.row}: A {x.start:.3f}-{x.end:.3f}, B {y.start:.3f}-{y.end:.3f}"
        for x in a
        for y in b
        if x.row == y.row and x.start < y.end and y.start < x.end
    ]


# --- the scene -----------------------------------------------------------------------------------


@attrs.define
class Scene:
    pg: ThrowawayPostgres
    proxy: FaultProxy
    lane: str
    sink_a: SmtpSink
    seen_a: TimedSinkHandler
    sink_b: SmtpSink
    seen_b: TimedSinkHandler
    stores: list[PostgresStore] = attrs.Factory(list)
    mailers: list[SmtpMailer] = attrs.Factory(list)

    def enqueue(self, count: int) -> list[int]:
        ids = []
        with psycopg.connect(self.pg.admin_dsn) as conn, conn.transaction():
            for n in range(count):
                message = email_message(
                    to=f"{self.lane}-{n}@example.org", subject="Hi", text="Hello", lane=self.lane
                )
                ids.append(int(enqueue(conn, message, notify=False).row_id))
        return ids

    def claimed(self) -> int:
        """Rows of the lane some claim has taken (attempts grow only in a claim)."""
        with psycopg.connect(self.pg.admin_dsn) as conn:
            found = conn.execute(
                "SELECT count(*) FROM outbox_message WHERE lane = %s AND attempts > 0",
                (self.lane,),
            ).fetchone()
        return int(found[0]) if found else 0

    def statuses(self) -> dict[int, str]:
        with psycopg.connect(self.pg.admin_dsn) as conn:
            found = conn.execute(
                "SELECT id, status FROM outbox_message WHERE lane = %s", (self.lane,)
            ).fetchall()
        return {int(i): str(s) for i, s in found}

    async def worker(
        self,
        *,
        via_proxy: bool,
        after_send: Callable[[ClaimedRow], None] | None = None,
        timing: EmailTiming = TIMING,
    ) -> tuple[Worker, Recorder]:
        dsn = self.pg.dsn_via(self.proxy.host, self.proxy.port) if via_proxy else self.pg.dsn
        store = await PostgresStore.open(dsn, max_size=4)
        self.stores.append(store)
        sink = self.sink_a if via_proxy else self.sink_b
        mailer = SmtpMailer(
            SmtpSettings(
                host="127.0.0.1",
                port=sink.port,
                policy=SmtpSecurityPolicy(sender=SENDER),
                tls_context=sink.client_context(),
            ),
            steps=TIMING.budgets,
        )
        self.mailers.append(mailer)
        recorder = Recorder(store)
        handler = recorder.handler(
            EmailHandler(mailer, sender=SENDER, clock=SystemClock()), after_send
        )
        config = email_lane(
            lane=self.lane,
            timing=timing,
            poll_interval=0.05,
            claim_retry=CLAIM_RETRY_SHRUNK,
            backoff=SlotSchedule((timedelta(seconds=0.5),) * 10),
        )
        return Worker(recorder, handler, config, clock=SystemClock()), recorder

    async def close(self) -> None:
        for mailer in self.mailers:
            await mailer.aclose()
        for store in self.stores:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(store.close(), timeout=15)


@contextlib.asynccontextmanager
async def scene(pg: ThrowawayPostgres) -> AsyncIterator[Scene]:
    sink_a, seen_a = timed_sink(tls="starttls")
    sink_b, seen_b = timed_sink(tls="starttls")
    with sink_a, sink_b:
        async with FaultProxy("127.0.0.1", pg.port) as proxy:
            built = Scene(pg, proxy, f"f4_{secrets.token_hex(3)}", sink_a, seen_a, sink_b, seen_b)
            try:
                yield built
            finally:
                proxy.pass_through()  # heal, so everything still waiting on it can finish
                await built.close()


async def _until(condition: Callable[[], bool], *, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within}s")
        await asyncio.sleep(0.05)


async def _stop(*pairs: tuple[Worker, asyncio.Task[Any]]) -> None:
    for worker, _task in pairs:
        worker.request_stop()
    await asyncio.wait_for(asyncio.gather(*(t for _, t in pairs), return_exceptions=True), 30)


@attrs.define
class Figures:
    late: list[str] = attrs.Factory(list)
    overlapping: list[str] = attrs.Factory(list)
    notes: list[str] = attrs.Factory(list)


async def claim_reply_lost(pg: ThrowawayPostgres, figures: Figures) -> None:
    async with scene(pg) as s:
        ids = s.enqueue(2)
        stall_for = LEASE + 1.5
        # The claim (one autocommit statement: it commits as the server runs it) is forwarded;
        # then the link goes silent, replies included.
        trapped = s.proxy.when_sent(b"SKIP LOCKED", s.proxy.stall)
        a, rec_a = await s.worker(via_proxy=True)
        task_a = asyncio.create_task(a.run())
        await asyncio.wait_for(trapped.wait(), timeout=10)
        # The claim's bytes are at the server; B starts only once it has run there (the rows
        # leased to A: no one else claims yet), or B could take the rows first and A's lost reply
        # would hold none.
        await _until(lambda: s.claimed() == len(ids), within=10, what="A's claim ran on the server")
        b, rec_b = await s.worker(via_proxy=False)
        task_b = asyncio.create_task(b.run())
        await asyncio.sleep(stall_for)
        s.proxy.pass_through()
        # A gets its reply now; it has worked that batch once its next claim has come back.
        await _until(
            lambda: len(rec_a.claim_exits) >= 2,
            within=30,
            what="A finished the batch of its late claim",
        )
        await _until(
            lambda: all(st == "dispatched" for st in s.statuses().values()),
            within=LEASE + 15,
            what="every row dispatched after the partition healed",
        )
        await _stop((a, task_a), (b, task_b))
        figures.late += sends_after_lease(
            s.seen_a, rec_a.claims, rows_in_database(s.pg.admin_dsn, s.lane)
        )
        figures.overlapping += overlaps(rec_a.spans, rec_b.spans)
        figures.notes.append(
            f"claim_reply_lost: A claimed {len(rec_a.claims)} sent {len(s.seen_a.arrived())},"
            f" B sent {len(s.seen_b.arrived())} of {len(ids)}"
        )


async def mid_batch(pg: ThrowawayPostgres, figures: Figures) -> None:
    async with scene(pg) as s:
        ids = s.enqueue(2)
        sent = asyncio.Event()

        def partition_after_first_send(_row: ClaimedRow) -> None:
            if not sent.is_set():
                s.proxy.stall()  # the delivered row's mark is next: it meets the partition
                sent.set()

        a, rec_a = await s.worker(via_proxy=True, after_send=partition_after_first_send)
        task_a = asyncio.create_task(a.run())
        await asyncio.wait_for(sent.wait(), timeout=10)
        b, rec_b = await s.worker(via_proxy=False)
        task_b = asyncio.create_task(b.run())
        await _until(
            lambda: all(st == "dispatched" for st in s.statuses().values()),
            within=LEASE + 15,
            what="B delivered every row after A's lease",
        )
        a_sent_while_partitioned = len(s.seen_a.arrived())
        # How long A's first mark held on to the stalled link, cancellation included (its budget
        # is 1 s; psycopg answers a cancelled query by trying to cancel it on the server first).
        await _until(lambda: bool(rec_a.mark_seconds), within=30, what="A's first mark ended")
        mark_held = rec_a.mark_seconds[0]
        s.proxy.pass_through()
        await _stop((a, task_a), (b, task_b))
        figures.late += sends_after_lease(
            s.seen_a, rec_a.claims, rows_in_database(s.pg.admin_dsn, s.lane)
        )
        figures.overlapping += overlaps(rec_a.spans, rec_b.spans)
        figures.notes.append(
            f"mid_batch: A sent {a_sent_while_partitioned} before/while partitioned,"
            f" B sent {len(s.seen_b.arrived())} of {len(ids)},"
            f" A's mark held the stalled link {mark_held:.1f}s (budget"
            f" {TIMING.budgets.mark.total_seconds():.0f}s)"
        )


async def test_f4_silent_partition(
    pg: ThrowawayPostgres, chaos_full: bool, report: Callable[[str], None]
) -> None:
    figures = Figures()
    for _ in range(3 if chaos_full else 1):
        await claim_reply_lost(pg, figures)
        await mid_batch(pg, figures)
    report(
        f"F4 sends_after_lease={len(figures.late)} overlaps={len(figures.overlapping)}"
        f" lease_s={LEASE:.1f} ({'; '.join(dict.fromkeys(figures.notes))})"
    )
    assert not figures.late, figures.late
    assert not figures.overlapping, figures.overlapping


async def test_f4_a_claim_caught_by_the_partition_gives_up(
    pg: ThrowawayPostgres, report: Callable[[str], None]
) -> None:
    """An idle worker's next claim meets the stalled link: it must give up and let the worker go on
    (and stop when asked), not wait for a reply that may never come.

    Mechanism: a time limit on the claim. Without one the claim waits for as long as the
    connection looks alive, which for a partition is the kernel's retransmission timeout (about
    15 minutes on Linux) and for this proxy, forever; meanwhile the worker neither works nor stops.
    """
    bound = 20.0  # a claim budget of a few seconds plus psycopg's own cancellation (up to 10 s)
    async with scene(pg) as s:
        a, rec_a = await s.worker(via_proxy=True)
        task_a = asyncio.create_task(a.run())
        await _until(lambda: rec_a.claim_calls >= 3, within=10, what="A polls an empty lane")
        s.proxy.stall()
        started = time.monotonic()
        gave_up: float | None = None
        with contextlib.suppress(AssertionError):
            # A claim that began after the stall has ended (returned, raised or was cancelled).
            await _until(
                lambda: any(t > started + 0.2 for t in rec_a.claim_exits), within=bound, what=""
            )
            gave_up = max(rec_a.claim_exits) - started
        a.request_stop()  # SIGTERM, while the link is still silent
        stop_started = time.monotonic()
        done, _ = await asyncio.wait({task_a}, timeout=bound)
        stopped_in = time.monotonic() - stop_started if done else None
        s.proxy.pass_through()  # heal: whatever still waits on the link can finish
        if not done:
            await asyncio.wait_for(task_a, timeout=30)
    report(
        "F4 idle_claim_on_stalled_link"
        f" gave_up_s={'never' if gave_up is None else f'{gave_up:.1f}'} (bound {bound:.0f})"
        f" claim_failures={rec_a.claim_failures}"
        f" stop_s={'never' if stopped_in is None else f'{stopped_in:.1f}'} (bound {bound:.0f})"
    )
    assert gave_up is not None, f"the claim on the stalled link did not end within {bound}s"
    assert stopped_in is not None, f"the worker did not stop within {bound}s while partitioned"


async def test_f4_a_stop_during_the_partition_ends(
    pg: ThrowawayPostgres, report: Callable[[str], None]
) -> None:
    """SIGTERM while a batch is in flight and the link goes silent: the worker finishes the row in
    flight, gives back (releases) the rows not started, waits for its marks, and returns. Every
    one of those database calls meets the stalled link, so each must give up on its own.

    Mechanism: a time limit on the release (the mark has one). Without it the release of the
    unstarted row waits forever on the stalled link, and ``run()`` (which waits for the detached
    marks and releases before returning) never returns: a graceful stop hangs.
    """
    bound = 30.0  # the mark (1 s) and the release, each plus psycopg's cancellation (up to 10 s)
    async with scene(pg) as s:
        s.enqueue(2)
        worker: list[Worker] = []

        def partition_and_stop(_row: ClaimedRow) -> None:
            if s.proxy.stalled:
                return
            s.proxy.stall()  # row 1 is delivered; its mark and row 2's release are next
            worker[0].request_stop()

        a, rec_a = await s.worker(via_proxy=True, after_send=partition_and_stop, timing=LONG_BATCH)
        worker.append(a)
        task_a = asyncio.create_task(a.run())
        await _until(lambda: bool(s.proxy.stalled), within=10, what="row 1 sent")
        started = time.monotonic()
        done, _ = await asyncio.wait({task_a}, timeout=bound)
        stopped_in = time.monotonic() - started if done else None
        s.proxy.pass_through()  # heal: whatever still waits on the link can finish
        if not done:
            await asyncio.wait_for(task_a, timeout=30)
    report(
        "F4 stop_during_partition"
        f" stop_s={'never' if stopped_in is None else f'{stopped_in:.1f}'} (bound {bound:.0f})"
        f" mark_held_s={rec_a.mark_seconds[0]:.1f}"
    )
    assert stopped_in is not None, f"a graceful stop during the partition took over {bound}s"


# --- the proxy itself ----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def echo_behind_proxy() -> AsyncIterator[tuple[FaultProxy, Any, Any]]:
    """An echo server behind a proxy, and one client connection through it."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(1024):
                writer.write(data)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    try:
        async with FaultProxy("127.0.0.1", server.sockets[0].getsockname()[1]) as proxy:
            reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
            try:
                yield proxy, reader, writer
            finally:
                writer.transport.abort()
    finally:
        server.close()
        await server.wait_closed()


async def test_proxy_stall_holds_bytes_and_heals() -> None:
    async with echo_behind_proxy() as (proxy, reader, writer):
        writer.write(b"one")
        assert await asyncio.wait_for(reader.read(10), 2) == b"one"
        proxy.stall()
        writer.write(b"two")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(10), 0.3)  # silent, and still open
        assert proxy.connections == 1
        proxy.pass_through()
        assert await asyncio.wait_for(reader.read(10), 2) == b"two"  # held, not lost


async def test_proxy_stall_on_a_marker_holds_only_the_reply() -> None:
    async with echo_behind_proxy() as (proxy, reader, writer):
        fired = proxy.when_sent(b"CLAIM", lambda: proxy.stall(Direction.DOWNSTREAM))
        writer.write(b"-- CLAIM --")
        await asyncio.wait_for(fired.wait(), 2)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(20), 0.3)
        assert proxy.forwarded[Direction.UPSTREAM] == len(b"-- CLAIM --")  # the server has it
        proxy.pass_through()
        assert await asyncio.wait_for(reader.read(20), 2) == b"-- CLAIM --"


async def test_proxy_drop_closes_and_reset_aborts() -> None:
    async with echo_behind_proxy() as (proxy, first, _writer):
        proxy.drop()
        assert await asyncio.wait_for(first.read(10), 2) == b""  # FIN
        proxy.pass_through()
        second, writer = await asyncio.open_connection(proxy.host, proxy.port)
        writer.write(b"x")
        assert await asyncio.wait_for(second.read(10), 2) == b"x"
        proxy.reset()
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(second.read(10), 2)  # RST
        writer.transport.abort()
        # New connections are refused the same way while the mode lasts.
        third, writer = await asyncio.open_connection(proxy.host, proxy.port)
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(third.read(10), 2)
        writer.transport.abort()


async def test_proxy_slow_limits_the_rate() -> None:
    async with echo_behind_proxy() as (proxy, reader, writer):
        proxy.slow(200)  # bytes per second, each way
        started = time.monotonic()
        writer.write(b"x" * 100)
        received = b""
        while len(received) < 100:
            received += await asyncio.wait_for(reader.read(100), 5)
        assert time.monotonic() - started >= 0.4  # 100 bytes at 200 B/s, at least half a second
