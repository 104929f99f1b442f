"""F10 — cancellation mid-send (RELIABILITY.md): the deadline fires while a row is in flight.

One batch of two rows, both in flight at once (``rows_in_flight=2``), budgets shrunk (per-row 6.8 s,
batch 13.6 s, claim lease 14.1 s): row 1 goes to a good SMTP sink and is delivered, and its mark is
slow (the database takes a while); row 2 goes to a server that takes the message and never replies.
The deadline fires while row 1's mark is running and row 2 is mid-send (after DATA). Then:

- row 1's mark is still written (mechanism: a mark cut off by the cancellation is run again in a
  task of its own, ``worker.run_surviving_cancel``; without it row 1 stays pending, and is sent
  again after its lease);
- row 2 keeps its lease: still pending under the cancelled claim, due only when the lease ends
  (mechanism: nothing is released on cancellation; release it and a sibling takes it at once, while
  the hung server may hold the message);
- a sibling worker re-claims row 2 only after that lease, and delivers it to a good server.

Which deadline. The worker's own batch deadline can't fire mid-send: the row-start gate starts a
row only if ``now + per_row <= claim_start + batch_timeout``, and the send is cut at
``per_row - mark``, so every send ends before the batch deadline (a 2-row batch at the chain's
minimum, or a batch timeout shrunk below the chain, gives the same: the send budget is always a
mark budget short of the deadline). The deadline that *does* land mid-send is the owner's: the task
running ``Worker.run`` cancelled by a supervisor's deadline or a hard shutdown. It takes the same
path as the batch timeout (the batch's task group is cancelled around the rows in flight), so the
test fires it at a precise moment: once row 1's mark has started and the hung server has row 2's
DATA.

Placement. Row 1's 250 and row 2's DATA at the hung server come at about the same time, in either
order, and how far apart depends on the machine. So row 1's first mark is not slowed by a fixed
delay (which a loaded machine could outlast before row 2 reached DATA) but held until the deadline
has fired, and the mark and exchange budgets (3 s each) leave that moment seconds of room on either
side: the deadline lands inside row 1's mark and inside row 2's hung exchange by construction. The
hold gives up a margin before the mark's budget, so a machine too slow even for that fails the
``fired_mid_send`` check (said so), not the mark.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
from tests.faults.smtp_servers import Hostility, RawSmtpServer
from tests.support.postgres import enqueue_all, stored
from tests.support.smtp import smtp_settings

from outbox_adapters.clock import SystemClock
from outbox_adapters.demo.sink import SmtpSink
from outbox_adapters.lanes.email import EmailHandler, email_lane, email_message
from outbox_adapters.postgres import PostgresStore
from outbox_adapters.runtime import Worker
from outbox_adapters.smtp import SmtpMailer
from outbox_core.backoff import SlotSchedule
from outbox_core.messages import ClaimedRow, Mark
from outbox_core.outcomes import Outcome
from outbox_core.ports import ClaimRequest, MarkResult
from outbox_core.timing import EmailStepBudgets, EmailTiming

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

SENDER = "noreply@shop.example"
BUDGETS = EmailStepBudgets(
    suppression=timedelta(seconds=0.1),
    branding=timedelta(seconds=0.1),
    dial=timedelta(seconds=0.5),
    smtp_exchange=timedelta(seconds=3),
    bounce_report=timedelta(seconds=0.1),
    mark=timedelta(seconds=3),
)
#: Honest timing: per-row 6.8 s, batch 2, batch timeout 13.6 s, claim lease 14.1 s.
TIMING = EmailTiming(BUDGETS, batch_size=2, lease_grace=timedelta(seconds=0.5))
#: Row 1's first mark is held until the deadline fires, but gives up this long before its budget.
HOLD_MARGIN = 0.5


class Recording:
    """The real store, recording claims (DB lease ends) and marks. The first mark is held (a slow
    database) until ``answer`` is set, at most ``hold`` seconds; the re-run is not held."""

    def __init__(self, store: PostgresStore, *, hold: float = 0.0) -> None:
        self._store = store
        self._hold = hold
        self.leases: dict[int, datetime] = {}
        self.tokens: dict[int, str] = {}
        #: row id → (mark started, mark finished) on the loop clock.
        self.marks: dict[int, tuple[float, float]] = {}
        self.mark_started = asyncio.Event()
        # Not `release`: that is the store's own method (OutboxStore.release), which this wraps.
        self.answer = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def claim_due(self, request: ClaimRequest) -> Sequence[ClaimedRow]:
        rows = await self._store.claim_due(request)
        for row in rows:
            self.leases[int(row.id)] = row.lease_expires_at
            self.tokens[int(row.id)] = row.token.value
        return rows

    async def mark_if_pending(self, mark: Mark) -> MarkResult:
        loop = asyncio.get_running_loop()
        started = loop.time()
        held = not self.mark_started.is_set()
        self.mark_started.set()
        try:
            if held:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._hold):
                        await self.answer.wait()
            return await self._store.mark_if_pending(mark)
        finally:
            # A mark cut off by the cancellation is run again: keep the first start.
            first = self.marks.get(int(mark.row_id), (started, 0.0))[0]
            self.marks[int(mark.row_id)] = (first, loop.time())


def mailer(port: int, context: Any) -> SmtpMailer:
    return SmtpMailer(smtp_settings(port, context), steps=BUDGETS)


async def enqueue_two(dsn: str, lane: str) -> tuple[int, int]:
    messages = [
        email_message(to=to, subject="Hi", text="Hello", lane=lane)
        for to in ("ann@example.org", "bob@example.org")
    ]
    first, second = await enqueue_all(dsn, messages, notify=False)
    return first, second


@attrs.define
class Case:
    finished_marked: bool = False
    kept_lease: bool = False
    reclaimed_after_lease: bool = False
    fired_mid_send: bool = False
    row1_sent: int = 0
    row2_sent_good: int = 0
    row2_maybe_by_hung: int = 0
    detail: str = ""

    @property
    def ok(self) -> bool:
        return (
            self.fired_mid_send
            and self.finished_marked
            and self.kept_lease
            and self.reclaimed_after_lease
            and self.row1_sent == 1
            and self.row2_sent_good == 1
        )


async def run_case(dsn: str, sink: SmtpSink) -> Case:  # noqa: PLR0915 - one story
    case = Case()
    lane = f"f10-{secrets.token_hex(4)}"
    first, second = await enqueue_two(dsn, lane)
    before = len(sink.received)
    good = mailer(sink.port, sink.client_context())
    async with (
        RawSmtpServer(Hostility.HANG_AFTER_DATA) as hung,
        await PostgresStore.open(dsn, max_size=4) as store,
    ):
        hung_mailer = mailer(hung.port, hung.client_context())
        to_good = EmailHandler(good, sender=SENDER, clock=SystemClock())
        to_hung = EmailHandler(hung_mailer, sender=SENDER, clock=SystemClock())
        row2_in_flight = asyncio.Event()
        cancelled_mid_send: list[int] = []

        async def route(row: ClaimedRow, *, budget: timedelta) -> Outcome:
            if row.id != second:
                return await to_good(row, budget=budget)
            row2_in_flight.set()
            try:
                return await to_hung(row, budget=budget)
            except asyncio.CancelledError:
                cancelled_mid_send.append(int(row.id))
                raise

        hold = BUDGETS.mark.total_seconds() - HOLD_MARGIN
        recording = Recording(store, hold=hold)
        config = email_lane(
            lane=lane, timing=TIMING, poll_interval=0.05, rows_in_flight=2, backoff=_retry()
        )
        worker = Worker(recording, route, config, clock=SystemClock())
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(worker.run())
        await asyncio.wait_for(recording.mark_started.wait(), timeout=10)
        await asyncio.wait_for(row2_in_flight.wait(), timeout=10)
        await _until(lambda: bool(hung.messages), within=10)  # row 2 is past DATA
        fired_at = loop.time()
        task.cancel()  # the owner's deadline
        recording.answer.set()  # the database answers: the re-run of row 1's mark isn't held
        with pytest.raises(asyncio.CancelledError):
            await task
        await worker.wait_for_marks()
        await hung_mailer.aclose()
        case.row2_maybe_by_hung = len(hung.messages)

        mark_start, mark_end = recording.marks.get(first, (0.0, 0.0))
        case.fired_mid_send = (
            cancelled_mid_send == [second] and mark_start < fired_at <= mark_end + 0.05
        )
        row1, row2 = stored(dsn, first), stored(dsn, second)
        case.finished_marked = row1["status"] == "dispatched"
        lease_end = recording.leases[second]
        case.kept_lease = (
            row2["status"] == "pending"
            and row2["claim_token"] == recording.tokens[second]
            and row2["next_attempt_at"] == lease_end
            and lease_end > datetime.now(UTC)
        )
        case.detail = f"row1={row1['status']} row2={row2['status']} due={row2['next_attempt_at']}"

        # The sibling: honest timing, the real clock, a good server for everything.
        sibling = Worker(
            store,
            EmailHandler(good, sender=SENDER, clock=SystemClock()),
            email_lane(lane=lane, timing=TIMING, poll_interval=0.05, backoff=_retry()),
            clock=SystemClock(),
        )
        sibling_task = asyncio.create_task(sibling.run())
        try:
            wait = (lease_end - datetime.now(UTC)).total_seconds() + 10
            await _until(lambda: stored(dsn, second)["status"] != "pending", within=wait)
        finally:
            sibling.request_stop()
            await asyncio.wait_for(sibling_task, timeout=10)
        row2 = stored(dsn, second)
        case.reclaimed_after_lease = (
            row2["status"] == "dispatched"
            and row2["claim_token"] != recording.tokens[second]
            and row2["claimed_at"] >= lease_end
        )
    await good.aclose()
    recipients = [r for mail in sink.received[before:] for r in mail.recipients]
    case.row1_sent = recipients.count("ann@example.org")
    case.row2_sent_good = recipients.count("bob@example.org")
    return case


def _retry() -> SlotSchedule:
    return SlotSchedule((timedelta(minutes=1),))


async def _until(condition: Callable[[], bool], *, within: float) -> None:
    """Poll ``condition`` (database state or a server's counters: nothing to await on)."""
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110 - polling state that has no event to wait on
            await asyncio.sleep(0.05)


async def test_f10_cancellation_mid_send(
    dsn: str,
    sink: SmtpSink,
    chaos_full: bool,
    report: Callable[[str], None],
) -> None:
    cases = [await run_case(dsn, sink) for _ in range(3 if chaos_full else 1)]
    report(
        f"F10 cases={len(cases)}"
        f" finished_rows_marked={sum(c.finished_marked for c in cases)}"
        f" unfinished_kept_lease={sum(c.kept_lease for c in cases)}"
        f" reclaimed_after_lease={sum(c.reclaimed_after_lease for c in cases)}"
        f" duplicates_row1={sum(c.row1_sent - 1 for c in cases)}"
        f" maybe_delivered_by_hung={sum(c.row2_maybe_by_hung for c in cases)}"
    )
    failed = [repr(c) for c in cases if not c.ok]
    assert not failed, "\n".join(failed)
