"""One claimed batch: gate each row, send it within its deadline, let the core decide, mark it.

For each row, outside any transaction::

    gate   ── start the row only if a whole per-row budget still fits in the batch
              (outbox_core.lease.may_start_row) and, on a leader-gated lane, inside the term this
              worker can prove (outbox_core.lease.leader_admits_row, via runtime.leadership, which
              renews a term that runs short first); otherwise give it back (due again at once,
              attempt refunded)
    send   ── the handler, until outbox_core.lease.row_deadline(start, per_row - mark, lease end),
              and never past the leader term: a worker never sends after its own lease has ended
              (a sibling may own the row), nor after its term has (a sibling may lead the lane)
    decide ── outbox_core.decide(row, outcome) → Mark (the adapter reported, the core decides)
    mark   ── with its own budget, surviving the batch's cancellation (runtime.marking)

Three ways to walk a batch: strict (one row at a time, in the worker's task), N rows in flight
(a task per row, at most N at once), and grouped marks (a window of N rows sent together, then
recorded by one statement before the next window starts). With grouped marks and the lane's
``key_of`` (the relay's), a window's rows of one key are sent by one task, one after another in
claim order, and the keys at the same time (ADR 0023).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import cast

from outbox_adapters.runtime.config import LaneConfig
from outbox_adapters.runtime.deadline import Deadlines, WindowDeadline
from outbox_adapters.runtime.leadership import Leadership
from outbox_adapters.runtime.marking import Marker
from outbox_adapters.runtime.report import BatchReport, count
from outbox_adapters.telemetry.metrics import LaneMetrics
from outbox_adapters.telemetry.tracing import delivering
from outbox_core.decide import decide
from outbox_core.delivery import Status
from outbox_core.errors import InvalidMessage, InvalidPayload
from outbox_core.lease import BatchClock
from outbox_core.messages import ClaimedRow, Mark
from outbox_core.outcomes import Outcome
from outbox_core.payload import decode_payload
from outbox_core.ports import Clock, MarkResult, RowHandler

__all__ = ["BatchRunner"]

_log = logging.getLogger("outbox_adapters.runtime")


class BatchRunner:
    """Works the rows of one claimed batch; shared by every lane (only the handler differs)."""

    def __init__(  # noqa: PLR0913 - keyword-only collaborators of one batch
        self,
        *,
        handler: RowHandler,
        config: LaneConfig,
        clock: Clock,
        marker: Marker,
        jitter: Callable[[], float],
        stopping: Callable[[], bool],
        leadership: Leadership,
    ) -> None:
        self.handler = handler
        self.config = config
        self.clock = clock
        self.marker = marker
        self._jitter = jitter
        self._stopping = stopping
        self._leadership = leadership
        #: Where this lane's figures are reported (a no-op without OpenTelemetry).
        self.metrics = LaneMetrics(config.lane)
        timing = config.timing
        # The budgets as seconds, once (the config is frozen): the per-row path reads them.
        self._per_row = timing.per_row.total_seconds()
        self._send_budget = (timing.per_row - timing.mark_budget).total_seconds()
        #: No leader lease: the row-start gate is the batch's alone, checked without an await.
        self._ungated = leadership.lease is None
        #: The sends' time limits, one loop timer for the rows sent one after another.
        self._deadlines = Deadlines()

    async def run(self, rows: Sequence[ClaimedRow], times: BatchClock, report: BatchReport) -> None:
        """Work ``rows`` (claimed at ``times.claimed_at``) into ``report``."""
        config = self.config
        if config.rows_in_flight == 1:
            # No cancel scope around the strict mode: the row-start gate and each row's own
            # deadlines already end the batch in time, and a batch scope in this same task would,
            # when a paused process wakes with both expired, take the cancellation from the row's
            # deadline and leave the row with no outcome.
            await self._in_order(rows, times, report)
            return
        work = self._in_windows if config.group_marks else self._in_flight
        async with asyncio.timeout(config.timing.batch_timeout.total_seconds()):
            await work(rows, times, report)

    # --- the three walks -----------------------------------------------------------------------

    async def _in_order(
        self, rows: Sequence[ClaimedRow], times: BatchClock, report: BatchReport
    ) -> None:
        """The strict mode: one row at a time, in this task (no task or semaphore per row)."""
        ungated = self._ungated
        for index, row in enumerate(rows):
            # The common case (no leader lease) decides on the spot; no coroutine per row.
            if not (self._fits_batch(times) if ungated else await self._may_start(times, report)):
                await self._release_all(rows[index:], report)
                return
            await self._one(row, times, report)

    async def _in_flight(
        self, rows: Sequence[ClaimedRow], times: BatchClock, report: BatchReport
    ) -> None:
        slots = asyncio.Semaphore(self.config.rows_in_flight)
        async with asyncio.TaskGroup() as group:
            for index, row in enumerate(rows):
                await slots.acquire()
                if not await self._may_start(times, report):
                    slots.release()
                    await self._release_all(rows[index:], report)
                    return
                group.create_task(self._in_slot(slots, row, times, report))

    async def _in_windows(
        self, rows: Sequence[ClaimedRow], times: BatchClock, report: BatchReport
    ) -> None:
        """The grouped-mark mode: send a window of rows at once, record it with one statement."""
        size = self.config.rows_in_flight
        for start in range(0, len(rows), size):
            if not await self._may_start(times, report):
                await self._release_all(rows[start:], report)
                return
            window = rows[start : start + size]
            # The window's rows (or its keys' chains of rows) start together and end by the same
            # instant: one timer for all.
            deadline = self._deadline(times)
            limit = WindowDeadline(deadline - self.clock.monotonic())
            outcomes: list[Outcome | None] = [None] * len(window)
            shared = (limit, deadline)
            try:
                await asyncio.gather(
                    *(
                        self._in_turn(
                            window,
                            turns,
                            outcomes=outcomes,
                            times=times,
                            report=report,
                            shared=shared,
                        )
                        for turns in self._chains(window)
                    )
                )
            except asyncio.CancelledError:
                # Cancelled (the host, the batch's timeout) while a row of the window still runs:
                # the rows whose send has ended have an outcome, and it is recorded (detached,
                # like any mark that survives cancellation); the others keep their lease.
                ended = [
                    self._decide(row, outcome)
                    for row, outcome in zip(window, outcomes, strict=True)
                    if outcome is not None
                ]
                if ended:
                    self.marker.detach_group(ended)
                raise
            finally:
                limit.close()
            marks = [
                self._decide(row, outcome)
                for row, outcome in zip(window, cast("list[Outcome]", outcomes), strict=True)
            ]
            results = await self.marker.surviving_group(marks)
            for row, mark, result in zip(window, marks, results, strict=True):
                self._count(row, mark, result, report)

    def _chains(self, window: Sequence[ClaimedRow]) -> list[list[int]]:
        """The window's rows (their indexes) in the chains they are sent in: one row a chain, or
        with the lane's ``key_of``, a key's rows together in claim order (``None``: alone)."""
        key_of = self.config.key_of
        if key_of is None:
            return [[index] for index in range(len(window))]
        chains: dict[str, list[int]] = {}
        alone: list[list[int]] = []
        for index, row in enumerate(window):
            key = key_of(row)
            if key is None:
                alone.append([index])
            else:
                chains.setdefault(key, []).append(index)
        return [*chains.values(), *alone]

    async def _in_turn(  # noqa: PLR0913 - one chain of a window and where its outcomes go
        self,
        window: Sequence[ClaimedRow],
        turns: list[int],
        *,
        outcomes: list[Outcome | None],
        times: BatchClock,
        report: BatchReport,
        shared: tuple[WindowDeadline, float],
    ) -> None:
        """Send the rows ``turns`` names, one after another, each outcome into ``outcomes``."""
        for index in turns:
            outcomes[index] = await self._send(window[index], times, report, window=shared)

    # --- one row -------------------------------------------------------------------------------

    def _fits_batch(self, times: BatchClock) -> bool:
        """The batch's row-start gate (and shutdown): a whole row still fits before its deadline."""
        return not self._stopping() and times.may_start_row(self.clock.monotonic(), self._per_row)

    async def _may_start(self, times: BatchClock, report: BatchReport) -> bool:
        """The row-start gates (and shutdown): the batch's, then the leadership's."""
        if not self._fits_batch(times):
            return False
        if self._ungated:
            return True
        if not await self._leadership.admits(self._per_row):
            report.leadership_lost += 1
            _log.warning(
                "lane %s: leadership not proven for a whole row; giving the batch's rest back",
                self.config.lane,
            )
            return False
        # The leadership gate may have waited for a renewal: the batch's gate again, on the clock.
        return self._fits_batch(times)

    async def _release_all(self, rows: Sequence[ClaimedRow], report: BatchReport) -> None:
        report.released += await self.release_all(rows)

    async def release_all(self, rows: Sequence[ClaimedRow]) -> int:
        """Give back rows that will not be started: due again at once, attempt refunded; how many
        the store took back."""
        released = 0
        for row in rows:
            if await self.marker.release(row):
                released += 1
        return released

    async def _in_slot(
        self, slots: asyncio.Semaphore, row: ClaimedRow, times: BatchClock, report: BatchReport
    ) -> None:
        try:
            await self._one(row, times, report)
        finally:
            slots.release()

    async def _one(self, row: ClaimedRow, times: BatchClock, report: BatchReport) -> None:
        outcome = await self._send(row, times, report)
        mark = self._decide(row, outcome)
        self._count(row, mark, await self.marker.surviving(mark), report)

    def _count(
        self, row: ClaimedRow, mark: Mark, result: MarkResult | None, report: BatchReport
    ) -> None:
        """Count the mark's result; a dispatched row also reports its enqueue-to-sent latency."""
        count(mark, result, report)
        if result is MarkResult.APPLIED and mark.status is Status.DISPATCHED:
            self.metrics.delivered(row.created_at, self.clock)

    def _deadline(self, times: BatchClock) -> float:
        """When a send started now must end: its budget, never past the lease nor the term."""
        deadline = times.row_deadline(self.clock.monotonic(), self._send_budget)
        if not self._ungated:
            # The gate admitted the row inside the term; bounding the deadline by the term too
            # keeps a worker frozen between the gate and here (or a row task started after its
            # term was lost) from sending while another worker may lead the lane.
            deadline = min(deadline, self._leadership.trusted_until())
        return deadline

    async def _send(
        self,
        row: ClaimedRow,
        times: BatchClock,
        report: BatchReport,
        *,
        window: tuple[WindowDeadline, float] | None = None,
    ) -> Outcome:
        """The handler, within the row's send budget, never past the lease nor the leader term;
        in a ``window``, within the window's time limit and deadline, shared by its rows."""
        started = self.clock.monotonic()
        deadline = self._deadline(times) if window is None else window[1]
        budget = max(0.0, deadline - started)
        # The delivery span (linked to the enqueue's, ADR 0028) holds the handler's own spans.
        with delivering(row) as delivery:
            if isinstance(row.payload, str):
                # The store could not decode the stored payload: no handler can send it, so it
                # fails at once instead of crashing a handler (retried for days) or blocking the
                # lane.
                outcome = Outcome.permanent(f"undeliverable: {_undecodable(row.payload)}")
            elif budget <= 0:
                outcome = Outcome.transient(
                    "no time left on the lease or leader term to start the send"
                )
            else:
                limit = self._deadlines.within(budget) if window is None else window[0].within()
                try:
                    async with limit:
                        outcome = await self.handler(row, budget=timedelta(seconds=budget))
                except Exception as exc:  # noqa: BLE001 - a handler bug is this row's failure
                    outcome = _failed(row, exc, report, budget)
            delivery.ended(outcome)
        return outcome

    def _decide(self, row: ClaimedRow, outcome: Outcome) -> Mark:
        config = self.config
        mark = decide(
            row,
            outcome,
            backoff=config.backoff,
            scrub=config.scrub,
            jitter=self._jitter(),
            retry_after_cap=config.retry_after_cap,
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


def _failed(row: ClaimedRow, exc: Exception, report: BatchReport, budget: float) -> Outcome:
    """The outcome of a send that raised ``exc``: its budget ran out, the message was refused as
    undeliverable, or the handler has a bug (this row's failure, never the batch's)."""
    if isinstance(exc, TimeoutError):
        report.budget_overruns += 1
        return Outcome.transient(
            f"row budget of {budget:.1f}s ran out mid-send", maybe_delivered=True
        )
    if isinstance(exc, InvalidMessage):
        return Outcome.permanent(f"undeliverable: {exc}")
    report.handler_errors += 1
    _log.warning(
        "handler raised %s on row %s",
        type(exc).__name__,
        row.id,
        extra={"outbox_lane": row.lane, "outbox_row": row.id},
    )
    return Outcome.transient(f"handler raised {type(exc).__name__}")


def _undecodable(stored: str) -> str:
    """Why the store could not decode ``stored`` (the payload rules say it without the values)."""
    try:
        decode_payload(stored)
    except InvalidPayload as exc:
        return str(exc)
    # Decodable here though the store could not decode it (a store with other rules).
    return "the stored payload could not be decoded by the store"
