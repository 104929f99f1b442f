"""The worker: the loop of DESIGN.md, written once against the ports.

Theory of operation
-------------------
One pass (:meth:`Worker.run_once`) is::

    claim  ── one short committed transaction: up to batch_size due rows, attempts + 1, a lease
              of claim_lease(batch_size), a fresh claim token
    for each row, outside any transaction, while the batch timeout runs:
        gate   ── start the row only if a whole per-row budget still fits in the batch;
                  otherwise release it (due again at once, attempt refunded)
        send   ── the handler, under min(per-row budget - mark budget, time left on the lease):
                  a worker never sends after its own lease has ended (a sibling may own the row)
        decide ── outbox_core.decide(row, outcome, now) → Mark (the adapter reported, the core decides)
        mark   ── with its own budget, and surviving the batch's cancellation: if the batch times
                  out (or the worker is cancelled) while a mark runs, the mark is run again in a
                  task of its own, so work already done is always recorded. The store applies it
                  only if the row is still pending under this claim's token (the fence), which is
                  also what makes running it twice harmless.

A handler that raises is that row's failure (``InvalidMessage`` → permanent, anything else →
transient) and never strands the rest of the batch. A row whose stored payload the store could not
decode (``ClaimedRow.payload`` is then the stored text) fails permanently without reaching the
handler, and a mark that fails for a reason other than the connection is given up (logged and
counted): the lease brings the row back, and the other rows of the batch go on. A row whose send
is cut off by the batch timeout is left alone: it keeps its lease and is claimed again after it
(RELIABILITY F10).

When a claim finds less than a full batch the worker sleeps for the poll interval; given a
:class:`~outbox_adapters.wakeup.Wakeup` (LISTEN/NOTIFY, B3) it wakes as soon as new work is
signalled. Polling stays the correctness path: a lost signal only delays a row until the next poll.

Stopping (:meth:`Worker.request_stop`, wired to SIGTERM by the CLI) stops claiming, lets the row in
flight finish, releases the rows not yet started, and waits for the marks in flight.

The loop is the same over the in-memory fakes and over PostgreSQL/SMTP; the tests run both.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import secrets
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import timedelta
from typing import Any, TypeVar

import attrs

from outbox_adapters.clock import SystemClock
from outbox_adapters.wakeup import Wakeup
from outbox_core.backoff import EMAIL_BACKOFF, Backoff
from outbox_core.decide import DEFAULT_RETRY_AFTER_CAP, decide
from outbox_core.delivery import Status
from outbox_core.errors import ConfigurationError, InvalidMessage, InvalidPayload
from outbox_core.messages import ClaimedRow, ClaimToken, Mark, check_lane_name
from outbox_core.outcomes import Outcome
from outbox_core.payload import decode_payload
from outbox_core.ports import (
    ClaimRequest,
    Clock,
    LeaderLease,
    LeaderTerm,
    MarkResult,
    OutboxStore,
    RowHandler,
)
from outbox_core.scrub import ScrubRules
from outbox_core.timing import DEFAULT_EMAIL_TIMING, EmailTiming

__all__ = [
    "BatchReport",
    "LaneConfig",
    "Worker",
    "WorkerStats",
    "run_detached",
    "run_surviving_cancel",
]

_log = logging.getLogger(__name__)
T = TypeVar("T")
W = TypeVar("W", Mark, Sequence[Mark])
#: A claim's rows and the monotonic instant it started.
_Claimed = tuple[Sequence[ClaimedRow], float]


async def run_detached(coro: Coroutine[Any, Any, T], keep: set[asyncio.Task[Any]]) -> T:
    """Run ``coro`` in a task of its own and wait for it, shielded from our caller's cancellation.

    If the caller is cancelled (the batch timed out, the worker is stopping), the task goes on to
    the end; ``keep`` holds it so it is neither garbage-collected nor forgotten at shutdown. This is
    what makes a mark survive the batch: without it, a delivered row whose mark was cut off would be
    claimed again after its lease and sent twice.
    """
    task = asyncio.ensure_future(coro)
    keep.add(task)
    task.add_done_callback(keep.discard)
    return await asyncio.shield(task)


async def run_surviving_cancel(
    attempt: Callable[[], Coroutine[Any, Any, T]], keep: set[asyncio.Task[Any]]
) -> T:
    """Await ``attempt()`` here; if our caller is cancelled meanwhile, run it again detached.

    This is how a mark survives the batch's cancellation without a task per row: on the happy
    path the mark is an ordinary await. If the batch times out or the worker is cancelled while
    it runs, psycopg has settled the statement (committed, or cancelled on the server) by the time
    the cancellation reaches us, and a second run in a task of its own (``keep`` holds it) records
    the result. Running it twice is safe because a mark is fenced: once one run has applied,
    the row is no longer pending under this claim's token and the other matches no row.
    """
    try:
        return await attempt()
    except asyncio.CancelledError:
        task = asyncio.ensure_future(attempt())
        keep.add(task)
        task.add_done_callback(keep.discard)
        raise


def _lane(_inst: object, _attribute: object, value: str) -> None:
    # The producers' rule: a worker started on a lane no row can be written to (a typo'd
    # --lane) would otherwise poll an empty lane for ever without a word.
    try:
        check_lane_name(value)
    except ValueError as exc:
        raise ConfigurationError(f"LaneConfig.lane: {exc}") from None


def _poll_interval(_inst: object, _attribute: object, value: float) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not (math.isfinite(value) and value > 0):
        raise ConfigurationError(
            f"LaneConfig.poll_interval must be a finite number of seconds above 0, got {value!r}"
        )


def _duration(*, zero_ok: bool) -> Callable[[object, attrs.Attribute[timedelta], timedelta], None]:
    def check(_inst: object, attribute: attrs.Attribute[timedelta], value: timedelta) -> None:
        if not isinstance(value, timedelta) or value < timedelta(0) or (not zero_ok and not value):
            bound = "0s or more" if zero_ok else "above 0s"
            raise ConfigurationError(
                f"LaneConfig.{attribute.name} must be a duration {bound}, got {value!r}"
            )

    return check


def _rows_in_flight(inst: LaneConfig, _attribute: object, value: int) -> None:
    if not 1 <= value <= inst.timing.batch_size:
        raise ConfigurationError(
            f"rows_in_flight must be between 1 and the batch size {inst.timing.batch_size},"
            f" got {value}"
        )


def _group_marks(inst: LaneConfig, _attribute: object, value: bool) -> None:  # noqa: FBT001
    if not isinstance(value, bool):
        raise ConfigurationError(f"group_marks must be True or False, got {value!r}")
    if value and inst.rows_in_flight < 2:
        raise ConfigurationError(
            "group_marks needs rows_in_flight of 2 or more (the marks of a window of rows in"
            " flight are grouped)"
        )


def _claim_budget(_inst: object, _attribute: object, value: timedelta) -> None:
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise ConfigurationError(f"claim_budget must be a positive duration, got {value!r}")


@attrs.frozen
class LaneConfig:
    """How one lane is worked. Validated by its parts (``EmailTiming`` checks the budget chain)."""

    #: The lane (queue) to claim from: a lane name as ``NewMessage`` takes it.
    lane: str = attrs.field(default="email", validator=_lane)
    #: Budgets, batch size, batch timeout and claim lease.
    timing: EmailTiming = DEFAULT_EMAIL_TIMING
    #: When a transient failure is retried, and when the row gives up.
    backoff: Backoff = EMAIL_BACKOFF
    #: Payload keys removed when a row is dispatched or skipped.
    scrub: ScrubRules = attrs.Factory(ScrubRules)
    #: Seconds to sleep when a claim found less than a full batch.
    poll_interval: float = attrs.field(default=1.0, validator=_poll_interval)
    #: Longest wait a peer's Retry-After can impose (0: Retry-After is never honoured).
    retry_after_cap: timedelta = attrs.field(
        default=DEFAULT_RETRY_AFTER_CAP, validator=_duration(zero_ok=True)
    )
    #: Leader lease TTL when a LeaderLease is given.
    leader_ttl: timedelta = attrs.field(
        default=timedelta(seconds=30), validator=_duration(zero_ok=False)
    )
    #: Rows of a batch sent at the same time. 1 (the default) is the strict mode: a crash can
    #: duplicate at most the one row in flight. N widens that bound to N rows per crash.
    rows_in_flight: int = attrs.field(default=1, validator=_rows_in_flight)

    #: Record the marks of each window of ``rows_in_flight`` rows in ONE statement (opt-in). The
    #: worker sends a window, records it with one commit, and only then starts the next window,
    #: so a crash still repeats at most ``rows_in_flight`` rows; each row stays fenced on its own.
    group_marks: bool = attrs.field(default=False, validator=_group_marks)

    #: Longest a claim may take before the worker gives up on it (and backs off).
    claim_budget: timedelta = attrs.field(default=timedelta(seconds=5), validator=_claim_budget)

    @property
    def mark_budget(self) -> timedelta:
        return self.timing.budgets.mark


@attrs.define
class BatchReport:
    """What one claim-and-send pass did."""

    claimed: int = 0
    dispatched: int = 0
    skipped: int = 0
    failed: int = 0
    retried: int = 0
    released: int = 0
    stale_marks: int = 0
    mark_errors: int = 0
    handler_errors: int = 0
    timed_out: bool = False

    def add(self, other: BatchReport) -> None:
        for field in attrs.fields(BatchReport):
            if field.name != "timed_out":
                setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))


@attrs.define
class WorkerStats(BatchReport):
    """Totals since the worker started."""

    batches: int = 0


_COUNTER_FOR_STATUS = {
    Status.DISPATCHED: "dispatched",
    Status.SKIPPED: "skipped",
    Status.FAILED: "failed",
    Status.PENDING: "retried",
}


class Worker:
    """Claims, sends and marks the rows of one lane. See the module docstring."""

    def __init__(  # noqa: PLR0913 - every collaborator is injected, none is read from the world
        self,
        store: OutboxStore,
        handler: RowHandler,
        config: LaneConfig | None = None,
        *,
        clock: Clock | None = None,
        leader: LeaderLease | None = None,
        holder: str | None = None,
        entropy: Callable[[int], bytes] = secrets.token_bytes,
        jitter: Callable[[], float] = random.random,
        wakeup: Wakeup | None = None,
    ) -> None:
        self.store = store
        self.handler = handler
        self.config = config or LaneConfig()
        self.clock: Clock = clock or SystemClock()
        self.leader = leader
        self.holder = holder or f"worker-{secrets.token_hex(4)}"
        self.stats = WorkerStats()
        #: Ends the idle pause early when new work is signalled (None: poll only).
        self.wakeup = wakeup
        self._entropy = entropy
        self._jitter = jitter
        self._stopping = asyncio.Event()
        self._marks: set[asyncio.Task[Any]] = set()
        self._term: LeaderTerm | None = None
        # The budgets as seconds, once (the config is frozen): the per-row path reads them.
        timing = self.config.timing
        self._per_row = timing.per_row.total_seconds()
        self._mark_budget = self.config.mark_budget.total_seconds()
        self._send_budget = (timing.per_row - self.config.mark_budget).total_seconds()

    # --- control -------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop claiming; finish the row in flight; release the rest (safe from a signal handler)."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def run(self, *, drain: bool = False) -> WorkerStats:
        """Work until :meth:`request_stop` (or, with ``drain``, until a claim finds nothing due)."""
        try:
            failures = 0
            while not self.stopping:
                if not await self._lead():
                    if drain:  # another replica leads this lane and is draining it
                        _log.warning("lane %s is led by another worker", self.config.lane)
                        break
                    await self._pause(self.config.poll_interval)
                    continue
                try:
                    report = await self.run_once()
                except Exception as exc:  # noqa: BLE001 - an outage must not end the worker
                    failures += 1
                    delay = min(self.config.poll_interval * 2**failures, 30.0)
                    _log.warning(
                        "claim on lane %s failed (%s: %s); retrying in %.1fs",
                        self.config.lane,
                        type(exc).__name__,
                        exc,
                        delay,
                    )
                    await self._pause(delay)
                    continue
                failures = 0
                if drain and report.claimed == 0:
                    break
                if report.claimed < self.config.timing.batch_size:
                    await self._pause(self.config.poll_interval, wakeable=True)
        finally:
            await self.wait_for_marks()
            await self._step_down()
        return self.stats

    async def run_once(self) -> BatchReport:
        """Claim one batch and work it. Returns what happened."""
        report = BatchReport()
        timing = self.config.timing
        rows, claim_start = await self._claim()
        lease = timing.claim_lease()
        report.claimed = len(rows)
        if rows:
            lease_end = claim_start + lease.total_seconds()
            batch_end = claim_start + timing.batch_timeout.total_seconds()
            try:
                if self.config.rows_in_flight == 1:
                    # No cancel scope around the strict mode: the row-start gate and each row's
                    # own deadlines already end the batch in time, and a batch scope in this
                    # same task would, when a paused process wakes with both expired, take the
                    # cancellation from the row's deadline and leave the row with no outcome.
                    await self._work_in_order(
                        rows, report, lease_end=lease_end, batch_end=batch_end
                    )
                else:
                    work = self._work_in_windows if self.config.group_marks else self._work
                    async with asyncio.timeout(timing.batch_timeout.total_seconds()):
                        await work(rows, report, lease_end=lease_end, batch_end=batch_end)
            except TimeoutError:
                report.timed_out = True
                _log.warning(
                    "batch timed out; rows not finished keep their lease",
                    extra={"outbox_lane": self.config.lane, "outbox_rows": len(rows)},
                )
        self.stats.add(report)
        self.stats.batches += 1
        return report

    async def _claim(self) -> _Claimed:
        """Claim a batch: the rows, and the monotonic instant the claim started."""
        timing = self.config.timing
        token = ClaimToken.from_entropy(self._entropy(16))
        # The lease started no earlier than this instant, so trusting it until claim_start + lease
        # on our monotonic clock can only err on the short side.
        claim_start = self.clock.monotonic()
        if self.wakeup is not None:
            # Clear, then claim, then wait: a commit that lands during the claim sets it again,
            # so the next pause returns at once instead of sleeping on a due row.
            self.wakeup.clear()
        # Bounded: on a silent network partition an unbounded claim would wait for the kernel's
        # retransmission timeout (~15 min) and a stop request would never be honoured. If the
        # claim did commit, its rows simply come back when their lease ends.
        async with asyncio.timeout(self.config.claim_budget.total_seconds()):
            rows = await self.store.claim_due(
                ClaimRequest(self.config.lane, timing.batch_size, timing.claim_lease(), token)
            )
        return rows, claim_start

    async def wait_for_marks(self) -> None:
        """Wait for every detached mark still running (each is bounded by its own budget)."""
        while self._marks:
            await asyncio.gather(*list(self._marks), return_exceptions=True)

    # --- one batch -----------------------------------------------------------------------------

    async def _work(
        self,
        rows: Sequence[ClaimedRow],
        report: BatchReport,
        *,
        lease_end: float,
        batch_end: float,
    ) -> None:
        slots = asyncio.Semaphore(self.config.rows_in_flight)
        async with asyncio.TaskGroup() as group:
            for index, row in enumerate(rows):
                await slots.acquire()
                if not self._may_start(batch_end):
                    slots.release()
                    await self._release_all(rows[index:], report)
                    return
                group.create_task(self._in_slot(slots, row, report, lease_end=lease_end))

    async def _work_in_order(
        self,
        rows: Sequence[ClaimedRow],
        report: BatchReport,
        *,
        lease_end: float,
        batch_end: float,
    ) -> None:
        """The strict mode: one row at a time, in this task (no task or semaphore per row)."""
        for index, row in enumerate(rows):
            if not self._may_start(batch_end):
                await self._release_all(rows[index:], report)
                return
            await self._one(row, report, lease_end=lease_end)

    async def _work_in_windows(
        self,
        rows: Sequence[ClaimedRow],
        report: BatchReport,
        *,
        lease_end: float,
        batch_end: float,
    ) -> None:
        """The grouped-mark mode: send a window of rows at once, record it with one statement."""
        size = self.config.rows_in_flight
        for start in range(0, len(rows), size):
            if not self._may_start(batch_end):
                await self._release_all(rows[start:], report)
                return
            window = rows[start : start + size]
            outcomes = await asyncio.gather(
                *(self._send(row, report, lease_end=lease_end) for row in window)
            )
            marks = [
                self._decide(row, outcome) for row, outcome in zip(window, outcomes, strict=True)
            ]
            results = await run_surviving_cancel(lambda: self._mark_group(marks), self._marks)  # noqa: B023
            for mark, result in zip(marks, results, strict=True):
                self._count(mark, result, report)

    def _may_start(self, batch_end: float) -> bool:
        """The row-start gate (and shutdown): start a row only if its whole budget fits."""
        return not self.stopping and self.clock.monotonic() + self._per_row <= batch_end

    async def _release_all(self, rows: Sequence[ClaimedRow], report: BatchReport) -> None:
        """Give back rows that will not be started: due again at once, attempt refunded."""
        for row in rows:
            await self._release(row, report)

    async def _in_slot(
        self, slots: asyncio.Semaphore, row: ClaimedRow, report: BatchReport, *, lease_end: float
    ) -> None:
        try:
            await self._one(row, report, lease_end=lease_end)
        finally:
            slots.release()

    async def _one(self, row: ClaimedRow, report: BatchReport, *, lease_end: float) -> None:
        outcome = await self._send(row, report, lease_end=lease_end)
        mark = self._decide(row, outcome)
        result = await run_surviving_cancel(lambda: self._mark(mark), self._marks)
        self._count(mark, result, report)

    async def _send(self, row: ClaimedRow, report: BatchReport, *, lease_end: float) -> Outcome:
        """The handler, within the row's send budget and never past the lease."""
        started = self.clock.monotonic()
        send_end = min(started + self._send_budget, lease_end)
        return await self._attempt(row, report, budget=max(0.0, send_end - started))

    def _decide(self, row: ClaimedRow, outcome: Outcome) -> Mark:
        mark = decide(
            row,
            outcome,
            now=self.clock.now(),
            backoff=self.config.backoff,
            scrub=self.config.scrub,
            jitter=self._jitter(),
            retry_after_cap=self.config.retry_after_cap,
        )
        if _log.isEnabledFor(logging.INFO):
            _log.info(
                "row %s: %s",
                row.id,
                outcome.kind,
                extra={
                    "outbox_lane": row.lane,
                    "outbox_row": row.id,
                    "outbox_attempts": row.attempts,
                    "outbox_outcome": str(outcome.kind),
                    "outbox_reason": outcome.reason,
                },
            )
        return mark

    @staticmethod
    def _count(mark: Mark, result: MarkResult | None, report: BatchReport) -> None:
        if result is MarkResult.APPLIED:
            counter = _COUNTER_FOR_STATUS[mark.status]
            setattr(report, counter, getattr(report, counter) + 1)
        elif result is MarkResult.STALE:
            report.stale_marks += 1
        else:
            report.mark_errors += 1

    async def _attempt(self, row: ClaimedRow, report: BatchReport, *, budget: float) -> Outcome:
        if isinstance(row.payload, str):
            # The store could not decode the stored payload: no handler can send it, so it fails
            # at once instead of crashing a handler (retried for days) or blocking the lane.
            return Outcome.permanent(f"undeliverable: {_undecodable(row.payload)}")
        if budget <= 0:
            return Outcome.transient("no time left on the lease to start the send")
        try:
            async with asyncio.timeout(budget):
                return await self.handler(row, budget=timedelta(seconds=budget))
        except TimeoutError:
            return Outcome.transient(
                f"row budget of {budget:.1f}s ran out mid-send", maybe_delivered=True
            )
        except InvalidMessage as exc:
            return Outcome.permanent(f"undeliverable: {exc}")
        except Exception as exc:  # noqa: BLE001 - a handler bug is this row's failure, not the batch's
            report.handler_errors += 1
            _log.warning(
                "handler raised %s on row %s",
                type(exc).__name__,
                row.id,
                extra={"outbox_lane": row.lane, "outbox_row": row.id},
            )
            return Outcome.transient(f"handler raised {type(exc).__name__}")

    async def _mark(self, mark: Mark) -> MarkResult | None:
        """Record ``mark`` within the mark budget, retrying a failed connection inside it."""
        result = await self._write_within_budget(self.store.mark_if_pending, mark)
        if result is MarkResult.STALE:
            _stale(mark)
        return result

    async def _mark_group(self, marks: Sequence[Mark]) -> Sequence[MarkResult | None]:
        """Record a window's marks in one write (grouped-mark mode), like :meth:`_mark`."""
        results = await self._write_within_budget(self.store.mark_many, marks)
        if results is None:
            return [None] * len(marks)
        for mark, result in zip(marks, results, strict=True):
            if result is MarkResult.STALE:
                _stale(mark)
        return results

    async def _write_within_budget(self, write: Callable[[W], Awaitable[T]], marks: W) -> T | None:
        """Run ``write(marks)`` within the mark budget, retrying a failed connection inside it."""
        budget = self._mark_budget
        delay = 0.05
        try:
            async with asyncio.timeout(budget):
                while True:
                    try:
                        return await write(marks)
                    except (OSError, ConnectionError) as exc:
                        _log.warning("%s failed (%s); retrying", _what(marks), exc)
                    except Exception as exc:  # noqa: BLE001 - a mark must never fail the batch
                        if not _is_connection_problem(exc):
                            # Not the connection, so a retry won't help (a statement the row
                            # breaks, a bug). Give up on this row: its lease brings it back. Type
                            # and id only, no traceback: the error's text may quote the row.
                            _log.error(
                                "%s failed (%s); not recorded, the row will be claimed"
                                " again after its lease",
                                _what(marks),
                                type(exc).__name__,
                                extra={"outbox_row": _row_ids(marks)},
                            )
                            return None
                        _log.warning("%s failed (%s); retrying", _what(marks), exc)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 1.0)
        except TimeoutError:
            _log.error(
                "%s not recorded within %ss; the row will be claimed again after its"
                " lease (a duplicate is possible)",
                _what(marks),
                budget,
            )
            return None

    async def _release(self, row: ClaimedRow, report: BatchReport) -> None:
        with contextlib.suppress(Exception):
            result = await run_detached(self._release_within_budget(row), self._marks)
            if result is MarkResult.APPLIED:
                report.released += 1

    async def _release_within_budget(self, row: ClaimedRow) -> MarkResult:
        # The budget sits inside the detached task: a timeout around run_detached would leave
        # the shielded task running, and a graceful stop would wait for it for ever.
        async with asyncio.timeout(self._mark_budget):
            return await self.store.release(row.id, row.token)

    # --- leadership ----------------------------------------------------------------------------

    async def _lead(self) -> bool:
        if self.leader is None:
            return True
        ttl = self.config.leader_ttl
        if self._term is not None and self.clock.monotonic() < (
            self._term.trusted_until - ttl.total_seconds() / 2
        ):
            return True
        try:
            self._term = await self.leader.try_acquire(self.config.lane, self.holder, ttl=ttl)
        except Exception:  # noqa: BLE001 - no answer means no leadership; try again next tick
            _log.warning("leader election failed for lane %s", self.config.lane)
            self._term = None
        return self._term is not None and self.clock.monotonic() < self._term.trusted_until

    async def _step_down(self) -> None:
        if self.leader is not None and self._term is not None:
            with contextlib.suppress(Exception):
                await self.leader.release(self._term)
            self._term = None

    async def _pause(self, seconds: float, *, wakeable: bool = False) -> None:
        """Sleep, but wake at once when a stop is requested, or (``wakeable``) new work is signalled.

        Only the pause after a claim is wakeable: the claim clears the signal, so a follower (which
        never claims) waiting on it would find it set every time and spin.
        """
        if wakeable and self.wakeup is not None and await self._wait_for_work(self.wakeup, seconds):
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stopping.wait()

    async def _wait_for_work(self, wakeup: Wakeup, seconds: float) -> bool:
        """Wait for a stop, a wake-up or the end of ``seconds``; ``False`` if the wake-up broke."""
        stop = asyncio.ensure_future(self._stopping.wait())
        work = asyncio.ensure_future(wakeup.wait())
        try:
            await asyncio.wait((stop, work), timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            work.cancel()
        if work.done() and not work.cancelled() and work.exception() is not None:
            # Degrade to polling for this pause rather than spin on a signal that fails at once.
            _log.warning("wake-up signal failed (%r); polling", work.exception())
            return False
        return True


def _what(marks: Mark | Sequence[Mark]) -> str:
    """How a log line names a mark, or a grouped mark."""
    if isinstance(marks, Mark):
        return f"mark of row {marks.row_id}"
    return "grouped mark of rows " + ", ".join(str(m.row_id) for m in marks)


def _row_ids(marks: Mark | Sequence[Mark]) -> object:
    return marks.row_id if isinstance(marks, Mark) else [m.row_id for m in marks]


def _stale(mark: Mark) -> None:
    _log.warning(
        "stale mark dropped for row %s (%s): another claim owns it",
        mark.row_id,
        mark.status,
        extra={"outbox_row": mark.row_id},
    )


def _undecodable(stored: str) -> str:
    """Why the store could not decode ``stored`` (the payload rules say it without the values)."""
    try:
        decode_payload(stored)
    except InvalidPayload as exc:
        return str(exc)
    # Decodable here though the store could not decode it (a store with other rules).
    return "the stored payload could not be decoded by the store"


def _is_connection_problem(exc: BaseException) -> bool:
    """psycopg's OperationalError (and pool timeouts) without importing psycopg here."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & {"OperationalError", "PoolTimeout", "InterfaceError"})
